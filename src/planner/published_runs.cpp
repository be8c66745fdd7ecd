#include "planner/published_runs.h"

#include "planner/time_model.h"

namespace loom::planner {

std::vector<PublishedRun> narayanan_2021_runs() {
  struct Row {
    const char* name;
    int heads, hidden, layers, tp, pp, gpus, batch, micro_batch, v;
    double tflops;
  };
  const Row rows[] = {
      {"1.7B", 24, 2304, 24, 1, 1, 32, 512, 16, 1, 137},     {"3.6B", 32, 3072, 30, 2, 1, 64, 512, 16, 1, 138},
      {"7.5B", 32, 4096, 36, 4, 1, 128, 512, 16, 1, 142},    {"18B", 48, 6144, 40, 8, 1, 256, 1024, 8, 1, 135},
      {"39B", 64, 8192, 48, 8, 2, 512, 1536, 4, 1, 138},     {"76B", 80, 10240, 60, 8, 4, 1024, 1792, 2, 3, 140},
      {"145B", 96, 12288, 80, 8, 8, 1536, 2304, 2, 2, 148},  {"310B", 128, 16384, 96, 8, 16, 1920, 2160, 1, 2, 155},
      {"530B", 128, 20480, 105, 8, 35, 2520, 2520, 1, 3, 163}, {"1T", 160, 25600, 128, 8, 64, 3072, 3072, 1, 1, 163},
  };
  constexpr int kSeq = 2048, kVocab = 51200;
  std::vector<PublishedRun> out;
  for (const Row& r : rows) {
    PublishedRun run;
    run.name = r.name;
    run.workload.model = ModelConfig{kVocab, r.layers, r.heads, r.hidden, kSeq};
    run.workload.global_batch = r.batch;
    // The paper's Megatron-LM: attention materialized (no fused flash
    // kernel in 2021), dropout 0.1 on hidden states and attention, and the
    // data-parallel all-reduce after the backward (its DDP then had no overlap).
    run.workload.model.attention = AttentionKind::materialized;
    run.workload.dropout = true;
    Layout& l = run.layout;
    l.tp = r.tp, l.pp = r.pp, l.v = r.v, l.dp = r.gpus / (r.tp * r.pp);
    l.micro_batch = r.micro_batch, l.micro_batches = r.batch / (l.dp * r.micro_batch);
    l.zero = 0, l.recompute = Recompute::full, l.seq_parallel = false;
    l.precision = ComputePrecision::fp16, l.fp32_grads = true;
    l.overlap_grad_reduce = false, l.bucket_bytes = 0;  // one all-reduce of the contiguous buffer
    // 530B's 105 layers on 35 stages of 3 chunks: one layer a chunk.
    run.tflops_per_gpu = r.tflops;
    const double B = r.batch, s = kSeq, L = r.layers, h = r.hidden, V = kVocab;
    run.flops_per_step = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h));
    out.push_back(run);
  }
  return out;
}

double predicted_tflops_per_gpu(const PublishedRun& run, const ClusterSpec& nodes) {
  const ClusterSpec c = with_devices(nodes, run.layout.devices());
  const StepTime t = step_time(run.workload, run.layout, c);
  return run.flops_per_step / t.step / run.layout.devices() / 1e12;
}

}  // namespace loom::planner

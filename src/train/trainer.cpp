#include "train/trainer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/peft_adapter.h"
#include "core/check.h"
#include "data/text_codec.h"
#include "data/token_source.h"
#include "kernels/backend.h"
#include "model/sampling.h"
#include "model/stage_module.h"
#include "obs/peak_flops.h"
#include "planner/predict.h"
#include "train/checkpointing.h"
#include "train/replica.h"
#include "train/run_banner.h"
#include "train/run_recorder.h"
#include "train/run_summary.h"
#include "train/step_loop.h"

namespace loom {

int set_threads(int requested) {
  int n = requested > 0 ? requested : omp_get_num_procs();
  omp_set_num_threads(n);
  return n;
}

namespace {

// train.init_from = "hf:DIR": every rank maps the checkpoint's files and
// reads the boxes of its own pieces (a resumed run then overwrites them
// from its own checkpoint).
void init_from_hf(const RunConfig& cfg, Replica& replica, FILE* log) {
  const std::string dir = cfg.train.init_from.substr(3);
  const HfModelConfig hf = read_hf_config(dir);
  const std::unique_ptr<HfCheckpoint> ck = HfCheckpoint::open(dir, cfg.model);
  replica.load_parameters(*ck, cfg.model.lora.enabled());  // the adapters are not in it
  if (!log) return;
  std::fprintf(log,
               "init from %s (%s): each rank reads its own pieces (this one %.1f of the %.1f MiB of files); "
               "optimizer state and data order fresh\n",
               dir.c_str(), hf.architecture.c_str(), double(ck->bytes_read()) / (1 << 20),
               double(ck->file_bytes()) / (1 << 20));
  for (const std::string& note : hf.notes) std::fprintf(log, "  note: %s\n", note.c_str());
  if (!ck->unused().empty())
    std::fprintf(log, "  note: %zu tensors of the checkpoint are not part of the model (first: %s)\n",
                 ck->unused().size(), ck->unused()[0].c_str());
}

// The replica's parameters: loom's initialization, then a Hugging Face
// checkpoint and a PEFT adapter over it where the config names them.
void init_parameters(const RunConfig& cfg, Replica& replica, FILE* log) {
  replica.init_parameters(uint64_t(cfg.train.seed));
  if (!cfg.train.init_from.empty()) init_from_hf(cfg, replica, log);
  if (cfg.train.init_adapter.empty()) return;
  // The adapter's factors (and, with bias "all", its biases); the rest stays.
  replica.load_parameters(*PeftAdapter::open(cfg.train.init_adapter, cfg.model), true);
  if (log) std::fprintf(log, "init adapter from %s (PEFT format)\n", cfg.train.init_adapter.c_str());
}

// What the trained model says after train.sample_prompt: a fresh fp32 model
// on the run's backend with the replica's parameters, sampled as `loom
// generate` does.
void print_sample(const RunConfig& cfg, Replica& replica, FILE* log) {
  const float* params = replica.whole_model_params();
  if (!params) {
    std::fprintf(log, "sample: skipped (%s: no rank holds the whole model; loom generate reads a checkpoint)\n",
                 replica.zero_stage() == 3 ? "ZeRO-3" : "tp, pp or ep > 1");
    return;
  }
  const TextCodec codec = TextCodec::for_data(cfg.data.format, cfg.data.path, "data.path");
  std::vector<int32_t> prompt = codec.encode_prompt(cfg.train.sample_prompt);
  for (int32_t& t : prompt) t = std::min(t, cfg.model.vocab_size - 1);  // a byte codec on a small vocabulary
  StageBuffers buffers;
  buffers.backend = &replica.backend();
  auto model_owner = make_stage_module(cfg.model, ModelShard{}, TensorParallel{}, 1, cfg.model.seq_len, buffers);
  StageModule& model = *model_owner;
  std::copy(params, params + model.layout().total, model.params());
  const SamplingOptions opt{cfg.train.sample_tokens, 0.8f, 40, uint64_t(cfg.train.seed), codec.eos()};
  const std::string text = cfg.train.sample_prompt + codec.decode(sample_tokens(model, prompt, opt));
  // Quoted line by line, so that blank lines and indentation show.
  std::fprintf(log, "sample (%d tokens, temperature 0.8, top-k 40):\n", cfg.train.sample_tokens);
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    std::fputs("  | ", log);
    std::fwrite(text.data() + begin, 1, end - begin, log);  // as sampled, NUL bytes included
    std::fputc('\n', log);
    begin = end + 1;
  }
}

// The planner's prediction for this very run, checked at the end (rank 0).
std::optional<planner::RunPrediction> predict_run(const RunConfig& cfg, const ParallelContext& ctx,
                                                  const TrainOptions& options, int threads, FILE* log) {
  try {
    auto prediction = planner::predict_loom_run(cfg, ctx.grid().world_size(),
                                                planner::cluster_for_run(options.cluster, ctx.nodes().nodes(), threads));
    std::fprintf(log, "plan: predicted %s\n", prediction.describe().c_str());
    return prediction;
  } catch (const UserError& e) {
    std::fprintf(log, "plan: no prediction (%s)\n", e.what());
    return std::nullopt;
  }
}

// The last lines: a sample of the trained model and the skipped steps.
void print_epilogue(const RunConfig& cfg, Replica& replica, const TrainResult& result, FILE* log) {
  if (cfg.train.sample_tokens > 0) replica.gather_whole_params();  // sharded masters: every dp rank takes part
  if (!log) return;
  if (cfg.train.sample_tokens > 0) {
    try {
      print_sample(cfg, replica, log);
    } catch (const std::exception& e) {  // the run is done: a sample that fails must not fail it
      std::fprintf(log, "sample: skipped (%s)\n", e.what());
    }
  }
  if (result.empty_steps > 0)
    std::fprintf(log, "%d steps had no valid target in their batch: nothing was updated\n", result.empty_steps);
  if (replica.scaler().mode() != LossScaleMode::off)
    std::fprintf(log, "loss scaling: %d steps skipped for inf/NaN gradients; final scale %g\n", result.overflow_steps,
                 double(replica.scaler().scale()));
}

}  // namespace

TrainResult train(const RunConfig& cfg, const ParallelContext& ctx, FILE* log, const TrainOptions& options) {
  cfg.validate();
  check_layout(cfg, ctx.grid());
  if (!ctx.is_logging_rank()) log = nullptr;  // rank 0 logs
  RunShape shape;
  shape.B = cfg.train.batch_size, shape.T = cfg.model.seq_len;
  // This replica's rows of the global batch, which is a function of (seed,
  // step) alone: any dp size trains on the same data.
  shape.rows = data_parallel_rows(shape.B, ctx.coord().dp, ctx.grid().dp());
  auto data = open_token_source(cfg.data, shape.B, shape.T, cfg.model.vocab_size);  // checks the data first
  shape.threads = set_threads(cfg.runtime.threads > 0 ? cfg.runtime.threads
                                                      : std::max(1, omp_get_num_procs() / ctx.ranks_on_node()));
  // Each replica runs `accumulation` micro-batches of `micro` rows per step.
  shape.micro = cfg.train.micro_batch_size > 0 ? cfg.train.micro_batch_size : shape.rows.size();
  shape.accumulation = shape.rows.size() / shape.micro;
  Backend backend;  // this process's: every part of the replica computes and allocates with it
  Replica replica(backend, cfg, ctx, shape.micro, shape.accumulation);
  init_parameters(cfg, replica, log);

  TrainResult result;
  if (options.keep_params) result.initial_params = replica.gather_params();
  // Every rank measures at once, so ranks sharing cores see the peak they share.
  ctx.world().barrier();
  float peak = float(measure_peak_gflops(shape.threads));
  ctx.world().all_reduce(&peak, 1, DType::f32, ReduceOp::Sum);
  result.peak_gflops = peak;
  const DeviceInfo device = backend.describe();
  std::optional<planner::RunPrediction> prediction;
  if (log) {
    print_run_banner(cfg, ctx, replica, shape, BannerFacts{data->describe(), device.line(), peak}, log);
    prediction = predict_run(cfg, ctx, options, shape.threads, log);
    std::fflush(log);
  }

  // Resume first: a checkpoint that cannot be used stops the run before its
  // run directory is written.
  TrainCheckpoints checkpoints(cfg, ctx);
  const TrainPosition position = checkpoints.resume(options.resume, replica, log);
  RunRecorder recorder(options.run_dir, cfg, ctx, shape.accumulation, !options.resume.empty());
  replica.set_trace(recorder.trace());
  recorder.resumed_at(position.next_step);
  const auto run_start = std::chrono::steady_clock::now();
  const double flops_per_step = cfg.model.train_flops_per_token(shape.T) * shape.tokens_per_step();
  StepLoop loop({cfg, ctx, options, shape, *data, replica, checkpoints, recorder}, position, flops_per_step, result,
                log);
  loop.run();
  checkpoints.finish(log);  // a save still being written: on disk (or a UserError) before the run reports done

  fill_result(result, loop, shape, flops_per_step, replica, ctx);
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
  report_run_end(cfg, ctx, replica, result, loop, recorder, RunEnd{prediction, device, wall_s, shape.accumulation},
                 log);
  print_epilogue(cfg, replica, result, log);
  if (options.keep_params) result.final_params = replica.gather_params();
  return result;
}

}  // namespace loom

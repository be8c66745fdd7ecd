// predict_loom_run asks the engine instead of re-deriving it: the pipeline
// plan the trainer builds (partition, schedule, slots), each chunk's
// activation plan for every recomputation mode, and the ZeRO stage's model
// states. Activations are compared with what real stage modules (and a real
// single-process Replica) allocate: the same plan, so the same bytes.
#include <gtest/gtest.h>

#include "checkpoint/tensor_piece.h"
#include <omp.h>

#include "config/run_pipeline.h"
#include "core/check.h"
#include "kernels/cpu/host_memory.h"
#include "model/stage_module.h"
#include "parallel/grid/parallel_context.h"
#include "planner/predict.h"
#include "roomy_cluster.h"
#include "train/replica.h"

namespace loom::planner {
namespace {

RunConfig tiny(ModelFamily family = ModelFamily::gpt2) {
  RunConfig cfg;
  cfg.model = ModelConfig{512, 4, 4, 64, 32};
  cfg.model.family = family;
  if (family == ModelFamily::llama) cfg.model.n_kv_head = 2, cfg.model.ffn_hidden = 160;
  cfg.train.batch_size = 8;
  cfg.train.micro_batch_size = 2;
  cfg.runtime.threads = omp_get_max_threads();  // the modules below size their scratch for this process
  return cfg;
}

// What the stage modules of every pipeline stage allocate for their
// activations, built as the replica builds them (tp rank 0, the plan's
// slots), for real.
std::vector<double> engine_activation_bytes(const RunConfig& cfg, int dp) {
  const int micro = cfg.train.micro_batch_size, m = cfg.train.batch_size / dp / micro, tp = cfg.parallel.tp;
  const PipelinePlan plan = plan_pipeline(cfg, cfg.parallel.pp, m);
  std::vector<double> per_stage;
  for (int s = 0; s < cfg.parallel.pp; s++) {
    double sum = 0;
    const std::vector<ModelShard> shards = chunk_shards(cfg, plan, s, 0, tp);
    // Several chunks per stage share their activation sets (one pool).
    cpu::HostMemory host;  // the pool's memory
    SharedActivations pool;
    std::vector<std::unique_ptr<StageModule>> modules;
    for (size_t c = 0; c < shards.size(); c++) {
      StageBuffers buffers;
      buffers.slots = plan.shares_slots() ? plan.shared_slots[size_t(s)] : plan.slots[size_t(s)][c];
      buffers.compute = cfg.precision.compute_precision();
      buffers.recompute = cfg.train.recompute_mode();
      if (plan.shares_slots()) buffers.shared_activations = &pool;
      modules.push_back(make_stage_module(cfg.model, shards[c],
                                          TensorParallel::shape_only(0, tp, shards[c].sequence_parallel), micro,
                                          cfg.model.seq_len, buffers));
    }
    if (plan.shares_slots()) pool.allocate(host), sum += double(pool.bytes());
    for (const auto& module : modules) sum += double(module->activation_bytes());
    per_stage.push_back(sum);
  }
  return per_stage;
}

struct Case {
  const char* name;
  int dp, tp, pp, v;
  const char* schedule;
  bool sp;
  const char* recompute;
  const char* compute;
  ModelFamily family = ModelFamily::gpt2;
  bool moe = false;  // the mixtral family: 4 experts, top 2
};

TEST(PlannerEnginePlan, ActivationsAreTheStageModulesAllocations) {
  const Case cases[] = {
      {"one rank", 1, 1, 1, 1, "1f1b", false, "none", "fp32"},
      {"one rank bf16", 1, 1, 1, 1, "1f1b", false, "none", "bf16"},
      {"selective", 1, 1, 1, 1, "1f1b", false, "selective", "fp32"},
      {"full bf16", 1, 1, 1, 1, "1f1b", false, "full", "bf16"},
      {"gpipe", 1, 1, 2, 1, "gpipe", false, "none", "fp32"},
      {"1f1b", 1, 1, 2, 1, "1f1b", false, "none", "bf16"},
      {"interleaved", 1, 1, 2, 2, "interleaved", false, "selective", "fp32"},
      {"tp sp", 1, 2, 1, 1, "1f1b", true, "none", "bf16"},
      {"tp sp full", 1, 2, 1, 1, "1f1b", true, "full", "fp32"},
      {"dp tp pp", 2, 2, 2, 1, "gpipe", false, "selective", "bf16"},
      {"llama pp", 1, 1, 2, 1, "1f1b", false, "full", "fp32", ModelFamily::llama},
      {"llama tp sp", 1, 2, 1, 1, "1f1b", true, "selective", "bf16", ModelFamily::llama},
      {"zb-h1", 1, 1, 2, 1, "zb-h1", false, "none", "bf16"},
      {"zb-v", 1, 1, 2, 2, "zb-v", false, "none", "fp32"},
      {"zb-v tp sp", 1, 2, 2, 2, "zb-v", true, "selective", "bf16", ModelFamily::llama},
      {"mixtral tp sp", 1, 2, 1, 1, "1f1b", true, "none", "bf16", ModelFamily::llama, true},
      {"mixtral pp full", 1, 1, 2, 1, "1f1b", false, "full", "fp32", ModelFamily::llama, true},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    RunConfig cfg = tiny(k.family);
    if (k.moe) cfg.model.n_experts = 4, cfg.model.top_k = 2, cfg.model.moe_ffn_hidden = 64;
    cfg.parallel.tp = k.tp, cfg.parallel.pp = k.pp, cfg.parallel.virtual_stages = k.v;
    cfg.parallel.schedule = k.schedule, cfg.parallel.sequence_parallel = k.sp;
    cfg.train.recompute = k.recompute, cfg.precision.compute = k.compute;
    const int world = k.dp * k.tp * k.pp;
    const RunPrediction p = predict_loom_run(cfg, world, roomy_cluster(world));
    const std::vector<double> engine = engine_activation_bytes(cfg, k.dp);
    ASSERT_EQ(p.stages.size(), engine.size());
    for (size_t s = 0; s < engine.size(); s++) EXPECT_EQ(p.stages[s].activations, engine[s]) << "stage " << s;
  }
}

// A real single-process Replica (the trainer's own object) for each
// recomputation mode and precision.
TEST(PlannerEnginePlan, ActivationsAreTheReplicasAllocations) {
  auto ctx = ParallelContext::create_single();
  for (const char* compute : {"fp32", "bf16"})
    for (const char* recompute : {"none", "selective", "full"}) {
      SCOPED_TRACE(std::string(compute) + " " + recompute);
      RunConfig cfg = tiny();
      cfg.precision.compute = compute, cfg.train.recompute = recompute;
      Replica replica(cfg, *ctx, cfg.train.micro_batch_size, cfg.train.batch_size / cfg.train.micro_batch_size);
      const RunPrediction p = predict_loom_run(cfg, 1, roomy_cluster(1));
      EXPECT_EQ(p.activation_bytes, double(replica.activation_bytes()));
      EXPECT_EQ(p.plan.layers, replica.pipeline().layers);
    }
}

// (Recomputation keeps one block's dropped tensors for the block being
// recomputed: 8 blocks of 128 tokens make the savings plain.)
TEST(PlannerEnginePlan, RecomputationTradesMemoryForTime) {
  RunConfig cfg = tiny();
  cfg.model.n_layer = 8, cfg.model.seq_len = 128;
  std::vector<RunPrediction> p;
  for (const char* r : {"none", "selective", "full"}) {
    cfg.train.recompute = r;
    p.push_back(predict_loom_run(cfg, 1, roomy_cluster(1)));
  }
  EXPECT_GT(p[0].activation_bytes, p[1].activation_bytes);
  EXPECT_GT(p[1].activation_bytes, p[2].activation_bytes);
  EXPECT_LT(p[0].compute_seconds, p[1].compute_seconds);
  EXPECT_LT(p[1].compute_seconds, p[2].compute_seconds);
  EXPECT_EQ(p[0].params_bytes, p[2].params_bytes);
}

// The partition is the trainer's (balanced by cost: the head's big
// vocabulary leaves the last stage fewer blocks) or parallel.pp_layers.
TEST(PlannerEnginePlan, PartitionIsTheTrainers) {
  RunConfig cfg = tiny();
  cfg.model.vocab_size = 8192, cfg.model.n_layer = 6;
  cfg.parallel.pp = 2;
  const RunPrediction balanced = predict_loom_run(cfg, 2, roomy_cluster(2));
  EXPECT_EQ(balanced.plan.layers, plan_pipeline(cfg, 2).layers);
  EXPECT_GT(balanced.plan.layers[0], balanced.plan.layers[1]);
  cfg.parallel.pp_layers = {1, 5};
  const RunPrediction given = predict_loom_run(cfg, 2, roomy_cluster(2));
  EXPECT_EQ(given.plan.layers, (std::vector<int>{1, 5}));
  EXPECT_GT(given.stages[1].params, balanced.stages[1].params);
  EXPECT_GT(given.stages[1].activations, balanced.stages[1].activations);
  cfg.parallel.pp_layers = {3, 2};  // 5 of the 6 blocks
  EXPECT_THROW(predict_loom_run(cfg, 2, roomy_cluster(2)), UserError);
}

// The configured schedule is the one simulated: GPipe holds every
// micro-batch on every stage, 1F1B pp - stage of them; interleaving two
// chunks shrinks the bubble.
TEST(PlannerEnginePlan, SimulatesTheConfiguredSchedule) {
  RunConfig cfg = tiny();
  cfg.parallel.pp = 2;
  auto run = [&](const char* schedule, int v) {
    cfg.parallel.schedule = schedule, cfg.parallel.virtual_stages = v;
    return predict_loom_run(cfg, 2, roomy_cluster(2 * cfg.runtime.threads));  // a core per thread
  };
  const RunPrediction gpipe = run("gpipe", 1), one = run("1f1b", 1), inter = run("interleaved", 2);
  EXPECT_EQ(gpipe.plan.schedule, pp::ScheduleKind::GPipe);
  EXPECT_EQ(gpipe.plan.slots, (std::vector<std::vector<int>>{{4}, {4}}));
  EXPECT_EQ(one.plan.slots, (std::vector<std::vector<int>>{{2}, {1}}));
  EXPECT_GT(gpipe.stages[0].activations, one.stages[0].activations);
  EXPECT_GT(gpipe.stages[1].activations, one.stages[1].activations);
  EXPECT_GT(gpipe.peak_memory_bytes, one.peak_memory_bytes);
  EXPECT_GE(gpipe.step_seconds, one.step_seconds * (1 - 1e-9));
  EXPECT_LT(inter.bubble_seconds, one.bubble_seconds);
  EXPECT_EQ(inter.plan.v, 2);
  EXPECT_EQ(inter.plan.layers.size(), 4u);
  // Interleaving needs the micro-batches to be a multiple of pp, as the trainer does.
  cfg.train.micro_batch_size = 8;  // m = 1
  EXPECT_THROW(run("interleaved", 2), UserError);
}

// Ranks that outnumber the cores share them: a stage idle in the bubble
// leaves its cores to the other, so two pipeline stages on half the cores
// take less than twice as long, and no less than the busier stage's work
// at full speed.
TEST(PlannerEnginePlan, OversubscribedPipelinesShareTheCoresInTheBubble) {
  RunConfig cfg = tiny();
  cfg.parallel.pp = 2, cfg.train.micro_batch_size = 1, cfg.runtime.threads = 1;
  const RunPrediction own = predict_loom_run(cfg, 2, roomy_cluster(2));     // a core per rank
  const RunPrediction shared = predict_loom_run(cfg, 2, roomy_cluster(1));  // two ranks on one core
  EXPECT_GT(own.bubble_seconds, 0);
  EXPECT_LT(shared.step_seconds, 2 * own.step_seconds * (1 - 1e-3));
  EXPECT_GT(shared.step_seconds, own.step_seconds);
}

// Model states by ZeRO stage (n parameters per rank, dp = 4): fp32 ZeRO 0-2
// keep 4n of parameters, bf16 ZeRO 1-2 the master shard, the 16-bit copy
// and the fp32 tensors read as such; ZeRO 3 the master shard and the
// blocks in use.
TEST(PlannerEnginePlan, ZeroStagesShardModelStates) {
  RunConfig cfg = tiny();
  const ClusterSpec c = roomy_cluster(4);
  auto run = [&](int zero, const char* compute) {
    cfg.parallel.zero = zero, cfg.precision.compute = compute;
    return predict_loom_run(cfg, 4, c);
  };
  const double n = double(ParamLayout::for_model(cfg.model).total);
  EXPECT_EQ(run(0, "fp32").params_bytes, 4 * n);
  EXPECT_EQ(run(1, "fp32").params_bytes, 4 * n);
  EXPECT_EQ(run(0, "bf16").params_bytes, 6 * n);
  EXPECT_GT(run(2, "bf16").params_bytes, 2 * n + n);
  EXPECT_LT(run(2, "bf16").params_bytes, 6 * n);
  EXPECT_EQ(run(1, "bf16").optimizer_bytes, 2 * n);
  const RunPrediction z2 = run(2, "bf16"), z3 = run(3, "bf16");
  EXPECT_LT(z3.params_bytes, z2.params_bytes);
  EXPECT_EQ(z3.grads_bytes, z2.grads_bytes);
  EXPECT_EQ(z3.optimizer_bytes, z2.optimizer_bytes);
  EXPECT_GT(z3.comm_seconds, 0);
  EXPECT_GT(z3.step_seconds, z2.step_seconds);  // two gathers per micro-batch
}

// One training step of a replica of `cfg` (vocabulary of 1024) on a fixed batch.
void one_step(Replica& replica, const RunConfig& cfg) {
  const int T = cfg.model.seq_len;
  replica.init_parameters(1);
  std::vector<int32_t> tokens(size_t(cfg.train.batch_size) * T);
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = int32_t(i * 7 % 1024);
  replica.forward_backward(tokens, tokens, T);
  replica.reduce();
  replica.update(1e-3f, 1.f);
}

// A real single-process Replica after a step: its parameter memory (fp32
// buffer or master shard, the fp32 values read, ZeRO-3's most gathered at
// once, the 16-bit copy) against the prediction.
TEST(PlannerEnginePlan, ParameterMemoryIsTheReplicas) {
  auto ctx = ParallelContext::create_single();
  for (const char* compute : {"fp32", "bf16"})
    for (int zero : {0, 1, 3}) {
      SCOPED_TRACE(std::string(compute) + " ZeRO-" + std::to_string(zero));
      RunConfig cfg = tiny();
      cfg.model.n_layer = 6, cfg.model.d_model = 128, cfg.model.vocab_size = 1024;
      cfg.precision.compute = compute, cfg.parallel.zero = zero;
      Replica replica(cfg, *ctx, cfg.train.micro_batch_size, cfg.train.batch_size / cfg.train.micro_batch_size);
      one_step(replica, cfg);
      const double measured = double(replica.param_bytes() + replica.compute_weight_bytes());
      const RunPrediction p = predict_loom_run(cfg, 1, roomy_cluster(1));
      // Equal here; a little slack for where the fp32 values read start on a page.
      EXPECT_NEAR(p.params_bytes, measured, 0.002 * measured) << p.params_bytes << " vs " << measured;
    }
}

// train.freeze: the frozen tensors' gradient and AdamW bytes are gone from
// the prediction as from a real single-process Replica after a step
// (parameters, gradient buffer, moments), and the saved bytes are what
// the frozen tensors would have cost.
TEST(PlannerEnginePlan, FrozenMemoryIsTheReplicas) {
  auto ctx = ParallelContext::create_single();
  for (const char* compute : {"fp32", "bf16"})
    for (int zero : {0, 1, 3}) {
      SCOPED_TRACE(std::string(compute) + " ZeRO-" + std::to_string(zero));
      RunConfig cfg = tiny();
      cfg.model.n_layer = 6, cfg.model.d_model = 128, cfg.model.vocab_size = 1024;
      cfg.precision.compute = compute, cfg.parallel.zero = zero;
      const RunPrediction whole = predict_loom_run(cfg, 1, roomy_cluster(1));
      cfg.train.freeze = {"wte.weight", "h.[0-2].*"};
      Replica replica(cfg, *ctx, cfg.train.micro_batch_size, cfg.train.batch_size / cfg.train.micro_batch_size);
      one_step(replica, cfg);
      const RunPrediction p = predict_loom_run(cfg, 1, roomy_cluster(1));
      const double params = double(replica.param_bytes() + replica.compute_weight_bytes());
      EXPECT_NEAR(p.params_bytes, params, 0.002 * params) << p.params_bytes << " vs " << params;
      EXPECT_EQ(p.optimizer_bytes, double(replica.optimizer_state_bytes()));
      if (zero == 0) {
        EXPECT_EQ(p.grads_bytes, 4.0 * double(replica.grad_floats()));
      }
      // What the frozen tensors no longer keep: gradients and moments (and
      // under sharded masters their fp32 master shard).
      const double frozen = double(replica.frozen_floats());
      ASSERT_GT(frozen, 0);
      EXPECT_EQ(whole.optimizer_bytes - p.optimizer_bytes, 8 * frozen);
      EXPECT_EQ(whole.grads_bytes - p.grads_bytes, (zero == 0 ? 4 : 8) * frozen);
      EXPECT_LT(p.peak_memory_bytes, whole.peak_memory_bytes);
    }
}

// An asynchronous save keeps a copy of the rank's checkpoint pieces: the
// prediction counts what a real Replica hands the save, and nothing when
// saves are synchronous or off.
TEST(PlannerEnginePlan, AsyncCheckpointCopyIsTheReplicasPieces) {
  auto ctx = ParallelContext::create_single();
  for (const char* compute : {"fp32", "bf16"}) {
    SCOPED_TRACE(compute);
    RunConfig cfg = tiny();
    cfg.precision.compute = compute;
    cfg.train.checkpoint_every = 10;
    Replica replica(cfg, *ctx, cfg.train.micro_batch_size, cfg.train.batch_size / cfg.train.micro_batch_size);
    replica.init_parameters(1);
    double piece_bytes = 0;
    for (const CheckpointPiece& p : replica.checkpoint_pieces()) piece_bytes += 4.0 * double(place_of(p, "test").count());
    EXPECT_EQ(predict_loom_run(cfg, 1, roomy_cluster(1)).checkpoint_bytes, piece_bytes);
    const double with_copy = predict_loom_run(cfg, 1, roomy_cluster(1)).peak_memory_bytes;
    cfg.train.async_checkpoint = false;
    EXPECT_EQ(predict_loom_run(cfg, 1, roomy_cluster(1)).checkpoint_bytes, 0);
    EXPECT_EQ(predict_loom_run(cfg, 1, roomy_cluster(1)).peak_memory_bytes, with_copy - piece_bytes);
    cfg.train.async_checkpoint = true, cfg.train.checkpoint_every = 0;
    EXPECT_EQ(predict_loom_run(cfg, 1, roomy_cluster(1)).checkpoint_bytes, 0);
  }
  // ZeRO-1 in bf16 (sharded masters) on 4 ranks: every rank's shard of the
  // masters and moments.
  RunConfig cfg = tiny();
  cfg.precision.compute = "bf16", cfg.parallel.zero = 1, cfg.train.checkpoint_every = 10;
  const double n = double(ParamLayout::for_model(cfg.model).total);
  EXPECT_EQ(predict_loom_run(cfg, 4, roomy_cluster(4)).checkpoint_bytes, 12 * n / 4);
}

ClusterSpec with_memory(int devices, double bytes) {
  ClusterSpec c = roomy_cluster(devices);
  c.memory_bytes = bytes;
  return c;
}

// --layout auto picks recomputation only when nothing faster fits, and
// ZeRO-3 where only it fits (once the engine runs it).
TEST(PlannerEnginePlan, ChooseLayoutRecomputesOnlyToFit) {
  RunConfig cfg = tiny();
  cfg.model.n_layer = 8, cfg.model.seq_len = 128;
  auto peak = [&](const char* r) {
    cfg.train.recompute = r;
    return predict_loom_run(cfg, 1, roomy_cluster(1)).peak_memory_bytes;
  };
  const double none = peak("none"), selective = peak("selective"), full = peak("full");
  ASSERT_GT(none, selective);
  ASSERT_GT(selective, full);
  cfg.train.recompute = "none";
  EXPECT_EQ(choose_layout(cfg, 1, with_memory(1, none * 1.01)).recompute, Recompute::none);
  EXPECT_EQ(choose_layout(cfg, 1, with_memory(1, (none + selective) / 2)).recompute, Recompute::selective);
  EXPECT_EQ(choose_layout(cfg, 1, with_memory(1, (selective + full) / 2)).recompute, Recompute::full);
  EXPECT_THROW(choose_layout(cfg, 1, with_memory(1, full * 0.99)), UserError);
  const Layout l = choose_layout(cfg, 1, with_memory(1, (selective + full) / 2));
  EXPECT_EQ(with_layout(cfg, l).train.recompute, "full");
}

TEST(PlannerEnginePlan, ChooseLayoutProposesZero3WhenOnlyItFits) {
  RunConfig cfg = tiny();
  // One head (no tensor parallelism) and every block on one stage (no
  // pipeline): four ranks can only be four replicas. Parameters mostly in
  // the blocks, small buckets: ZeRO-3's gathered blocks are a small part.
  cfg.model = ModelConfig{256, 8, 1, 128, 32};
  cfg.parallel.pp_layers = {8};
  cfg.parallel.bucket_mb = 0.25f;
  cfg.train.batch_size = 16;  // 4 micro-batches per replica: ZeRO-3 gathers every block 8 times a step
  cfg.train.micro_batch_size = 1;
  cfg.train.recompute = "full";
  auto peak = [&](int zero) {
    cfg.parallel.zero = zero;
    return predict_loom_run(cfg, 4, roomy_cluster(4)).peak_memory_bytes;
  };
  const double z2 = peak(2), z3 = peak(3);
  ASSERT_LT(z3, z2);
  cfg.parallel.zero = 0;
  const ClusterSpec tight = with_memory(4, (z2 + z3) / 2);
  EXPECT_THROW(choose_layout(cfg, 4, tight, LayoutSearch{false}), UserError);
  EXPECT_EQ(choose_layout(cfg, 4, tight, LayoutSearch{true}).zero, 3);
  EXPECT_LE(choose_layout(cfg, 4, roomy_cluster(4), LayoutSearch{true}).zero, 2);  // roomy: less traffic wins
}

}  // namespace
}  // namespace loom::planner

// train.init_from = "hf:DIR" into every layout (issue 36): a Hugging Face
// checkpoint (written by `loom export` from a randomly initialised model;
// tests/checkpoint/hf_import_test.cpp checks such folders against
// transformers) read by each rank of dp2 with ZeRO-3, tp2 + sequence
// parallelism, pp2 (1F1B and ZB-V) and tp2 x pp2, each reading its own
// pieces: first-step gradients within 1e-5 relative per global tensor and
// losses within rtol 1e-4 of the single process started from the same
// folder, for GPT-2 (tied head across the pipeline), LLaMA (untied) and
// LLaMA with Qwen2's q/k/v biases and Llama 3.1's rope scaling; and a
// Mixtral read with its experts spread over ep ranks (issue 41), each rank
// reading its experts' rows of the stacked tensors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <tuple>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/hf_export.h"
#include "comm/layout_check.h"
#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"
#include "train/trainer.h"

namespace {

using loom::test::world_size;

struct Layout {
  int tp, pp;
  const char* schedule;
  int v, zero;
  int ep = 1;
};

std::string layout_name(const testing::TestParamInfo<std::tuple<const char*, Layout>>& info) {
  const auto& [family, l] = info.param;
  std::string s = l.schedule;
  for (char& c : s)
    if (c == '-') c = '_';
  return std::string(family) + "_tp" + std::to_string(l.tp) + "_pp" + std::to_string(l.pp) + "_" + s + "_zero" +
         std::to_string(l.zero) + (l.ep > 1 ? "_ep" + std::to_string(l.ep) : "");
}

// qwen2: LLaMA with q/k/v biases (split over tp like their rows), here
// also with Llama 3.1's rope scaling (its bands inside head_dim 16).
std::vector<std::string> family_sets(const std::string& family) {
  if (family == "gpt2") return {"model.n_layer=4", "model.n_head=4", "model.d_model=64", "model.vocab_size=300"};
  if (family == "mixtral")  // per-sequence balancing: no selection bias for the export to refuse
    return {"model.family=\"mixtral\"", "model.n_layer=4",     "model.n_head=4",       "model.n_kv_head=2",
            "model.d_model=64",       "model.vocab_size=300", "model.n_experts=4",    "model.top_k=2",
            "model.moe_ffn_hidden=64", "model.moe_balance=\"sequence\"", "model.moe_aux_coef=0.01"};
  std::vector<std::string> sets = {"model.family=\"llama\"", "model.n_layer=4",      "model.n_head=4",
                                   "model.n_kv_head=2",      "model.d_model=64",     "model.ffn_hidden=96",
                                   "model.vocab_size=300"};
  if (family == "qwen2")
    for (const char* s : {"model.qkv_bias=true", "model.rope_scaling=\"llama3\"", "model.rope_factor=4.0",
                          "model.rope_original_max_positions=32"})
      sets.push_back(s);
  return sets;
}

std::vector<std::string> run_sets(int micro) {
  return {"model.seq_len=32", "train.batch_size=8", "train.micro_batch_size=" + std::to_string(micro),
          "train.steps=4", "train.eval_every=0", "train.sample_tokens=0", "train.run_dir=\"\"", "runtime.threads=1",
          "parallel.bucket_mb=0.05", "data.format=\"bytes\"", "data.path=\"" LOOM_SOURCE_DIR "/data/sample/kjv.txt\""};
}

// The folder, made once per family by rank 0: a fresh model's step-0
// weights (one step at learning rate 0 changes nothing; qwen2: at 1e-2,
// so that its biases, which start at zero, are not), exported.
const std::string& hf_folder(const std::string& family) {
  static std::map<std::string, std::string> folders;
  auto it = folders.find(family);
  if (it != folders.end()) return it->second;
  const std::string dir = "/tmp/loom_hf_import_layouts_" + std::to_string(world_size()) + "_" + family;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0) {
    loom::remove_tree(dir);
    std::vector<std::string> sets = family_sets(family);
    for (const std::string& s : run_sets(8)) sets.push_back(s);
    for (const char* s : {"train.steps=1", "train.min_lr=0", "train.checkpoint_every=1", "train.warmup_steps=0"})
      sets.push_back(s);
    sets.push_back(family == "qwen2" ? "train.lr=1e-2" : "train.lr=1e-30");
    sets.push_back("train.checkpoint_dir=\"" + dir + "/ckpt\"");
    auto one = loom::ParallelContext::create_single();
    loom::train(loom::load_run_config("", sets), *one, nullptr);
    loom::export_hf(loom::Checkpoint::open(loom::resolve_resume(dir + "/ckpt", "").dir), dir + "/hf");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return folders[family] = dir + "/hf";
}

loom::RunConfig import_config(const std::string& family, const Layout& l, int dp) {
  std::vector<std::string> sets = run_sets(8 / (dp * 2));
  sets.push_back("train.init_from=\"hf:" + hf_folder(family) + "\"");
  for (const std::string& s : {"parallel.tp=" + std::to_string(l.tp), "parallel.pp=" + std::to_string(l.pp),
                               std::string("parallel.schedule=\"") + l.schedule + "\"",
                               "parallel.virtual_stages=" + std::to_string(l.v),
                               "parallel.zero=" + std::to_string(l.zero), "parallel.ep=" + std::to_string(l.ep),
                               std::string("parallel.sequence_parallel=") + (l.tp > 1 ? "true" : "false")})
    sets.push_back(s);
  return loom::load_run_config("", sets);
}

loom::TrainOptions keep_grads() {
  loom::TrainOptions o;
  o.keep_first_step_grads = true;
  return o;
}

const loom::TrainResult& single(const std::string& family) {
  static std::map<std::string, loom::TrainResult> results;
  auto it = results.find(family);
  if (it == results.end()) {
    auto one = loom::ParallelContext::create_single();
    it = results.emplace(family, loom::train(import_config(family, {1, 1, "1f1b", 1, 0}, 1), *one, nullptr,
                                             keep_grads()))
             .first;
  }
  return it->second;
}

class HfImportLayouts : public testing::TestWithParam<std::tuple<const char*, Layout>> {};

TEST_P(HfImportLayouts, ReadIntoTheLayoutReproducesTheSingleProcess) {
  const auto& [family, l] = GetParam();
  const int world = world_size();
  if (world % (l.tp * l.pp) != 0) GTEST_SKIP() << "tp x pp does not divide " << world;
  const int dp = world / (l.tp * l.pp);
  if (8 % (dp * 2) != 0) GTEST_SKIP() << "the batch does not split";
  if (l.zero > 0 && dp == 1) GTEST_SKIP() << "ZeRO needs dp > 1";
  if (dp % l.ep != 0) GTEST_SKIP() << "ep " << l.ep << " does not divide dp " << dp;
  const std::string& want_family = family;
  const loom::TrainResult& want = single(want_family);
  const auto& ctx = loom::test::layout_context(l.tp, l.pp, 1, l.ep);
  const loom::RunConfig cfg = import_config(family, l, dp);
  const loom::TrainResult got = loom::train(cfg, ctx, nullptr, keep_grads());
  for (const auto& [name, err] : loom::test::gradient_errors(cfg, ctx, got.first_step_grads, want.first_step_grads))
    EXPECT_LE(err, 1e-5) << name;
  loom::test::expect_same_losses(got, want);
}

INSTANTIATE_TEST_SUITE_P(
    FamiliesAndLayouts, HfImportLayouts,
    testing::Combine(testing::Values("gpt2", "llama"),
                     testing::Values(Layout{1, 1, "1f1b", 1, 0}, Layout{1, 1, "1f1b", 1, 3}, Layout{2, 1, "1f1b", 1, 1},
                                     Layout{1, 2, "1f1b", 1, 0}, Layout{1, 2, "zb-v", 2, 0},
                                     Layout{2, 2, "1f1b", 1, 1})),
    layout_name);

INSTANTIATE_TEST_SUITE_P(Qwen2, HfImportLayouts,
                         testing::Combine(testing::Values("qwen2"),
                                          testing::Values(Layout{1, 1, "1f1b", 1, 3}, Layout{2, 1, "1f1b", 1, 1},
                                                          Layout{1, 2, "zb-v", 2, 0}, Layout{2, 2, "1f1b", 1, 1})),
                         layout_name);

INSTANTIATE_TEST_SUITE_P(Mixtral, HfImportLayouts,
                         testing::Combine(testing::Values("mixtral"),
                                          testing::Values(Layout{1, 1, "1f1b", 1, 0, 2}, Layout{1, 1, "1f1b", 1, 3, 4},
                                                          Layout{2, 1, "1f1b", 1, 1, 2})),
                         layout_name);

}  // namespace

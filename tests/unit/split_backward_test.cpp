// Zero-bubble schedules' split backward (issue 20): backward_input then
// backward_weight gives bitwise the gradients (weights and the stage's input
// gradient) and the loss of the combined backward_stage, with two
// micro-batches in flight whose B and W interleave (B0 B1 W0 W1), on the
// whole model and on a middle chunk, both families, fp32 / bf16 / fp16,
// without and with selective recomputation; every parameter is reported
// ready once per micro-batch either way.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "config/run_config.h"
#include "core/check.h"
#include "model/stage_module.h"

namespace loom {
namespace {

constexpr int kB = 2;

RunConfig config(const std::string& family, const std::string& precision) {
  return load_run_config(
      family == "llama" ? LOOM_SOURCE_DIR "/configs/llama-tiny.toml" : LOOM_SOURCE_DIR "/configs/tiny.toml",
      {"model.n_layer=3", "model.vocab_size=300", "model.seq_len=16", "runtime.threads=1",
       "precision.compute=\"" + precision + "\""});
}

struct Outcome {
  std::vector<float> grads, input_grad[2];
  float loss[2] = {0, 0};
  std::map<int, int> ready;  // parameter -> times reported
};

Outcome run(const RunConfig& cfg, const ModelShard& shard, Recompute recompute, bool split) {
  const int T = cfg.model.seq_len, N = kB * T, C = cfg.model.d_model;
  StageBuffers buffers;
  buffers.slots = 2, buffers.compute = cfg.precision.compute_precision(), buffers.recompute = recompute;
  auto m = make_stage_module(cfg.model, shard, TensorParallel{}, kB, T, buffers);
  m->init_parameters(7);
  m->refresh_compute_weights();
  Outcome out;
  m->set_grad_ready_hook([&](int i) { out.ready[i]++; });
  std::vector<int32_t> tokens[2], targets[2];
  for (int mb = 0; mb < 2; mb++)
    for (int i = 0; i < N; i++) {
      tokens[mb].push_back((i * 37 + mb * 11) % cfg.model.vocab_size);
      targets[mb].push_back((i * 53 + mb * 5 + 1) % cfg.model.vocab_size);
    }
  auto fill = [&](float* p, int mb, float scale) {
    for (int i = 0; i < N * C; i++) p[i] = scale * float((i * 29 + mb * 7) % 19 - 9);
  };
  for (int mb = 0; mb < 2; mb++) {
    if (!shard.embedding) fill(m->stage_input(mb), mb, 0.1f);
    m->forward_stage(mb, tokens[mb].data(), kB, T);
    if (!shard.head) fill(m->stage_grad(mb), mb, 0.01f);
  }
  for (int mb = 0; mb < 2; mb++)
    out.loss[mb] = split ? m->backward_input(mb, tokens[mb].data(), targets[mb].data(), kB, T, 1.f)
                         : m->backward_stage(mb, tokens[mb].data(), targets[mb].data(), kB, T, 1.f);
  if (split)
    for (int mb = 0; mb < 2; mb++) m->backward_weight(mb, kB, T);
  out.grads.assign(m->grads(), m->grads() + m->params_size());
  if (!shard.embedding)
    for (int mb = 0; mb < 2; mb++) out.input_grad[mb].assign(m->stage_grad(mb), m->stage_grad(mb) + N * C);
  return out;
}

bool bitwise(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

class SplitBackward : public testing::TestWithParam<std::tuple<const char*, const char*, Recompute>> {};

TEST_P(SplitBackward, IsBitwiseTheCombinedBackward) {
  const auto [family, precision, recompute] = GetParam();
  const RunConfig cfg = config(family, precision);
  ModelShard middle;
  middle.first_layer = 1, middle.end_layer = 3, middle.embedding = false, middle.head = false;
  for (const ModelShard& shard : {ModelShard{}, middle}) {
    SCOPED_TRACE(shard.embedding ? "whole model" : "middle chunk");
    const Outcome combined = run(cfg, shard, recompute, false), split = run(cfg, shard, recompute, true);
    EXPECT_TRUE(bitwise(split.grads, combined.grads));
    for (int mb = 0; mb < 2; mb++) {
      EXPECT_TRUE(bitwise(split.input_grad[mb], combined.input_grad[mb])) << "micro-batch " << mb;
      EXPECT_EQ(split.loss[mb], combined.loss[mb]);
    }
    EXPECT_EQ(split.ready, combined.ready);
    EXPECT_FALSE(combined.ready.empty());
    for (const auto& [param, times] : combined.ready) EXPECT_EQ(times, 2) << "parameter " << param;
    bool nonzero = false;
    for (float g : split.grads) nonzero |= g != 0.f;
    EXPECT_TRUE(nonzero);
  }
}

INSTANTIATE_TEST_SUITE_P(FamiliesPrecisionsRecompute, SplitBackward,
                         testing::Combine(testing::Values("gpt2", "llama"), testing::Values("fp32", "bf16", "fp16"),
                                          testing::Values(Recompute::none, Recompute::selective)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param) + "_" +
                                  to_string(std::get<2>(info.param));
                         });

TEST(SplitBackward, RefusesFullRecomputation) {
  const RunConfig cfg = config("gpt2", "fp32");
  StageBuffers buffers;
  buffers.recompute = Recompute::full;
  auto m = make_stage_module(cfg.model, ModelShard{}, TensorParallel{}, 1, cfg.model.seq_len, buffers);
  std::vector<int32_t> tokens(size_t(cfg.model.seq_len), 1);
  m->forward_stage(0, tokens.data(), 1, cfg.model.seq_len);
  EXPECT_THROW(m->backward_input(0, tokens.data(), tokens.data(), 1, cfg.model.seq_len, 1.f), UserError);
}

}  // namespace
}  // namespace loom

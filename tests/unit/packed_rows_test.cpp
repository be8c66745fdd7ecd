// Packed rows (issue 37): documents laid end to end in a row, kept apart by
// the attention, their positions restarting at each document, give the same
// loss and gradients as the same documents one per row (padded rows), within
// 1e-5 relative per tensor: GPT-2 (learned position table) and LLaMA
// (rotary positions, grouped-query), with the materialized and the tiled
// attention. The ring (context parallelism) keeps them apart too:
// tests/comm/context_parallel_test.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/stage_module.h"

namespace {

constexpr int kT = 80;
constexpr int kEos = 1;

// A document of n + 1 tokens fills n places of a row: its tokens as inputs,
// the next ones as targets (some not learned from: -1).
struct Doc {
  std::vector<int32_t> tokens, targets;
};

std::vector<Doc> documents(int vocab) {
  // Two packed rows: places 30 + 50 (full), and 7 + 1 + 40 + 20 (12 of padding).
  const std::vector<int> places = {30, 50, 7, 1, 40, 20};
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> token(2, vocab - 1);
  std::vector<Doc> docs;
  for (int n : places) {
    Doc d;
    std::vector<int32_t> ids(size_t(n) + 1);
    for (int32_t& x : ids) x = token(rng);
    for (int i = 0; i < n; i++) {
      d.tokens.push_back(ids[size_t(i)]);
      d.targets.push_back(i < n / 3 ? -1 : ids[size_t(i) + 1]);  // a prompt, then the answer
    }
    docs.push_back(d);
  }
  return docs;
}

struct Batch {
  int B;
  std::vector<int32_t> tokens, targets, positions;
};

Batch padded(const std::vector<Doc>& docs) {
  Batch b{int(docs.size()), {}, {}, {}};
  for (const Doc& d : docs) {
    for (int t = 0; t < kT; t++) {
      const bool in = size_t(t) < d.tokens.size();
      b.tokens.push_back(in ? d.tokens[size_t(t)] : kEos);
      b.targets.push_back(in ? d.targets[size_t(t)] : -1);
    }
  }
  return b;
}

Batch packed(const std::vector<Doc>& docs) {
  Batch b{2, {}, {}, {}};
  const std::vector<std::vector<int>> rows = {{0, 1}, {2, 3, 4, 5}};
  for (const auto& row : rows) {
    size_t used = 0;
    for (int k : row) {
      const Doc& d = docs[size_t(k)];
      for (size_t i = 0; i < d.tokens.size(); i++) {
        b.tokens.push_back(d.tokens[i]);
        b.targets.push_back(d.targets[i]);
        b.positions.push_back(int32_t(i));
      }
      used += d.tokens.size();
    }
    for (size_t t = used; t < size_t(kT); t++) {  // padding: a document of its own
      b.tokens.push_back(kEos);
      b.targets.push_back(-1);
      b.positions.push_back(int32_t(t - used));
    }
  }
  return b;
}

struct Run {
  float loss;
  std::vector<std::vector<float>> grads;  // per tensor
};

Run run(const loom::ModelConfig& cfg, const Batch& batch, bool with_positions) {
  auto model = loom::make_model(cfg, batch.B, kT);
  model->init_parameters(3);
  model->zero_grads();
  model->set_documents(0, with_positions ? batch.positions.data() : nullptr, batch.B, kT);
  Run r;
  r.loss = model->forward_backward(batch.tokens.data(), batch.targets.data(), batch.B, kT);
  for (size_t i = 0; i < model->layout().params.size(); i++) {
    const float* g = model->grad(int(i));
    r.grads.emplace_back(g, g + model->layout().params[i].numel);
  }
  return r;
}

void expect_packed_equals_padded(loom::ModelConfig cfg) {
  for (loom::AttentionKind kind : {loom::AttentionKind::materialized, loom::AttentionKind::tiled}) {
    SCOPED_TRACE(kind == loom::AttentionKind::tiled ? "tiled" : "materialized");
    cfg.attention = kind;
    const std::vector<Doc> docs = documents(cfg.vocab_size);
    const Run one_per_row = run(cfg, padded(docs), false), together = run(cfg, packed(docs), true);
    EXPECT_NEAR(together.loss, one_per_row.loss, 1e-5 * std::abs(one_per_row.loss));
    auto model = loom::make_model(cfg, 1, kT);
    for (size_t i = 0; i < one_per_row.grads.size(); i++) {
      double worst = 0, scale = 0;
      for (size_t j = 0; j < one_per_row.grads[i].size(); j++) {
        worst = std::max(worst, std::abs(double(together.grads[i][j]) - one_per_row.grads[i][j]));
        scale = std::max(scale, std::abs(double(one_per_row.grads[i][j])));
      }
      EXPECT_LE(worst, 1e-5 * scale) << model->layout().params[i].name;
    }
    // Without the documents the packed rows attend across them: a different loss.
    const Run leaking = run(cfg, packed(docs), false);
    EXPECT_GT(std::abs(leaking.loss - one_per_row.loss), 1e-4);
  }
}

TEST(PackedRows, Gpt2MatchesOneDocumentPerRow) {
  expect_packed_equals_padded(loom::ModelConfig{128, 2, 4, 64, kT});
}

TEST(PackedRows, LlamaMatchesOneDocumentPerRow) {
  loom::ModelConfig cfg{128, 2, 4, 64, kT};
  cfg.family = loom::ModelFamily::llama;
  cfg.n_kv_head = 2;
  cfg.ffn_hidden = 96;
  expect_packed_equals_padded(cfg);
}

}  // namespace

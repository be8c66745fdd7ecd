// The single-process pieces of data parallelism: bucket cuts and shards,
// shard pieces, AdamW over shards, the model's gradient-ready hook, the
// gradient buffer's page release and the new config fields.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kernels/backend.h"
#include "comm/self_comm.h"
#include "config/run_config.h"
#include "core/check.h"
#include "core/rng.h"
#include "model/stage_module.h"
#include "optim/adamw.h"
#include "parallel/dp/bucket_plan.h"
#include "core/paged_buffer.h"
#include "parallel/dp/grad_reducer.h"

namespace {

loom::ModelConfig tiny_model() { return loom::ModelConfig{256, 2, 2, 64, 32}; }

TEST(BucketPlan, EqualAlignedShardsCoverTheBuffer) {
  const loom::FlatLayout layout = loom::ParamLayout::for_model(tiny_model()).flat();
  for (int shards : {1, 2, 3, 4, 8}) {
    for (double bytes : {1.0, 50e3, 1e9}) {
      loom::BucketPlan plan(layout, bytes, shards);
      SCOPED_TRACE(testing::Message() << shards << " shards, " << bytes << " bytes");
      const int64_t unit = loom::BucketPlan::kAlignFloats * shards;
      EXPECT_GE(plan.padded_total(), layout.total);
      EXPECT_LT(plan.padded_total() - layout.total, unit);
      EXPECT_EQ(plan.padded_total() % unit, 0);
      int64_t at = 0;
      for (size_t b = 0; b < plan.buckets().size(); b++) {
        const auto& bucket = plan.buckets()[b];
        EXPECT_EQ(bucket.range.begin, at);
        EXPECT_EQ(bucket.range.size() % unit, 0);
        at = bucket.range.end;
        // Exactly the tensors that overlap it.
        for (int t = 0; t < int(layout.tensors.size()); t++) {
          const auto& x = layout.tensors[t];
          bool overlaps = x.offset < bucket.range.end && x.offset + x.numel > bucket.range.begin;
          EXPECT_EQ(overlaps, t >= bucket.first_tensor && t < bucket.end_tensor) << "bucket " << b << " tensor " << t;
        }
      }
      EXPECT_EQ(at, plan.padded_total());
      // The shards of all ranks tile every bucket, and each rank owns 1/shards.
      std::vector<int> owner(size_t(plan.padded_total()), -1);
      for (int r = 0; r < shards; r++) {
        auto ranges = plan.shard_ranges(r);
        EXPECT_EQ(loom::total_size(ranges), plan.shard_total());
        for (size_t b = 0; b < ranges.size(); b++) {
          EXPECT_EQ(ranges[b].begin - plan.buckets()[b].range.begin, r * plan.shard_size(int(b)));
          EXPECT_EQ(plan.shard_offset(int(b)), loom::total_size({ranges.begin(), ranges.begin() + b}));
          for (int64_t i = ranges[b].begin; i < ranges[b].end; i++) owner[size_t(i)] = r;
        }
      }
      EXPECT_EQ(std::count(owner.begin(), owner.end(), -1), 0);
    }
  }
  EXPECT_EQ(loom::BucketPlan(layout, 1e9, 1).buckets().size(), 1u);
  EXPECT_GE(loom::BucketPlan(layout, 50e3, 2).buckets().size(), 4u);
}

TEST(FlatLayout, PiecesAreTheTensorElementsInsideTheRanges) {
  loom::FlatLayout layout;
  layout.tensors = {{0, 10, true}, {16, 5, false}, {32, 40, true}};
  layout.total = 80;
  auto pieces = loom::pieces_of(layout, {{4, 20}, {30, 40}, {70, 80}});
  ASSERT_EQ(pieces.size(), 4u);
  auto expect = [&](size_t i, int tensor, int64_t offset, int64_t packed, int64_t numel) {
    EXPECT_EQ(pieces[i].tensor, tensor) << i;
    EXPECT_EQ(pieces[i].offset, offset) << i;
    EXPECT_EQ(pieces[i].packed, packed) << i;
    EXPECT_EQ(pieces[i].numel, numel) << i;
  };
  expect(0, 0, 4, 0, 6);    // range [4, 20) packs at 0: [4, 10) of tensor 0
  expect(1, 1, 16, 12, 4);  // and [16, 20) of tensor 1, 12 floats in
  expect(2, 2, 32, 18, 8);  // range [30, 40) packs at 16: [32, 40) of tensor 2
  expect(3, 2, 70, 26, 2);  // range [70, 80) packs at 26: [70, 72) of tensor 2
}

// AdamW over every rank's shard, one after another, updates each element
// exactly as AdamW over the whole buffer: shards cut through tensors, and
// weight decay still follows the tensor of each element.
TEST(ShardedAdamW, ShardsTogetherEqualTheWholeBufferBitwise) {
  const loom::FlatLayout layout = loom::ParamLayout::for_model(tiny_model()).flat();
  const int shards = 3;
  loom::BucketPlan plan(layout, 20e3, shards);
  const size_t n = size_t(plan.padded_total());
  std::vector<float> whole(n, 0.f), grads(n, 0.f);
  for (const auto& t : layout.tensors) {
    loom::rng_fill_normal(whole.data() + t.offset, t.numel, 1, uint64_t(t.offset), 0, 0.f, 1.f);
    loom::rng_fill_normal(grads.data() + t.offset, t.numel, 2, uint64_t(t.offset), 0, 0.f, 1.f);
  }
  std::vector<float> sharded = whole;
  loom::AdamWConfig cfg{0.9f, 0.95f, 1e-8f, 0.5f};
  loom::CpuBackend ops;
  loom::AdamW reference(ops, layout, cfg);
  std::vector<std::unique_ptr<loom::AdamW>> parts;
  std::vector<std::vector<float>> packed(shards);
  for (int r = 0; r < shards; r++) {
    auto ranges = plan.shard_ranges(r);
    parts.push_back(std::make_unique<loom::AdamW>(ops, layout, ranges, cfg));
    EXPECT_EQ(parts.back()->state_bytes(), size_t(plan.shard_total()) * 8);
    for (const auto& range : ranges)
      packed[r].insert(packed[r].end(), grads.begin() + range.begin, grads.begin() + range.end);
  }
  double sum_sq = 0;
  for (int r = 0; r < shards; r++) sum_sq += parts[r]->grad_sum_of_squares(packed[r].data());
  EXPECT_NEAR(sum_sq, reference.grad_sum_of_squares(grads.data()), 1e-9 * sum_sq);
  for (int step = 0; step < 3; step++) {
    reference.step(whole.data(), grads.data(), 1e-2f, 0.7f);
    for (int r = 0; r < shards; r++) parts[r]->step(sharded.data(), packed[r].data(), 1e-2f, 0.7f);
  }
  EXPECT_EQ(0, std::memcmp(whole.data(), sharded.data(), n * sizeof(float)));
  // Decay was applied where it should be: a decayed tensor with zero
  // gradient shrinks, a non-decayed one does not move.
  std::vector<float> p(n, 1.f), g(n, 0.f);
  loom::AdamW(ops, layout, plan.shard_ranges(1), cfg).step(p.data(), g.data(), 0.1f, 1.f);
  for (const auto& piece : loom::pieces_of(layout, plan.shard_ranges(1))) {
    float want = layout.tensors[piece.tensor].weight_decay ? 1.f - 0.1f * 0.5f : 1.f;
    for (int64_t i = 0; i < piece.numel; i++) ASSERT_FLOAT_EQ(p[size_t(piece.offset + i)], want);
  }
}

// Backward reports each parameter once, in layout order, after its last
// write: the gradient seen at the report is the final one.
// Both families: LLaMA's untied head is reported when its backward is done.
TEST(StageModule, GradReadyHookReportsEachFinalGradientOnceInLayoutOrder) {
  loom::ModelConfig llama = tiny_model();
  llama.family = loom::ModelFamily::llama, llama.n_kv_head = 1, llama.ffn_hidden = 48;
  for (const loom::ModelConfig& cfg : {tiny_model(), llama}) {
    SCOPED_TRACE(loom::model_family_name(cfg.family));
    const int B = 2, T = 16;
    auto model_owner = loom::make_model(cfg, B, T);
    loom::StageModule& model = *model_owner;
    model.init_parameters(7);
    std::vector<int32_t> tokens(B * T), targets(B * T);
    for (int i = 0; i < B * T; i++) tokens[i] = (i * 37) % 256, targets[i] = (i * 11 + 3) % 256;
    const auto& layout = model.layout();
    std::vector<int> order;
    std::vector<std::vector<float>> at_report(layout.params.size());
    model.set_grad_ready_hook([&](int i) {
      order.push_back(i);
      at_report[i].assign(model.grad(i), model.grad(i) + layout.params[i].numel);
    });
    model.zero_grads();
    model.forward_backward(tokens.data(), targets.data(), B, T);
    std::vector<int> want(layout.params.size());
    std::iota(want.begin(), want.end(), 0);
    EXPECT_EQ(order, want);
    for (size_t i = 0; i < layout.params.size(); i++)
      EXPECT_EQ(0, std::memcmp(at_report[i].data(), model.grad(int(i)), at_report[i].size() * sizeof(float)))
          << layout.params[i].name;
    model.set_grad_ready_hook(nullptr);
    order.clear();
    model.forward_backward(tokens.data(), targets.data(), B, T);
    EXPECT_TRUE(order.empty());
  }
}

TEST(PagedBuffer, ReleasedPagesReadAsZeroAndLeaveMemory) {
  for (bool huge : {false, true}) {
    loom::PagedBuffer buf(3 << 20, huge);  // 12 MiB
    const int64_t page = buf.page_floats();
    EXPECT_EQ(buf.resident_bytes(), 0u);
    std::fill(buf.data(), buf.data() + buf.size(), 1.f);
    EXPECT_EQ(buf.resident_bytes(), size_t(buf.size()) * 4);
    buf.release({page, 3 * page});
    EXPECT_EQ(buf.resident_bytes(), size_t(buf.size() - 2 * page) * 4) << "huge pages " << huge;
    EXPECT_EQ(buf.data()[page - 1], 1.f);
    EXPECT_EQ(buf.data()[page], 0.f);
    EXPECT_EQ(buf.data()[3 * page - 1], 0.f);
    EXPECT_EQ(buf.data()[3 * page], 1.f);
    EXPECT_THROW(buf.release({1, page}), loom::Error);
    buf.release_all();
    EXPECT_EQ(buf.resident_bytes(), 0u);
  }
}

// With a group of one, reduce-scatter is a copy into the shard buffer, and
// the buffer's pages leave memory as soon as the buckets over them are
// reduced (4 KiB pages here, to see it happen bucket by bucket).
TEST(GradReducer, OneRankReduceScatterReleasesReducedPages) {
  const loom::FlatLayout layout = loom::ParamLayout::for_model(tiny_model()).flat();
  loom::BucketPlan plan(layout, 20e3, 1);
  loom::PagedBuffer grads(plan.padded_total(), /*huge_pages=*/false);
  ASSERT_EQ(grads.page_floats(), 1024);
  loom::SelfComm self("dp");
  loom::CpuBackend ops;
  loom::GradReducer reducer(ops, plan, self, grads, loom::GradReducer::Mode::ReduceScatter, true);
  for (int64_t i = 0; i < layout.total; i++) grads.data()[i] = float(i % 97);
  const std::vector<float> want(grads.data(), grads.data() + plan.padded_total());
  const int64_t written = (layout.total + 1023) / 1024;  // pages
  // Pages still held once the first `tensors_done` tensors are reported.
  auto held_bytes = [&](int tensors_done) {
    int64_t released = 0;  // floats: below the first bucket not yet complete
    for (const auto& b : plan.buckets())
      if (b.end_tensor > tensors_done) break;
      else released = b.range.end;
    if (released == plan.padded_total()) return size_t(0);
    return size_t(written - released / 1024) * 4096;
  };
  EXPECT_EQ(grads.resident_bytes(), held_bytes(0));
  reducer.begin();
  for (int t = 0; t < int(layout.tensors.size()); t++) {
    reducer.on_grad_ready(t);
    EXPECT_EQ(grads.resident_bytes(), held_bytes(t + 1)) << "after tensor " << t;
  }
  EXPECT_LT(held_bytes(int(layout.tensors.size()) - 2), held_bytes(0));
  reducer.finish();
  EXPECT_EQ(grads.resident_bytes(), 0u);
  EXPECT_EQ(0, std::memcmp(reducer.reduced(), want.data(), want.size() * sizeof(float)));
  EXPECT_EQ(reducer.times().steps, 1);
  EXPECT_THROW(reducer.on_grad_ready(0), loom::Error);  // outside a reducing backward
}

TEST(Config, DataParallelFieldsAreChecked) {
  auto error = [](std::vector<std::string> sets) -> std::string {
    try {
      loom::load_run_config("", sets);
    } catch (const loom::UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error({"parallel.bucket_mb=0"}).find("'parallel.bucket_mb' must be in (0, 65536]"), std::string::npos);
  EXPECT_NE(error({"parallel.zero=4"}).find("'parallel.zero' must be 0, 1, 2 or 3"), std::string::npos);
  EXPECT_NE(error({"train.micro_batch_size=-1"}).find("'train.micro_batch_size'"), std::string::npos);
  EXPECT_NE(error({"train.batch_size=4", "train.micro_batch_size=5"}).find("'train.micro_batch_size'"),
            std::string::npos);
  auto c = loom::load_run_config("", {"parallel.zero=2", "parallel.bucket_mb=0.5", "train.micro_batch_size=2"});
  EXPECT_EQ(c.parallel.zero, 2);
  EXPECT_FLOAT_EQ(c.parallel.bucket_mb, 0.5f);
  EXPECT_EQ(c.train.micro_batch_size, 2);
}

}  // namespace

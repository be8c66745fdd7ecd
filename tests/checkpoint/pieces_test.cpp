#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include "checkpoint/sharded_tensors.h"
#include "checkpoint/tensor_piece.h"
#include "checkpoint_test_util.h"
#include "core/check.h"

namespace loom {
namespace {

using test::ckpt_dir;

// values[i] = i + 0.5: every element is distinguishable.
std::vector<float> iota_tensor(int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = float(i) + 0.5f;
  return v;
}

// The box [off, off + shape) of a row-major tensor of `global` shape.
std::vector<float> box_of(const std::vector<float>& t, const std::vector<int64_t>& global, const std::vector<int64_t>& off,
                          const std::vector<int64_t>& shape) {
  std::vector<float> out;
  const size_t n = global.size();
  std::vector<int64_t> idx(n, 0);
  int64_t count = shape_numel(shape);
  for (int64_t k = 0; k < count; k++) {
    int64_t rest = k, flat = 0;
    for (size_t d = n; d-- > 0;) idx[d] = rest % shape[d], rest /= shape[d];
    for (size_t d = 0; d < n; d++) flat = flat * global[d] + off[d] + idx[d];
    out.push_back(t[size_t(flat)]);
  }
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(CheckpointPieces, KeysNameTheGlobalTensorAndTheOffset) {
  CheckpointPiece whole{"wte.weight", {8, 4}, {}, {}};
  EXPECT_EQ(piece_key(place_of(whole, "t")), "wte.weight");
  CheckpointPiece rows{"h.0.attn.c_attn.weight", {256, 64}, {64, 0}, {64, 64}};
  EXPECT_EQ(piece_key(place_of(rows, "t")), "h.0.attn.c_attn.weight@64,0");
  CheckpointPiece cut{"h.0.mlp.c_fc.weight", {8, 4}, {}, {}, 10, 20};
  EXPECT_EQ(piece_key(place_of(cut, "t")), "h.0.mlp.c_fc.weight@0,0#10-20");
  CheckpointPiece outside{"x", {8, 4}, {6, 0}, {4, 4}};
  EXPECT_NE(error_of([&] { place_of(outside, "rank 3"); }).find("rank 3"), std::string::npos);
  CheckpointPiece bad_range{"x", {8, 4}, {}, {}, 5, 40};
  EXPECT_THROW(place_of(bad_range, "t"), UserError);
  CheckpointPiece bad_rank{"x", {8, 4}, {0}, {8}};
  EXPECT_THROW(place_of(bad_rank, "t"), UserError);
}

// A [6, 8] tensor held as: file 0 rows [0,3); file 1 rows [3,6) as two column
// halves; file 2 a replica of file 0's piece. Any box reads back exactly.
TEST(CheckpointPieces, ReadRegionAssemblesRowAndColumnPiecesAndSkipsReplicas) {
  std::string dir = ckpt_dir("pieces-basic");
  const std::vector<int64_t> g = {6, 8};
  std::vector<float> t = iota_tensor(48);
  std::vector<float> left = box_of(t, g, {3, 0}, {3, 4}), right = box_of(t, g, {3, 4}, {3, 4});
  write_piece_file(dir + "/a.safetensors", {{"m", g, {0, 0}, {3, 8}, 0, -1, t.data()}});
  write_piece_file(dir + "/b.safetensors",
                   {{"m", g, {3, 0}, {3, 4}, 0, -1, left.data()}, {"m", g, {3, 4}, {3, 4}, 0, -1, right.data()}});
  write_piece_file(dir + "/c.safetensors", {{"m", g, {0, 0}, {3, 8}, 0, -1, t.data()}});
  ShardedTensors st({dir + "/a.safetensors", dir + "/b.safetensors", dir + "/c.safetensors"});
  EXPECT_EQ(st.names(), std::vector<std::string>{"m"});
  EXPECT_EQ(st.read_global("m"), t);
  for (auto [off, shape] : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{2, 3}, {3, 4}}, {{0, 0}, {1, 1}}, {{5, 7}, {1, 1}}, {{1, 2}, {5, 6}}, {{3, 0}, {3, 8}}, {{0, 0}, {0, 3}}})
    EXPECT_EQ(st.read_region("m", off, shape), box_of(t, g, off, shape));
  st.check_complete();
  EXPECT_NE(error_of([&] { st.read_region("m", {4, 0}, {3, 8}); }).find("outside"), std::string::npos);
  EXPECT_NE(error_of([&] { st.read_global("nope"); }).find("no tensor 'nope'"), std::string::npos);
}

// A tensor-parallel rank of tp = 2 holds three row ranges of the fused QKV
// matrix [3C, C]; a tp = 4 rank reads its own three ranges back.
TEST(CheckpointPieces, FusedQkvAsThreePiecesPerRankReshardsToAnotherTp) {
  std::string dir = ckpt_dir("pieces-qkv");
  const int64_t C = 8;
  const std::vector<int64_t> g = {3 * C, C};
  std::vector<float> w = iota_tensor(3 * C * C);
  for (int rank = 0; rank < 2; rank++) {
    std::vector<CheckpointPiece> pieces;
    for (int j = 0; j < 3; j++) {
      int64_t row = j * C + rank * C / 2;
      pieces.push_back({"qkv", g, {row, 0}, {C / 2, C}, 0, -1, w.data() + row * C});
    }
    write_piece_file(dir + "/r" + std::to_string(rank) + ".safetensors", pieces);
  }
  ShardedTensors st({dir + "/r0.safetensors", dir + "/r1.safetensors"});
  for (int rank = 0; rank < 4; rank++)
    for (int j = 0; j < 3; j++) {
      int64_t row = j * C + rank * C / 4;
      EXPECT_EQ(st.read_region("qkv", {row, 0}, {C / 4, C}), box_of(w, g, {row, 0}, {C / 4, C}));
    }
  // A row-parallel rank: columns [32, 64) of a [64, 128] matrix.
  const std::vector<int64_t> g2 = {64, 128};
  std::vector<float> m = iota_tensor(64 * 128), cols = box_of(m, g2, {0, 32}, {64, 32});
  std::vector<float> rest_l = box_of(m, g2, {0, 0}, {64, 32}), rest_r = box_of(m, g2, {0, 64}, {64, 64});
  write_piece_file(dir + "/c0.safetensors", {{"proj", g2, {0, 32}, {64, 32}, 0, -1, cols.data()}});
  write_piece_file(dir + "/c1.safetensors",
                   {{"proj", g2, {0, 0}, {64, 32}, 0, -1, rest_l.data()}, {"proj", g2, {0, 64}, {64, 64}, 0, -1, rest_r.data()}});
  ShardedTensors st2({dir + "/c0.safetensors", dir + "/c1.safetensors"});
  EXPECT_EQ(st2.read_global("proj"), m);
  EXPECT_EQ(st2.read_region("proj", {10, 30}, {5, 40}), box_of(m, g2, {10, 30}, {5, 40}));
}

// ZeRO: flat ranges cut through rows, even inside a tensor-parallel box.
TEST(CheckpointPieces, FlatRangesCutThroughRows) {
  std::string dir = ckpt_dir("pieces-flat");
  const std::vector<int64_t> g = {5, 7};
  std::vector<float> t = iota_tensor(35);
  write_piece_file(dir + "/z0.safetensors", {{"w", g, {}, {}, 0, 10, t.data()}});
  write_piece_file(dir + "/z1.safetensors", {{"w", g, {}, {}, 10, 23, t.data() + 10}});
  write_piece_file(dir + "/z2.safetensors", {{"w", g, {}, {}, 23, 35, t.data() + 23}});
  ShardedTensors st({dir + "/z0.safetensors", dir + "/z1.safetensors", dir + "/z2.safetensors"});
  EXPECT_EQ(st.read_global("w"), t);
  EXPECT_EQ(st.read_region("w", {1, 2}, {3, 4}), box_of(t, g, {1, 2}, {3, 4}));
  // The right half [0:5, 4:7] of the tensor, held as two ranges of that box.
  std::vector<float> box = box_of(t, g, {0, 4}, {5, 3});
  std::vector<float> left = box_of(t, g, {0, 0}, {5, 4});
  write_piece_file(dir + "/b0.safetensors", {{"w", g, {0, 4}, {5, 3}, 0, 4, box.data()}});
  write_piece_file(dir + "/b1.safetensors",
                   {{"w", g, {0, 4}, {5, 3}, 4, 15, box.data() + 4}, {"w", g, {0, 0}, {5, 4}, 0, -1, left.data()}});
  ShardedTensors st2({dir + "/b0.safetensors", dir + "/b1.safetensors"});
  EXPECT_EQ(st2.read_global("w"), t);
  st2.check_complete();
}

TEST(CheckpointPieces, OneAndZeroDimensionalTensors) {
  std::string dir = ckpt_dir("pieces-1d");
  std::vector<float> b = iota_tensor(10);
  float s = 4.25f;
  write_piece_file(dir + "/a.safetensors", {{"bias", {10}, {0}, {6}, 0, -1, b.data()}, {"step", {}, {}, {}, 0, -1, &s}});
  write_piece_file(dir + "/b.safetensors", {{"bias", {10}, {6}, {4}, 0, -1, b.data() + 6}});
  ShardedTensors st({dir + "/a.safetensors", dir + "/b.safetensors"});
  EXPECT_EQ(st.read_global("bias"), b);
  EXPECT_EQ(st.read_region("bias", {4}, {4}), std::vector<float>(b.begin() + 4, b.begin() + 8));
  EXPECT_EQ(st.read_global("step"), std::vector<float>{4.25f});
  st.check_complete();
}

TEST(CheckpointPieces, MissingCoverageAndShapeDisagreementAreNamed) {
  std::string dir = ckpt_dir("pieces-bad");
  std::vector<float> t = iota_tensor(48);
  write_piece_file(dir + "/a.safetensors", {{"m", {6, 8}, {0, 0}, {3, 8}, 0, -1, t.data()}});
  ShardedTensors st({dir + "/a.safetensors"});
  std::string err = error_of([&] { st.read_global("m"); });
  EXPECT_NE(err.find("'m'"), std::string::npos) << err;
  EXPECT_NE(err.find("[3,0]"), std::string::npos) << err;  // the first element nobody holds
  EXPECT_NE(err.find("a.safetensors"), std::string::npos) << err;
  EXPECT_NE(error_of([&] { st.check_complete(); }).find("[3,0]"), std::string::npos);
  EXPECT_EQ(st.read_region("m", {0, 0}, {3, 8}), box_of(t, {6, 8}, {0, 0}, {3, 8}));  // what is there still reads
  // A hole in the middle of a flat cut.
  write_piece_file(dir + "/f.safetensors", {{"v", {4, 4}, {}, {}, 0, 5, t.data()}, {"v", {4, 4}, {}, {}, 6, 16, t.data() + 6}});
  EXPECT_NE(error_of([&] { ShardedTensors({dir + "/f.safetensors"}).check_complete(); }).find("[1,1]"), std::string::npos);
  // Two files that disagree on a global shape.
  write_piece_file(dir + "/b.safetensors", {{"m", {7, 8}, {3, 0}, {3, 8}, 0, -1, t.data()}});
  err = error_of([&] { ShardedTensors({dir + "/a.safetensors", dir + "/b.safetensors"}); });
  EXPECT_NE(err.find("a.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("b.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("[7,8]"), std::string::npos) << err;
  // A plain safetensors file is not a loom piece file.
  write_safetensors(dir + "/plain.safetensors", {{"x", StDType::F32, {1}, t.data()}}, {});
  EXPECT_NE(error_of([&] { ShardedTensors({dir + "/plain.safetensors"}); }).find("loom.pieces"), std::string::npos);
}

TEST(CheckpointPieces, SixteenBitStorageRoundsOnce) {
  std::string dir = ckpt_dir("pieces-bf16");
  std::vector<float> t = {1.0f, 1.00390625f, 3.14159f, -2.5f};
  write_piece_file(dir + "/a.safetensors", {{"w", {4}, {}, {}, 0, -1, t.data(), StDType::BF16}});
  std::vector<float> back = ShardedTensors({dir + "/a.safetensors"}).read_global("w");
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f);  // bf16 keeps 8 bits of mantissa: 1 + 2^-8 rounds to even (1.0)
  EXPECT_NEAR(back[2], 3.14159f, 0.01f);
  EXPECT_EQ(back[3], -2.5f);
}

// Random tensors cut by random grids of boxes, some boxes further cut into
// flat ranges and spread over files, with replicas: random boxes read back.
TEST(CheckpointPieces, RandomLayoutsReadBackAnyBox) {
  std::string dir = ckpt_dir("pieces-random");
  std::mt19937 rng(7);
  auto uniform = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  for (int trial = 0; trial < 20; trial++) {
    const size_t nd = size_t(uniform(1, 3));
    std::vector<int64_t> g(nd);
    for (auto& d : g) d = uniform(1, 9);
    std::vector<float> t = iota_tensor(shape_numel(g));
    // Cut points per dimension.
    std::vector<std::vector<int64_t>> cuts(nd);
    for (size_t d = 0; d < nd; d++) {
      cuts[d] = {0, g[d]};
      for (int k = 0; k < 2; k++) cuts[d].push_back(uniform(0, g[d]));
      std::sort(cuts[d].begin(), cuts[d].end());
      cuts[d].erase(std::unique(cuts[d].begin(), cuts[d].end()), cuts[d].end());
    }
    const int files = int(uniform(1, 4));
    std::vector<std::vector<CheckpointPiece>> per_file(static_cast<size_t>(files));
    std::deque<std::vector<float>> boxes;
    std::vector<size_t> at(nd, 0);
    for (;;) {
      std::vector<int64_t> off(nd), shape(nd);
      for (size_t d = 0; d < nd; d++) off[d] = cuts[d][at[d]], shape[d] = cuts[d][at[d] + 1] - cuts[d][at[d]];
      const std::vector<float>& box = boxes.emplace_back(box_of(t, g, off, shape));
      int64_t n = int64_t(box.size()), cut = uniform(0, n);
      size_t f1 = size_t(uniform(0, files - 1)), f2 = size_t(uniform(0, files - 1));
      per_file[f1].push_back({"t", g, off, shape, 0, cut, box.data()});
      per_file[f2].push_back({"t", g, off, shape, cut, n, box.data() + cut});
      if (uniform(0, 3) == 0) per_file[size_t(uniform(0, files - 1))].push_back({"t", g, off, shape, 0, n, box.data()});
      size_t d = nd;
      while (d > 0 && ++at[d - 1] + 1 == cuts[d - 1].size()) at[d - 1] = 0, d--;
      if (d == 0) break;
    }
    std::vector<std::string> paths;
    for (int f = 0; f < files; f++) {
      // Two pieces with the same key cannot share a file: write what collides into a file of its own.
      std::vector<CheckpointPiece> unique, extra;
      std::set<std::string> keys;
      for (auto& p : per_file[size_t(f)]) (keys.insert(piece_key(place_of(p, "t"))).second ? unique : extra).push_back(p);
      paths.push_back(dir + "/t" + std::to_string(trial) + "_" + std::to_string(f) + ".safetensors");
      write_piece_file(paths.back(), unique);
      for (size_t e = 0; e < extra.size(); e++) {
        paths.push_back(paths.back() + ".x" + std::to_string(e));
        write_piece_file(paths.back(), {extra[e]});
      }
    }
    ShardedTensors st(paths);
    st.check_complete();
    ASSERT_EQ(st.read_global("t"), t) << "trial " << trial;
    for (int q = 0; q < 10; q++) {
      std::vector<int64_t> off(nd), shape(nd);
      for (size_t d = 0; d < nd; d++) off[d] = uniform(0, g[d] - 1), shape[d] = uniform(1, g[d] - off[d]);
      ASSERT_EQ(st.read_region("t", off, shape), box_of(t, g, off, shape)) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace loom

// What the asynchronous save needs from CheckpointWriter: a hook half-way
// through a rank file (fault injection) that changes no byte, and the ranks
// whose file is not finished yet (what the committing rank waits for).
#include <gtest/gtest.h>

#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_test_util.h"
#include "checkpoint/checkpoint_writer.h"

namespace loom {
namespace {

using test::ckpt_dir;
using test::slurp;

TEST(CheckpointWriterHooks, HalfWayHookRunsOnceAndChangesNoByte) {
  std::vector<float> w(4096), b(64);
  for (size_t i = 0; i < w.size(); i++) w[i] = float(i) * 0.5f;
  for (size_t i = 0; i < b.size(); i++) b[i] = -float(i);
  const std::vector<CheckpointPiece> pieces = {{"w", {64, 64}, {}, {}, 0, -1, w.data()},
                                               {"b", {64}, {}, {}, 0, -1, b.data()}};
  const std::string plain = ckpt_dir("hook-plain"), hooked = ckpt_dir("hook-hooked");
  CheckpointWriter(plain, 3).write_rank_file(0, pieces);
  int calls = 0;
  CheckpointWriter(hooked, 3).write_rank_file(0, pieces, [&] { calls++; });
  EXPECT_EQ(calls, 1);
  const std::string file = "/.tmp_step_000003/" + rank_file_name(0);
  EXPECT_EQ(slurp(plain + file), slurp(hooked + file));
}

TEST(CheckpointWriterHooks, UnfinishedRanksAreThoseWithoutANote) {
  std::vector<float> w(16, 1.f);
  const std::vector<CheckpointPiece> half = {{"w", {4, 4}, {0, 0}, {2, 4}, 0, -1, w.data()}};
  CheckpointWriter writer(ckpt_dir("unfinished"), 5);
  EXPECT_EQ(writer.unfinished_ranks({0, 1}), (std::vector<int>{0, 1}));
  writer.write_rank_file(1, half);
  EXPECT_EQ(writer.unfinished_ranks({0, 1}), (std::vector<int>{0}));
}

}  // namespace
}  // namespace loom

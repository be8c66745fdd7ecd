// TensorBoard event files: the record format (CRC32C), scalars read back,
// damage caught, RunDir writing each step's scalars; and, where the
// project's .venv has TensorBoard, TensorBoard's own reader on a real run
// (tools/check_tensorboard.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>
#include <utility>

#include "cli/run_loom.h"
#include "core/check.h"
#include "obs/obs_test_util.h"
#include "obs/tensorboard_events.h"

namespace loom::obs {
namespace {

using namespace loom::obs::test;

// What a shell command printed (stdout and stderr), and its exit code.
std::pair<int, std::string> shell(const std::string& cmd) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  const int status = p ? pclose(p) : -1;
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

std::string only_event_file(const std::string& dir) {
  std::string found;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find("tfevents") != std::string::npos) {
      EXPECT_TRUE(found.empty()) << "more than one event file in " << dir;
      found = e.path().string();
    }
  return found;
}

TEST(TensorBoard, Crc32cIsCastagnolis) {
  // The standard check value of CRC-32C, and RFC 3720's 32 zero bytes.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
}

TEST(TensorBoard, ScalarsReadBackInOrderAndNonFiniteOnesAreSkipped) {
  const std::string dir = fresh_dir("tensorboard_scalars");
  std::string path;
  {
    TensorBoardWriter tb(dir);
    path = tb.path();
    tb.scalar("loss/train", 1, 5.5, 100.25);
    tb.scalar("optim/lr", 1, 3e-4, 100.25);
    tb.scalar("loss/train", 2, NAN, 101.0);
    tb.scalar("loss/train", 300000000000LL, -1.25, 102.5);
    tb.flush();
  }
  EXPECT_NE(path.find("/events.out.tfevents."), std::string::npos);
  const EventFile f = read_event_file(path);
  EXPECT_EQ(f.file_version, "brain.Event:2");
  ASSERT_EQ(f.scalars.size(), 3u);
  EXPECT_EQ(f.scalars[0].tag, "loss/train");
  EXPECT_EQ(f.scalars[0].step, 1);
  EXPECT_EQ(f.scalars[0].value, 5.5f);
  EXPECT_EQ(f.scalars[0].wall_time, 100.25);
  EXPECT_EQ(f.scalars[1].tag, "optim/lr");
  EXPECT_EQ(f.scalars[1].value, float(3e-4));
  EXPECT_EQ(f.scalars[2].step, 300000000000LL);
  EXPECT_EQ(f.scalars[2].value, -1.25f);
}

TEST(TensorBoard, ADamagedOrCutFileIsNamedNotMisread) {
  const std::string dir = fresh_dir("tensorboard_damage");
  std::string path;
  {
    TensorBoardWriter tb(dir);
    path = tb.path();
    tb.scalar("loss/train", 1, 2.0, 1.0);
  }
  std::string bytes = read_text(path);
  std::string flipped = bytes;
  flipped[flipped.size() - 8] ^= 0x01;  // inside the last record's data
  std::ofstream(path, std::ios::binary | std::ios::trunc) << flipped;
  try {
    read_event_file(path);
    ADD_FAILURE() << "a flipped bit was read";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("record 1: the data's CRC does not match"), std::string::npos) << e.what();
  }
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 3);
  EXPECT_THROW(read_event_file(path), UserError);
}

TEST(TensorBoard, ARunDirWritesEveryStepsScalars) {
  const std::string dir = fresh_dir("tensorboard_run_dir");
  {
    RunDir run(dir, false, /*tensorboard=*/true);
    for (int s = 1; s <= 3; s++) run.append_step(healthy_step(s));
  }
  const EventFile f = read_event_file(only_event_file(dir));
  std::set<std::string> tags;
  int losses = 0;
  for (const ScalarEvent& e : f.scalars) {
    tags.insert(e.tag);
    if (e.tag == "loss/train") {
      EXPECT_EQ(e.value, float(healthy_step(int(e.step)).loss));
      losses++;
    }
  }
  EXPECT_EQ(losses, 3);
  for (const char* tag : {"loss/train", "optim/lr", "optim/grad_norm", "optim/loss_scale", "perf/tokens_per_s",
                          "perf/mfu", "time/compute_s", "time/comm_exposed_s", "memory/peak_mib_rank0"})
    EXPECT_TRUE(tags.count(tag)) << tag;
  // Off: no event file.
  const std::string off = fresh_dir("tensorboard_off");
  RunDir(off).append_step(healthy_step(1));
  EXPECT_EQ(only_event_file(off), "");
}

// TensorBoard's own reader (EventAccumulator) on a real run, against its
// metrics.jsonl: tools/check_tensorboard.py in the project's .venv.
TEST(TensorBoard, TensorBoardItselfReadsARunsScalars) {
  const std::string py = LOOM_SOURCE_DIR "/.venv/bin/python";
  const std::string probe = "'" + py + "' -c 'import tensorboard' > /dev/null 2>&1";
  if (!std::filesystem::exists(py) || std::system(probe.c_str()) != 0)
    GTEST_SKIP() << py << " has no tensorboard (scripts/setup.sh venv installs it)";
  const std::string runs = fresh_dir("tensorboard_real");
  auto r = loom::test::run_loom("train --config '" LOOM_SOURCE_DIR "/configs/tiny.toml' --set 'data.path=\"" LOOM_SOURCE_DIR
                                "/data/sample/kjv.txt\"' --set train.steps=6 --set train.eval_every=3"
                                " --set train.sample_tokens=0 --set 'train.run_dir=\"" + runs +
                                "\"' --set train.run_name=tb");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto [code, output] = shell("'" + py + "' '" LOOM_SOURCE_DIR "/tools/check_tensorboard.py' '" + runs + "/tb'");
  EXPECT_EQ(code, 0) << output;
  EXPECT_NE(output.find("ok: tensorboard read"), std::string::npos) << output;
}

}  // namespace
}  // namespace loom::obs

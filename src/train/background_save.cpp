#include "train/background_save.h"

#include <omp.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_writer.h"
#include "core/check.h"
#include "fault/fault_plan.h"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;

std::string rank_files(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + rank_file_name(r);
  return s;
}

}  // namespace

BackgroundSave::~BackgroundSave() {
  if (!running()) return;
  cancel_ = true;  // an error path: nobody will agree on a commit any more
  thread_.join();
}

void BackgroundSave::snapshot(const std::vector<CheckpointPiece>& pieces) {
  LOOM_CHECK(!running(), "checkpoint snapshot while a background save still reads the last one");
  size_t total = 0;
  for (const CheckpointPiece& p : pieces) total += size_t(place_of(p, "checkpoint snapshot").count());
  if (total > capacity_) storage_.reset(new float[total]), capacity_ = total;  // uninitialized: copied over next
  // The copy is the whole stall of an asynchronous save: cut it into blocks
  // of 1M floats for every core.
  struct Block {
    const float* from;
    float* to;
    size_t n;
  };
  std::vector<Block> blocks;
  pieces_ = pieces;
  size_t at = 0;
  const size_t block = size_t(1) << 20;
  for (CheckpointPiece& p : pieces_) {
    const size_t n = size_t(place_of(p, "checkpoint snapshot").count());
    for (size_t b = 0; b < n; b += block) blocks.push_back({p.data + b, storage_.get() + at + b, std::min(block, n - b)});
    p.data = storage_.get() + at;
    at += n;
  }
#pragma omp parallel for schedule(dynamic, 1)
  for (size_t i = 0; i < blocks.size(); i++) std::memcpy(blocks[i].to, blocks[i].from, blocks[i].n * sizeof(float));
}

void BackgroundSave::start(SaveJob job) {
  LOOM_CHECK(!running(), "a checkpoint save started while the last one still runs");
  written_ = false;
  cancel_ = false;
  outcome_ = SaveOutcome{};
  thread_ = std::thread([this, job = std::move(job)] { run(job); });
}

std::string BackgroundSave::wait_written() {
  if (!running()) return outcome_.write_error;
  std::unique_lock<std::mutex> lock(mutex_);
  written_cv_.wait(lock, [this] { return written_; });
  return outcome_.write_error;
}

SaveOutcome BackgroundSave::finish() {
  if (running()) thread_.join();
  return outcome_;
}

void BackgroundSave::mark_written(std::string error) {
  std::lock_guard<std::mutex> lock(mutex_);
  outcome_.write_error = std::move(error);
  written_ = true;
  written_cv_.notify_all();
}

void BackgroundSave::run(const SaveJob& job) {
  // Training's threads come first: on a machine without a spare core the
  // writer takes the time they leave (Linux: a thread's own nice value).
  ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), 10);
  const auto t0 = Clock::now();
  std::string error;
  try {
    if (job.writes) {
      CheckpointWriter writer(job.root, job.step);
      std::function<void()> half_written;
      if (job.kill_half_way) half_written = [&job] { FaultPlan::die_in_save(job.step, job.rank); };
      writer.write_rank_file(job.rank, pieces_, half_written);
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  const bool wrote = error.empty();
  mark_written(std::move(error));
  if (job.manifest && wrote) {
    std::string dir, commit_error = commit_when_written(job, &dir);
    std::lock_guard<std::mutex> lock(mutex_);
    outcome_.commit_error = std::move(commit_error), outcome_.dir = std::move(dir);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  outcome_.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
}

std::string BackgroundSave::commit_when_written(const SaveJob& job, std::string* dir) {
  try {
    CheckpointWriter writer(job.root, job.step);
    const auto t0 = Clock::now();
    for (std::vector<int> missing = writer.unfinished_ranks(job.writer_ranks); !missing.empty();
         missing = writer.unfinished_ranks(missing)) {
      if (cancel_) return "cancelled: another rank's file failed";
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (job.notes_timeout_s > 0 && waited > job.notes_timeout_s)
        return strprintf("gave up after %.0f s (runtime.comm_timeout_s) waiting for %s in '%s': not finished by "
                         "their ranks",
                         job.notes_timeout_s, rank_files(missing).c_str(), writer.staging_dir().c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    *dir = writer.commit(*job.manifest, job.writer_ranks, job.keep_last).dir;
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace loom

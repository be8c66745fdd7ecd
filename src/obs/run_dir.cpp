#include "obs/run_dir.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/check.h"

namespace loom::obs {
namespace {

// The scalars of one step, under TensorBoard tags grouped by section.
void write_scalars(TensorBoardWriter& tb, const StepMetrics& m) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto put = [&](const char* tag, double v) { tb.scalar(tag, m.step, v, now); };
  put("loss/train", m.loss);
  put("loss/val", m.val_loss);
  put("optim/lr", m.lr);
  put("optim/grad_norm", m.grad_norm);
  put("optim/loss_scale", m.loss_scale);
  put("perf/tokens_per_s", m.tokens_per_s);
  put("perf/mfu", m.mfu);
  put("perf/step_time_s", m.step_time_s);
  put("time/compute_s", m.time.compute);
  put("time/comm_exposed_s", m.time.comm_exposed);
  put("time/bubble_s", m.time.bubble);
  put("time/optimizer_s", m.time.optimizer);
  put("time/data_s", m.time.data);
  if (m.checkpoint_stall_s > 0) put("checkpoint/stall_s", m.checkpoint_stall_s);
  if (m.moe.experts > 0) {
    put("moe/load_max", m.moe.load_max), put("moe/load_min", m.moe.load_min);
    put("moe/aux_loss", m.moe.aux_loss), put("moe/z_loss", m.moe.z_loss), put("moe/bias_max", m.moe.bias_max);
    if (m.moe.ep > 1) {
      put("moe/all_to_all_ms", m.moe.a2a_ms), put("moe/all_to_all_hidden_ms", m.moe.a2a_hidden_ms);
      put("moe/rank_load_max", m.moe.rank_load_max);
    }
  }
  for (size_t r = 0; r < m.peak_mem_bytes.size(); r++)
    tb.scalar("memory/peak_mib_rank" + std::to_string(r), m.step, double(m.peak_mem_bytes[r]) / (1 << 20), now);
  tb.flush();  // like metrics.jsonl: a crash keeps every finished step
}

}  // namespace

RunDir::RunDir(std::string path, bool resume, bool tensorboard) : path_(std::move(path)) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  LOOM_USER_CHECK(!ec && std::filesystem::is_directory(path_), "cannot create run directory '%s': %s",
                  path_.c_str(), ec ? ec.message().c_str() : "not a directory");
  std::string metrics = file("metrics.jsonl");
  metrics_ = std::fopen(metrics.c_str(), resume ? "a" : "w");
  LOOM_USER_CHECK(metrics_, "cannot write '%s': %s", metrics.c_str(), std::strerror(errno));
  if (tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(path_);
}

RunDir::~RunDir() {
  if (metrics_) std::fclose(metrics_);
}

std::string RunDir::default_path(const std::string& root, const std::string& name) {
  if (!name.empty()) return root + "/" + name;
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", &local);
  return root + "/" + stamp;
}

void RunDir::write_config(const std::string& toml_text) { write_file_atomically(file("config.toml"), toml_text); }

void RunDir::write_layout(const RunLayout& layout) {
  write_file_atomically(file("layout.json"), nlohmann::json(layout).dump(2) + "\n");
}

void RunDir::append_step(const StepMetrics& step) {
  std::string line = nlohmann::json(step).dump() + "\n";
  // One write and a flush per line: a crash cuts at most the last line.
  std::fwrite(line.data(), 1, line.size(), metrics_);
  std::fflush(metrics_);
  if (tensorboard_) write_scalars(*tensorboard_, step);
}

void RunDir::append_resume_mark(int64_t step) {
  std::string line = nlohmann::json{{"resumed_at_step", step}}.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), metrics_);
  std::fflush(metrics_);
}

void RunDir::write_summary(const RunSummary& summary) {
  write_file_atomically(file("summary.json"), nlohmann::json(summary).dump(2) + "\n");
}

}  // namespace loom::obs

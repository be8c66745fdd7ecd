#include "obs/run_dir.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/check.h"

namespace loom::obs {

RunDir::RunDir(std::string path, bool resume) : path_(std::move(path)) {
  std::error_code ec;
  std::filesystem::create_directories(path_, ec);
  LOOM_USER_CHECK(!ec && std::filesystem::is_directory(path_), "cannot create run directory '%s': %s",
                  path_.c_str(), ec ? ec.message().c_str() : "not a directory");
  std::string metrics = file("metrics.jsonl");
  metrics_ = std::fopen(metrics.c_str(), resume ? "a" : "w");
  LOOM_USER_CHECK(metrics_, "cannot write '%s': %s", metrics.c_str(), std::strerror(errno));
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

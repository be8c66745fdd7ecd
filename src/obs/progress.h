// Progress of a long loop: a bar redrawn in place with rate and ETA when the
// output is a terminal; otherwise plain lines, one every `line_every_percent`
// of the work or `line_every_s` seconds, whichever comes first (logs stay
// short and readable).
//
//   Progress bar("train", steps);
//   for (...) { ...; bar.update(step, "loss 2.31"); }
//   bar.finish();
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace loom::obs {

struct ProgressOptions {
  FILE* out = stderr;
  int terminal = -1;                 // -1: isatty(out); 0 plain lines; 1 bar
  double line_every_percent = 10;    // plain lines
  double line_every_s = 30;          // plain lines
  double redraw_every_s = 0.1;       // the bar
  int width = 30;                    // bar characters
  std::string unit;                  // e.g. "MB": counts shown as done*scale/total*scale unit
  double scale = 1;
  std::function<double()> clock;     // seconds; default the steady clock
};

class Progress {
 public:
  Progress(std::string label, int64_t total, ProgressOptions options = {});
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // `done` of `total` units finished; `extra` is appended (e.g. the loss).
  void update(int64_t done, const std::string& extra = "");
  void finish(const std::string& extra = "");

  // "3m05s", "1h02m", "12s"; "?" when not finite.
  static std::string format_duration(double seconds);

 private:
  std::string line(int64_t done, double now, const std::string& extra, bool final_line) const;
  void emit(const std::string& text, bool final_line);

  std::string label_;
  int64_t total_;
  ProgressOptions o_;
  bool terminal_;
  bool finished_ = false;
  double start_, last_emit_;
  int64_t last_done_ = 0;
  double next_percent_;
  size_t last_width_ = 0;
};

}  // namespace loom::obs

#include "obs/progress.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/check.h"

namespace loom::obs {

Progress::Progress(std::string label, int64_t total, ProgressOptions options)
    : label_(std::move(label)), total_(std::max<int64_t>(total, 0)), o_(std::move(options)) {
  if (!o_.clock) {
    auto t0 = std::chrono::steady_clock::now();
    o_.clock = [t0] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  }
  terminal_ = o_.terminal < 0 ? ::isatty(::fileno(o_.out)) == 1 : o_.terminal == 1;
  start_ = last_emit_ = o_.clock();
  next_percent_ = o_.line_every_percent;
}

Progress::~Progress() {
  // Left unfinished (an error): end the bar's line without claiming 100%.
  if (!finished_ && terminal_ && last_width_ > 0) std::fputc('\n', o_.out);
}

std::string Progress::format_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = std::lround(s);
  if (t < 60) return strprintf("%lds", t);
  if (t < 3600) return strprintf("%ldm%02lds", t / 60, t % 60);
  return strprintf("%ldh%02ldm", t / 3600, (t % 3600) / 60);
}

std::string Progress::line(int64_t done, double now, const std::string& extra, bool final_line) const {
  double elapsed = now - start_;
  double rate = elapsed > 0 ? double(done) / elapsed : 0;
  double frac = total_ > 0 ? std::clamp(double(done) / double(total_), 0.0, 1.0) : 1.0;
  std::string s = label_ + " ";
  if (terminal_) {
    int filled = int(frac * o_.width);
    s += "[" + std::string(size_t(filled), '#') + std::string(size_t(o_.width - filled), '.') + "] ";
  }
  if (o_.unit.empty()) s += strprintf("%3.0f%% %lld/%lld", frac * 100, (long long)done, (long long)total_);
  else s += strprintf("%3.0f%% %.1f/%.1f %s", frac * 100, double(done) * o_.scale, double(total_) * o_.scale, o_.unit.c_str());
  if (rate > 0) s += strprintf(" | %.3g %s/s", rate * (o_.unit.empty() ? 1 : o_.scale), o_.unit.empty() ? "it" : o_.unit.c_str());
  if (final_line) s += " | took " + format_duration(elapsed);
  else s += " | ETA " + format_duration(rate > 0 ? double(total_ - done) / rate : NAN);
  if (!extra.empty()) s += " | " + extra;
  return s;
}

void Progress::emit(const std::string& text, bool final_line) {
  if (terminal_) {
    // Redraw in place; pad over a longer previous line.
    std::string padded = text;
    if (padded.size() < last_width_) padded.append(last_width_ - padded.size(), ' ');
    std::fprintf(o_.out, "\r%s%s", padded.c_str(), final_line ? "\n" : "");
    last_width_ = text.size();
  } else {
    std::fprintf(o_.out, "%s\n", text.c_str());
  }
  std::fflush(o_.out);
}

void Progress::update(int64_t done, const std::string& extra) {
  if (finished_) return;
  last_done_ = done;
  double now = o_.clock();
  if (terminal_) {
    if (now - last_emit_ < o_.redraw_every_s && done < total_) return;
  } else {
    if (done >= total_) return;  // finish() prints the last line
    double percent = total_ > 0 ? 100.0 * double(done) / double(total_) : 100;
    bool by_percent = o_.line_every_percent > 0 && percent >= next_percent_;
    bool by_time = o_.line_every_s > 0 && now - last_emit_ >= o_.line_every_s;
    if (!by_percent && !by_time) return;
    while (o_.line_every_percent > 0 && next_percent_ <= percent) next_percent_ += o_.line_every_percent;
  }
  last_emit_ = now;
  emit(line(done, now, extra, false), false);
}

void Progress::finish(const std::string& extra) {
  if (finished_) return;
  finished_ = true;
  emit(line(total_, o_.clock(), extra, true), true);
}

}  // namespace loom::obs

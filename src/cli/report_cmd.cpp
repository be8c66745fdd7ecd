// `loom report RUN_DIR`: charts and a Markdown summary of a run.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "obs/chrome_trace.h"
#include "obs/report.h"
#include "obs/run_reader.h"

namespace loom::cli {

int cmd_report(const Args& args) {
  std::string dir;
  for (const std::string& a : args) {
    LOOM_USER_CHECK(a.rfind("--", 0) != 0, "report: unknown option '%s' (try loom report --help)", a.c_str());
    LOOM_USER_CHECK(dir.empty(), "report: one run directory, got '%s' and '%s'", dir.c_str(), a.c_str());
    dir = a;
  }
  LOOM_USER_CHECK(!dir.empty(), "report: which run? usage: loom report RUN_DIR");
  obs::RunData run = obs::read_run_dir(dir);
  // A run that did not end has no trace.json: merge the ranks' trace files.
  const std::string merged = dir + "/trace.json";
  if (run.trace_from_rank_files) {
    write_file_atomically(merged, obs::chrome_trace_json(run.trace));
    std::printf("wrote %s from trace/rank-*.jsonl\n", merged.c_str());
    std::erase(run.missing, std::string("trace.json"));
  }
  obs::ReportOutput out = obs::write_report(run);
  for (const std::string& m : run.missing) std::printf("missing: %s\n", m.c_str());
  for (const std::string& n : run.notes) std::printf("note: %s\n", n.c_str());
  if (!out.png_note.empty()) std::printf("%s\n", out.png_note.c_str());
  std::printf("wrote %s/:", out.dir.c_str());
  for (const std::string& f : out.files) std::printf(" %s", f.c_str());
  std::printf("\n");
  return 0;
}

}  // namespace loom::cli

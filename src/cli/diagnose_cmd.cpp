// `loom diagnose RUN_DIR [--json]`: the likely causes of a slow or unstable run.
#include <cstdio>

#include "cli/commands.h"
#include "core/check.h"
#include "obs/diagnosis.h"
#include "obs/run_figures.h"
#include "obs/run_reader.h"

namespace loom::cli {

int cmd_diagnose(const Args& args) {
  std::string dir;
  bool json = false;
  for (const std::string& a : args) {
    if (a == "--json") {
      json = true;
      continue;
    }
    LOOM_USER_CHECK(a.rfind("--", 0) != 0, "diagnose: unknown option '%s' (try loom diagnose --help)", a.c_str());
    LOOM_USER_CHECK(dir.empty(), "diagnose: one run directory, got '%s' and '%s'", dir.c_str(), a.c_str());
    dir = a;
  }
  LOOM_USER_CHECK(!dir.empty(), "diagnose: which run? usage: loom diagnose RUN_DIR [--json]");
  obs::RunData run = obs::read_run_dir(dir);
  obs::Diagnosis d = obs::diagnose(run, obs::compute_figures(run));
  std::string text = json ? obs::diagnosis_json(run, d) : obs::diagnosis_text(run, d);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace loom::cli

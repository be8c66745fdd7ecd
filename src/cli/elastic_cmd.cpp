// `loom elastic --np N [--min-ranks M] [--max-restarts K] [--config F]
//  [--set k=v]... [--layout auto] [--resume SPEC] [--fault SPEC]... [--launcher mpirun|srun]
//  [-- launcher options]`
// (src/elastic/supervisor.h).
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "core/check.h"
#include "elastic/supervisor.h"
#include "fault/fault_plan.h"

namespace loom::cli {

int cmd_elastic(const Args& args) {
  elastic::ElasticOptions o;
  o.loom_exe = self_exe();
  try {
    bool np_given = false;
    for (size_t i = 0; i < args.size(); i++) {
      const std::string& a = args[i];
      auto value = [&](const char* flag) {
        LOOM_USER_CHECK(i + 1 < args.size(), "elastic: %s needs a value", flag);
        return args[++i];
      };
      auto integer = [&](const char* flag, int min) {
        const std::string v = value(flag);
        char* end = nullptr;
        const long n = std::strtol(v.c_str(), &end, 10);
        LOOM_USER_CHECK(!v.empty() && *end == '\0' && n >= min && n <= 1 << 20,
                        "elastic: %s must be an integer >= %d, got '%s'", flag, min, v.c_str());
        return int(n);
      };
      if (a == "--np") o.np = integer("--np", 1), np_given = true;
      else if (a == "--min-ranks") o.min_ranks = integer("--min-ranks", 1);
      else if (a == "--max-restarts") o.max_restarts = integer("--max-restarts", 0);
      else if (a == "--config") o.config_path = resolve_path(value("--config"));
      else if (a == "--set") o.overrides.push_back(value("--set"));
      else if (a == "--layout") o.layout = value("--layout");
      else if (a == "--launcher") o.launcher = value("--launcher");
      else if (a == "--resume") o.resume = value("--resume");
      else if (a == "--fault") o.faults.push_back(value("--fault")), parse_fault(o.faults.back());  // checked now
      else if (a == "--") o.mpirun_args.assign(args.begin() + long(i) + 1, args.end()), i = args.size();
      else throw UserError(strprintf("elastic: unknown option '%s' (try loom elastic --help)", a.c_str()));
    }
    LOOM_USER_CHECK(np_given, "elastic: --np N (the ranks to start with) is required");
    std::vector<Fault> faults;
    for (const std::string& f : o.faults) faults.push_back(parse_fault(f));
    FaultPlan(faults).check_ranks(o.np);  // a rank the first launch does not have
    LOOM_USER_CHECK(o.layout == "config" || o.layout == "auto", "elastic: --layout takes auto or config, got '%s'",
                    o.layout.c_str());
    LOOM_USER_CHECK(o.config_path.empty() || std::filesystem::is_regular_file(o.config_path),
                    "elastic: config file '%s' (--config) not found", o.config_path.c_str());
    return elastic::run_elastic(o, stdout);
  } catch (const UserError& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  }
}

}  // namespace loom::cli

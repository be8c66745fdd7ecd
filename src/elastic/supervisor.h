// `loom elastic`: runs `loom train` under mpirun (or srun) and, when a rank dies or
// hangs, relaunches the job from the newest checkpoint on the ranks that are
// left, with the user's layout where it still fits or the planner's for the
// new world (relayout.h), up to max_restarts times. Each failure is a line
// of <run_dir>/elastic.jsonl (obs::RestartRecord), which `loom report` shows.
//
// One run directory and one checkpoint folder serve every attempt: the
// supervisor fixes train.run_name, and every relaunch resumes with
// --resume auto (metrics.jsonl continues, with a resume mark).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace loom::elastic {

struct ElasticOptions {
  std::string loom_exe;                  // the loom executable each rank runs
  int np = 0;                            // ranks of the first launch
  int min_ranks = 1;                     // never run on fewer
  int max_restarts = 3;
  std::string config_path;               // "" = defaults
  std::vector<std::string> overrides;    // --set key=value
  std::string layout = "config";         // the first launch's --layout (config or auto)
  std::string resume;                    // the first launch's --resume ("" = fresh)
  std::vector<std::string> faults;       // --fault specs, first launch only (tests, demos)
  std::string launcher = "mpirun";       // or "srun" (inside a Slurm allocation)
  std::vector<std::string> mpirun_args;  // extra launcher options (after --)
};

// Throws UserError (exit 2) for bad options before launching anything;
// returns 0 when the training run finished, else non-zero (the job's own
// exit code for a failure that is not a rank's, 1 when restarts ran out or
// no layout fits the survivors).
int run_elastic(const ElasticOptions& options, FILE* out);

}  // namespace loom::elastic

#include "planner/plan_table.h"

#include "core/check.h"

namespace loom::planner {

std::string format_plan_table(const std::vector<Candidate>& plans) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  std::string out = strprintf("%3s %5s %3s %3s %3s %3s %2s %5s %4s %5s %4s %4s %9s %2s | %8s %8s %11s %5s %6s\n", "#",
                              "dp", "tp", "pp", "cp", "ep", "v", "sched", "mb", "m", "zero", "prec", "recompute", "sp",
                              "mem GiB", "step s", "tokens/s", "MFU", "bubble");
  for (size_t i = 0; i < plans.size(); i++) {
    const Layout& l = plans[i].layout;
    const StepTime& t = plans[i].time;
    // The pipeline schedule: none without stages.
    const char* sched = l.pp == 1 ? "-" : l.schedule() == pp::ScheduleKind::Interleaved1F1B ? "int" : l.schedule_name();
    out += strprintf("%3zu %5d %3d %3d %3d %3d %2d %5s %4d %5d %4d %4s %9s %2s | %8.1f%s%8.3f %11.0f %4.0f%% %5.1f%%%s\n",
                     i + 1, l.dp, l.tp, l.pp, l.cp, l.ep, l.v, sched, l.micro_batch, l.micro_batches, l.zero,
                     compute_precision_name(l.precision),
                     to_string(l.recompute), l.seq_parallel ? "y" : "n", plans[i].memory.total() / kGiB,
                     plans[i].fits ? " " : "!", t.step, t.tokens_per_s, 100 * t.mfu, 100 * t.bubble_fraction,
                     plans[i].fits ? "" : "  DOES NOT FIT (--ignore-memory)");
  }
  return out;
}

}  // namespace loom::planner

// loom: train GPT-style models. See `loom --help`.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <cstdlib>
#include <memory>
#include <exception>

#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"

namespace {

// Commands that may run as one rank of many (under mpirun or srun, or alone
// as an MPI singleton). An error after the set-up phase may hit one rank
// only, so it is reported with the rank and ends the whole job at once.
int run_distributed(int* argc, char*** argv, int (*command)(const loom::cli::Args&, loom::MpiRuntime&),
                    const loom::cli::Args& args) {
  loom::MpiRuntime mpi(argc, argv);
  int code = 0;
  try {
    return command(args, mpi);
  } catch (const loom::UserError& e) {
    std::fprintf(stderr, "loom: rank %d: error: %s\n", mpi.world_rank(), e.what());
    code = 2;
  } catch (const std::filesystem::filesystem_error& e) {  // names the path: the machine's or the user's, not loom's
    std::fprintf(stderr, "loom: rank %d: error: %s\n", mpi.world_rank(), e.what());
    code = 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: rank %d: internal error: %s\n", mpi.world_rank(), e.what());
    code = 1;
  }
  if (mpi.world_size() > 1) loom::MpiRuntime::abort_job(code);
  return code;
}

// `loom bench NAME ...`: the one dispatcher of the benchmarks (src/bench/).
// A launcher bench starts mpirun of its NAME-child, which runs as ranks.
int run_bench(int* argc, char*** argv, const loom::cli::Args& rest) {
  using namespace loom::cli;
  using Plain = int (*)(const Args&);
  using Ranked = int (*)(const Args&, loom::MpiRuntime&);
  struct Entry {
    const char* name;
    Plain plain;
    Ranked ranked;
  };
  static const Entry kBenches[] = {
      {"comm", cmd_bench_comm, nullptr},          {"comm-child", nullptr, cmd_bench_comm_child},
      {"scaling", cmd_bench_scaling, nullptr},    {"scaling-child", nullptr, cmd_bench_scaling_child},
      {"checkpoint", cmd_bench_checkpoint, nullptr}, {"tp", cmd_bench_tp, nullptr},
      {"tp-child", nullptr, cmd_bench_tp_child},  {"pp", cmd_bench_pp, nullptr},
      {"pp-child", nullptr, cmd_bench_pp_child},  {"cp", cmd_bench_cp, nullptr},
      {"cp-child", nullptr, cmd_bench_cp_child},  {"tokenizer", cmd_bench_tokenizer, nullptr},
      {"packed", cmd_bench_packed, nullptr},      {"cluster", cmd_bench_cluster, nullptr},
      {"cluster-child", nullptr, cmd_bench_cluster_child}, {"elastic", cmd_bench_elastic, nullptr},
      {"planner", cmd_bench_planner, nullptr}};
  const std::string name = rest.empty() ? "" : rest[0];
  // `bench moe --ep LIST` runs as the ranks of the user's mpirun.
  if (name == "moe")
    return std::find(rest.begin(), rest.end(), "--ep") != rest.end() ? run_distributed(argc, argv, cmd_bench_moe_ep, rest)
                                                                      : cmd_bench_moe(rest);
  if (name == "calibrate") {
    // An MPI process, like every `loom train` rank, so that the measured
    // per-process memory includes the MPI runtime's; not with --mpi, which
    // launches mpirun itself (OpenMPI refuses that from inside a job).
    const bool launches_mpirun = std::find(rest.begin(), rest.end(), "--mpi") != rest.end();
    std::unique_ptr<loom::MpiRuntime> mpi;
    if (!launches_mpirun) mpi = std::make_unique<loom::MpiRuntime>(argc, argv);
    return cmd_bench_calibrate(rest);
  }
  for (const Entry& e : kBenches)
    if (name == e.name) return e.plain ? e.plain(rest) : run_distributed(argc, argv, e.ranked, rest);
  return cmd_bench_step(rest);  // step, step-child, or an unknown name (refused there)
}

}  // namespace

int main(int argc, char** argv) {
  using namespace loom;
  cli::Args args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      cli::print_help();
      return 0;
    }
    std::string cmd = args[0];
    cli::Args rest(args.begin() + 1, args.end());
    // `loom CMD ... --help`: that command's usage (not as the value of an
    // option that takes free text), from rank 0 alone under mpirun.
    for (size_t i = 0; i < rest.size() && rest[i] != "--"; i++) {  // after --: a launcher's options
      if (rest[i] != "--help" && rest[i] != "-h") continue;
      if (i > 0 && (rest[i - 1] == "--prompt" || rest[i - 1] == "--set")) continue;
      for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
        if (const char* rank = std::getenv(var); rank && std::string(rank) != "0") return 0;
      if (cli::print_command_help(cmd)) return 0;
      break;  // not a command: said below
    }
    // LOOM_MAX_CPU_ISA caps every command's kernels; train and info combine
    // it with their own cap (runtime.isa, --isa) and apply it themselves.
    if (cmd != "train" && cmd != "info") cpu::cap_isa(std::nullopt, "LOOM_MAX_CPU_ISA");
    if (cmd == "train") return run_distributed(&argc, &argv, cli::cmd_train, rest);
    if (cmd == "bench") return run_bench(&argc, &argv, rest);
    if (cmd == "info") return cli::cmd_info(rest);
    if (cmd == "elastic") return cli::cmd_elastic(rest);
    if (cmd == "plan") return cli::cmd_plan(rest);
    if (cmd == "prepare") return cli::cmd_prepare(rest);
    if (cmd == "export") return cli::cmd_export(rest);
    if (cmd == "generate") return cli::cmd_generate(rest);
    if (cmd == "report") return cli::cmd_report(rest);
    if (cmd == "diagnose") return cli::cmd_diagnose(rest);
    std::fprintf(stderr, "loom: unknown command '%s' (try loom --help)\n", cmd.c_str());
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  } catch (const std::filesystem::filesystem_error& e) {  // a loop, a name too long, no permission: names the path
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: internal error: %s\n", e.what());
    return 1;
  }
}

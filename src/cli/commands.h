// Subcommands of the `loom` executable. Each returns the process exit code:
// 0 success, 2 bad input (UserError), 1 internal error.
#pragma once

#include <string>
#include <vector>

namespace loom {
class MpiRuntime;
}

namespace loom::cli {

using Args = std::vector<std::string>;

// Every rank of an mpirun job runs cmd_train; rank 0 logs.
int cmd_train(const Args& args, MpiRuntime& mpi);
// `loom bench step` (and its step-child); every bench lives in src/bench/.
int cmd_bench_step(const Args& args);
// `loom bench comm` (launches mpirun) and its per-rank child.
int cmd_bench_comm(const Args& args);
int cmd_bench_comm_child(const Args& args, MpiRuntime& mpi);
// `loom bench scaling` (launches mpirun) and its per-rank child.
int cmd_bench_scaling(const Args& args);
// `loom bench moe --ep 1,2,4` under mpirun: the expert-parallel table.
int cmd_bench_moe_ep(const Args& args, MpiRuntime& mpi);
int cmd_bench_scaling_child(const Args& args, MpiRuntime& mpi);
// `loom bench tp` (launches mpirun) and its per-rank child.
int cmd_bench_tp(const Args& args);
int cmd_bench_tp_child(const Args& args, MpiRuntime& mpi);
// `loom bench pp` (launches mpirun) and its per-rank child.
int cmd_bench_pp(const Args& args);
int cmd_bench_pp_child(const Args& args, MpiRuntime& mpi);
int cmd_bench_cp(const Args& args);
int cmd_bench_tokenizer(const Args& args);
// `loom bench packed`: packed rows against one sequence a row (attention tiles skipped, step time).
int cmd_bench_packed(const Args& args);
// `loom bench moe`: a mixture of experts against the dense model of the same active FLOPs; balancing modes.
int cmd_bench_moe(const Args& args);
int cmd_bench_cp_child(const Args& args, MpiRuntime& mpi);
// `loom bench cluster`: layouts on an emulated 2-node cluster, measured against the planner.
int cmd_bench_cluster(const Args& args);
int cmd_bench_cluster_child(const Args& args, MpiRuntime& mpi);
// `loom bench planner`: predicted against measured over a matrix of `loom train` runs.
int cmd_bench_planner(const Args& args);
int cmd_prepare(const Args& args);
// `loom plan` and `loom bench calibrate` (src/planner/).
int cmd_plan(const Args& args);
int cmd_bench_calibrate(const Args& args);
// `loom export` and `loom generate` (src/checkpoint/); `loom bench checkpoint`.
int cmd_export(const Args& args);
int cmd_generate(const Args& args);
int cmd_bench_checkpoint(const Args& args);
// `loom report RUN_DIR` and `loom diagnose RUN_DIR [--json]` (src/obs/).
int cmd_report(const Args& args);
int cmd_diagnose(const Args& args);
// `loom elastic`: mpirun of `loom train`, restarted on the surviving ranks
// when ranks fail (src/elastic/).
int cmd_elastic(const Args& args);
// `loom bench elastic`: a rank killed mid-run; detection, restart, steps lost, losses.
int cmd_bench_elastic(const Args& args);
// `loom info`: the CPU, the kernels chosen for it and their measured rates.
int cmd_info(const Args& args);
void print_help();
// One command's section of the usage (its options and examples) and the exit
// codes; false if `command` has none.
bool print_command_help(const std::string& command);

// Where bundled files (configs/, data/, tools/) live: $LOOM_HOME, else the
// source tree this binary was built from.
std::string project_root();
// `path` as given if it exists, else relative to project_root() if that exists.
std::string resolve_path(const std::string& path);

}  // namespace loom::cli

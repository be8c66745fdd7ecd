#include <sys/stat.h>

#include <omp.h>
#include <stdlib.h>  // getloadavg

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <malloc.h>
#include <unistd.h>

#include "cli/command_util.h"
#include "cli/calibrate.h"
#include "cli/commands.h"
#include "core/atomic_file.h"
#include "comm/mpi_comm.h"
#include "comm/progress_engine.h"
#include "config/run_config.h"
#include "core/check.h"
#include "kernels/cpu/isa.h"
#include <mpi.h>

#include "obs/run_dir.h"
#include "parallel/grid/parallel_context.h"
#include "planner/predict.h"
#include "train/run_context.h"
#include "train/trainer.h"

namespace loom::cli {

std::string project_root() {
  const char* home = std::getenv("LOOM_HOME");
  return home && *home ? home : LOOM_SOURCE_DIR;
}

static bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

std::string resolve_path(const std::string& path) {
  if (path.empty() || path[0] == '/' || exists(path)) return path;
  std::string alt = project_root() + "/" + path;
  return exists(alt) ? alt : path;
}

// --layout auto: rank 0 asks the planner for the fastest layout that fits
// (dp, tp, pp, ZeRO stage, micro-batch, recomputation) and every rank takes
// it, or every rank fails with rank 0's message.
static void choose_layout_on_rank0(RunConfig& cfg, MpiRuntime& mpi, const std::string& cluster) {
  const int nodes = discover_nodes().nodes();  // collective: before rank 0 alone plans
  int chosen[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // ok, dp, tp, pp, zero, micro-batch, recompute, cp
  std::string error;
  if (mpi.world_rank() == 0) {
    try {
      const planner::Layout l = planner::choose_layout(cfg, mpi.world_size(), planner::cluster_for_run(cluster, nodes));
      chosen[0] = 1, chosen[1] = l.dp, chosen[2] = l.tp, chosen[3] = l.pp, chosen[4] = l.zero;
      chosen[5] = l.micro_batch, chosen[6] = int(l.recompute), chosen[7] = l.cp;
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  MPI_Bcast(chosen, 8, MPI_INT, 0, MPI_COMM_WORLD);
  LOOM_USER_CHECK(chosen[0] == 1, "--layout auto: %s", mpi.world_rank() == 0 ? error.c_str() : "no layout fits");
  planner::Layout l = planner::layout_of(cfg, mpi.world_size());
  l.dp = chosen[1], l.tp = chosen[2], l.pp = chosen[3], l.zero = chosen[4], l.cp = chosen[7];
  l.micro_batch = chosen[5], l.micro_batches = cfg.train.batch_size / (l.dp * l.micro_batch);
  l.recompute = Recompute(chosen[6]);
  cfg = planner::with_layout(cfg, l);
  if (mpi.world_rank() == 0)
    std::printf("loom train: --layout auto chose dp %d x tp %d x pp %d%s, ZeRO-%d, micro-batch %d, recompute %s "
                "(loom plan)\n",
                chosen[1], chosen[2], chosen[3], chosen[7] > 1 ? strprintf(" x cp %d", chosen[7]).c_str() : "",
                chosen[4], chosen[5], cfg.train.recompute.c_str());
}

// The threads a run's calibration is for: the run's own per rank.
int calibration_threads(const RunConfig& cfg) {
  return cfg.runtime.threads > 0 ? cfg.runtime.threads : omp_get_num_procs();
}

// The 1-minute load average (0 when unknown); above half the cores the
// machine is too loaded for a calibration to stand.
double load_average() {
  double load = 0;
  return ::getloadavg(&load, 1) == 1 ? load : 0;
}
bool loaded(double load) { return load > 0.5 * omp_get_num_procs(); }

// A single-rank run without `loom bench calibrate`'s file predicts itself
// from the calibration `loom bench calibrate --quick` takes for its thread
// count, once per CPU, thread count and build (planner::auto_calibration_path),
// in a child process so that its memory figures are its own. Returns the
// cluster file to use, or "" (then the planner's uncalibrated guesses).
// Started by mpirun or srun (even as one rank) it only reads the cache: a
// child forked by an MPI process of a launched job confuses the launcher
// (OpenMPI's finalize then waits forever). A calibration taken while other
// work loaded the machine (1-minute load average above half the cores) is
// marked (PATH.busy) and taken again by the first run on a quieter machine.
std::string automatic_calibration(const RunConfig& cfg, bool launched) {
  const std::string root = planner::default_root();
  if (std::filesystem::exists(planner::local_cluster_path(root))) return "";
  const int threads = calibration_threads(cfg);
  const std::string path = planner::auto_calibration_path(root, threads), busy_mark = path + ".busy";
  const double load = load_average();
  const bool busy = loaded(load);
  const bool cached = std::filesystem::exists(path);
  // Marked: taken on a loaded machine, or inside a launched run (PATH.partial).
  const bool marked = std::filesystem::exists(busy_mark) || std::filesystem::exists(path + ".partial");
  if (cached && (busy || launched || !marked)) {
    std::printf("calibration: %s (taken automatically for %d threads; loom bench calibrate measures more)\n",
                path.c_str(), threads);
    return path;
  }
  if (launched) return "";
  std::printf("calibration: measuring this machine for the planner (once per CPU, thread count and build) ...\n");
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  // The child runs the kernels this run will (runtime.isa caps them here).
  const CommandResult r = run_command(strprintf("LOOM_MAX_CPU_ISA=%s '%s' bench calibrate --quick --threads %d "
                                                "--out '%s' 2>&1",
                                                cpu::isa_name(cpu::kernel_isa()), self_exe().c_str(), threads,
                                                path.c_str()));
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.status != 0 || !std::filesystem::exists(path)) {
    std::printf("calibration: failed (%s); the prediction uses uncalibrated guesses\n", r.output.c_str());
    return "";
  }
  std::error_code ec;
  if (busy) {
    write_file_atomically(busy_mark, strprintf("load average %.2f on %d cores\n", load, omp_get_num_procs()));
    std::printf("calibration: took %.1f s with the machine busy (load average %.2f): cached in %s until a quieter "
                "run measures again\n",
                s, load, path.c_str());
  } else {
    std::filesystem::remove(busy_mark, ec);
    std::printf("calibration: took %.1f s, cached in %s\n", s, path.c_str());
  }
  std::filesystem::remove(path + ".partial", ec);  // measured whole now, in a fresh process
  return path;
}

// This process's resident memory now (VmRSS), in bytes.
double resident_bytes() {
  std::ifstream status("/proc/self/status");
  for (std::string key; status >> key;) {
    double kib = 0;
    if (key == "VmRSS:" && status >> kib) return kib * 1024;
    status.ignore(1 << 16, '\n');
  }
  return 0;
}

// A run started by mpirun or srun, or of several ranks, cannot fork the
// calibration (above), so rank 0 takes it in this process before anything
// else is allocated, while the other ranks sleep (a barrier that polls
// would take the cores being measured): the products, the tiled attention
// and memory bandwidth as `loom bench calibrate --quick` measures them,
// without its training step. The process overhead is then this process's
// resident memory after the probe (libraries, MPI, threads, oneDNN's
// kernels), not a fresh process's beside a step; the file is marked so that
// the first single-rank run on a quiet machine measures it all again (and
// a launched run on a quiet machine measures it again inside the run). The
// probe's buffers are freed and the peak-RSS mark reset, so the run's own
// measured peak does not include them.
void calibrate_inside_run(const RunConfig& cfg, MpiRuntime& mpi) {
  const std::string root = planner::default_root();
  const int threads = calibration_threads(cfg);
  const std::string path = planner::auto_calibration_path(root, threads);
  // Rank 0 decides: a file taken on a loaded machine (PATH.busy) is
  // measured again when the machine is quiet now.
  const double load = load_average();
  const bool quiet = !loaded(load);
  int have = std::filesystem::exists(planner::local_cluster_path(root)) ||
             (std::filesystem::exists(path) && !(quiet && std::filesystem::exists(path + ".busy")));
  MPI_Bcast(&have, 1, MPI_INT, 0, MPI_COMM_WORLD);
  if (have) return;
  int ok = 0;
  if (mpi.world_rank() == 0) {
    std::printf("calibration: none for %d threads yet; rank 0 measures this machine for the planner ...\n", threads);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      set_threads(threads);
      planner::ClusterSpec c = measure_this_machine(threads, true, false);
      ::malloc_trim(0);  // the probe's freed buffers back to the system, not counted as overhead
      c.overhead_bytes = resident_bytes();
      c.description = strprintf("this machine, measured inside a launched loom train (rank 0, %d threads)", threads);
      std::filesystem::create_directories(std::filesystem::path(path).parent_path());
      write_file_atomically(path, c.to_toml());
      write_file_atomically(path + ".partial", "taken inside a launched run: its overhead is not a fresh process's\n");
      if (!quiet) write_file_atomically(path + ".busy", strprintf("load average %.2f\n", load));
      else std::filesystem::remove(path + ".busy");
      std::ofstream("/proc/self/clear_refs") << "5";  // reset the peak-RSS mark the probe raised
      ok = 1;
      std::printf("calibration: took %.1f s (overhead %.1f MiB resident), cached in %s until a single-rank run "
                  "measures it all\n",
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  c.overhead_bytes / (1 << 20), path.c_str());
    } catch (const std::exception& e) {
      std::printf("calibration: failed (%s); the prediction uses uncalibrated guesses\n", e.what());
    }
    std::fflush(stdout);
  }
  MPI_Request done;
  MPI_Ibcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD, &done);
  for (int finished = 0;;) {
    MPI_Test(&done, &finished, MPI_STATUS_IGNORE);
    if (finished) break;
    ::usleep(10000);
  }
}

int cmd_train(const Args& args, MpiRuntime& mpi) {
  const bool rank0 = mpi.world_rank() == 0;
  RunConfig cfg;
  TrainOptions options;
  std::unique_ptr<ParallelGrid> grid;
  try {
    // Set-up: every rank reads the same config and checks the same things,
    // so every rank fails alike; rank 0 alone prints the message.
    std::string config_path, layout = "config";
    std::vector<std::string> overrides;
    std::vector<Fault> faults;
    for (size_t i = 0; i < args.size(); i++) {
      const std::string& a = args[i];
      auto value = [&](const char* flag) {
        LOOM_USER_CHECK(i + 1 < args.size(), "%s needs a value", flag);
        return args[++i];
      };
      if (a == "--config") config_path = value("--config");
      else if (a.rfind("--config=", 0) == 0) config_path = a.substr(9);
      else if (a == "--set") overrides.push_back(value("--set"));
      else if (a == "--layout") layout = value("--layout");
      else if (a == "--resume") options.resume = value("--resume");
      else if (a == "--fault") faults.push_back(parse_fault(value("--fault")));
      else if (a == "--cluster") options.cluster = value("--cluster");
      else if (a.rfind("--set=", 0) == 0) overrides.push_back(a.substr(6));
      else throw UserError(strprintf("train: unknown option '%s' (try loom train --help)", a.c_str()));
    }
    if (!config_path.empty()) {
      std::string resolved = resolve_path(config_path);
      LOOM_USER_CHECK(exists(resolved), "config file '%s' not found", config_path.c_str());
      config_path = resolved;
    }
    LOOM_USER_CHECK(layout == "config" || layout == "auto", "train: --layout takes auto or config, got '%s'",
                    layout.c_str());
    cfg = load_run_config(config_path, overrides);
    if (!options.cluster.empty()) planner::cluster_for_run(options.cluster, 1);  // a bad --cluster stops here
    // Before any oneDNN primitive exists: oneDNN fixes its ISA at first use.
    cpu::cap_isa(cfg.runtime.isa, "runtime.isa");
    // Before --layout auto, which plans with it too.
    if (options.cluster.empty() && mpi.world_size() == 1)
      options.cluster = automatic_calibration(cfg, mpi.launched());
    if (options.cluster.empty() && (mpi.world_size() > 1 || mpi.launched())) {
      calibrate_inside_run(cfg, mpi);
      if (mpi.world_size() == 1) options.cluster = automatic_calibration(cfg, true);  // now cached
    }
    if (layout == "auto") choose_layout_on_rank0(cfg, mpi, options.cluster);
    cfg.data.path = resolve_path(cfg.data.path);
    LOOM_USER_CHECK(exists(cfg.data.path), "data %s '%s' (data.path) not found%s",
                    cfg.data.format == "shards" ? "folder" : "file", cfg.data.path.c_str(),
                    cfg.data.format == "shards" ? " (scripts/setup.sh or `loom prepare` makes it)" : "");
    // bytes: a regular file (not a folder, and not a device such as /dev/zero
    // that never ends); shards: a folder.
    LOOM_USER_CHECK(cfg.data.format == "shards" ? std::filesystem::is_directory(cfg.data.path)
                                                : std::filesystem::is_regular_file(cfg.data.path),
                    "data.path '%s' is not a %s (data.format = \"%s\")", cfg.data.path.c_str(),
                    cfg.data.format == "shards" ? "folder of shards" : "regular file", cfg.data.format.c_str());
    grid = std::make_unique<ParallelGrid>(ParallelGrid::for_world(mpi.world_size(), cfg.parallel.dp, cfg.parallel.tp,
                                                                  cfg.parallel.pp, cfg.parallel.order,
                                                                  cfg.parallel.cp, cfg.parallel.ep));
    check_layout(cfg, *grid);
    // Refuse a run that cannot fit before allocating it (allocating first
    // would page for minutes, or be killed). Collective: every rank is here.
    int ranks_on_node = 1;
    discover_nodes(&ranks_on_node);
    planner::check_fits_this_machine(cfg, mpi.world_size(), ranks_on_node);
    options.faults = FaultPlan(faults);
    options.faults.check_ranks(mpi.world_size());
    if (rank0)
      std::printf("loom train: config %s\n%s", config_path.empty() ? "(defaults)" : config_path.c_str(),
                  cfg.to_toml().c_str());
  } catch (const UserError& e) {
    if (rank0) std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  }
  auto ctx = make_run_context(cfg, *grid, mpi);
  const bool engine = mpi.progress_engine_started();
  if (rank0 && !cfg.train.run_dir.empty())
    options.run_dir = obs::RunDir::default_path(cfg.train.run_dir, cfg.train.run_name);
  if (rank0 && mpi.world_size() > 1)
    std::printf("%s\n", engine ? strprintf("communication: a progress thread per rank completes the non-blocking "
                                            "operations while compute runs (polls every %d us)",
                                            cfg.runtime.progress_poll_us).c_str()
                                : cfg.runtime.progress_thread
                                      ? "communication: no progress thread (MPI gives no MPI_THREAD_MULTIPLE)"
                                      : "communication: no progress thread (runtime.progress_thread = false)");
  if (rank0 && ctx->dp_reduce().applies) std::printf("%s\n", ctx->dp_reduce().line().c_str());
  train(cfg, *ctx, rank0 ? stdout : nullptr, options);
  return 0;
}

}  // namespace loom::cli

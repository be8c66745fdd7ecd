#include <sys/stat.h>

#include <cstdio>

#include "cli/commands.h"
#include "comm/mpi_comm.h"
#include "config/run_config.h"
#include "core/check.h"
#include "obs/run_dir.h"
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

int cmd_train(const Args& args, MpiRuntime& mpi) {
  const bool rank0 = mpi.world_rank() == 0;
  RunConfig cfg;
  std::unique_ptr<ParallelGrid> grid;
  try {
    // Set-up: every rank reads the same config and checks the same things,
    // so every rank fails alike; rank 0 alone prints the message.
    std::string config_path;
    std::vector<std::string> overrides;
    for (size_t i = 0; i < args.size(); i++) {
      const std::string& a = args[i];
      auto value = [&](const char* flag) {
        LOOM_USER_CHECK(i + 1 < args.size(), "%s needs a value", flag);
        return args[++i];
      };
      if (a == "--config") config_path = value("--config");
      else if (a.rfind("--config=", 0) == 0) config_path = a.substr(9);
      else if (a == "--set") overrides.push_back(value("--set"));
      else if (a.rfind("--set=", 0) == 0) overrides.push_back(a.substr(6));
      else if (a == "-h" || a == "--help") return rank0 ? (print_help(), 0) : 0;
      else throw UserError(strprintf("train: unknown option '%s' (try loom --help)", a.c_str()));
    }
    if (!config_path.empty()) {
      std::string resolved = resolve_path(config_path);
      LOOM_USER_CHECK(exists(resolved), "config file '%s' not found", config_path.c_str());
      config_path = resolved;
    }
    cfg = load_run_config(config_path, overrides);
    cfg.data.path = resolve_path(cfg.data.path);
    LOOM_USER_CHECK(exists(cfg.data.path), "data %s '%s' (data.path) not found%s",
                    cfg.data.format == "shards" ? "folder" : "file", cfg.data.path.c_str(),
                    cfg.data.format == "shards" ? " (scripts/setup.sh or `loom prepare` makes it)" : "");
    grid = std::make_unique<ParallelGrid>(ParallelGrid::for_world(mpi.world_size(), cfg.parallel.dp, cfg.parallel.tp,
                                                                  cfg.parallel.pp, cfg.parallel.order));
    check_layout(cfg, *grid);
    if (rank0)
      std::printf("loom train: config %s\n%s", config_path.empty() ? "(defaults)" : config_path.c_str(),
                  cfg.to_toml().c_str());
  } catch (const UserError& e) {
    if (rank0) std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  }
  auto ctx = ParallelContext::create_mpi(*grid, MpiOptions{cfg.runtime.comm_timeout_s});
  TrainOptions options;
  if (rank0 && !cfg.train.run_dir.empty())
    options.run_dir = obs::RunDir::default_path(cfg.train.run_dir, cfg.train.run_name);
  train(cfg, *ctx, rank0 ? stdout : nullptr, options);
  return 0;
}

}  // namespace loom::cli

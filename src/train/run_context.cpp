#include "train/run_context.h"

#include <algorithm>

namespace loom {

std::unique_ptr<ParallelContext> make_run_context(const RunConfig& cfg, const ParallelGrid& grid, MpiRuntime& mpi) {
  // One rank has nothing to progress.
  ProgressEngine* engine =
      cfg.runtime.progress_thread && mpi.world_size() > 1 ? mpi.progress_engine(cfg.runtime.progress_poll_us) : nullptr;
  DpReduceOptions dp_reduce;
  dp_reduce.mode = cfg.parallel.dp_reduce;
  // "auto" times one bucket's all-reduce, at most 4 MiB.
  dp_reduce.probe_bytes = size_t(std::min(4.0, double(cfg.parallel.bucket_mb)) * (1 << 20));
  return ParallelContext::create_mpi(grid, MpiOptions{cfg.runtime.comm_timeout_s, engine}, dp_reduce);
}

}  // namespace loom

// The groups a training run talks over, made as its config asks: the
// progress thread (runtime.progress_thread, with more than one rank) and
// the data group's reduction across nodes (parallel.dp_reduce). Collective
// over every world rank. Used by `loom train` and the benchmarks that run
// the trainer under mpirun.
#pragma once

#include <memory>

#include "comm/mpi_comm.h"
#include "config/run_config.h"
#include "parallel/grid/parallel_context.h"

namespace loom {

std::unique_ptr<ParallelContext> make_run_context(const RunConfig& cfg, const ParallelGrid& grid, MpiRuntime& mpi);

}  // namespace loom

// The sum over a group of one double per rank, exact in transport and the
// same bits on every rank: the doubles travel untouched (as four 16-bit
// words: all_gather moves 16-bit data as it is) and are added in rank
// order, so the result does not depend on how MPI orders a reduction.
// For norms, loss sums and target counts (integers below 2^53 are exact).
#pragma once

#include "comm/communicator.h"

namespace loom {

double sum_over_ranks(Communicator& comm, double local);

}  // namespace loom

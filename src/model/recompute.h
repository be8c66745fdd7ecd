// Activation recomputation: what a block keeps for its backward.
//   none       every tensor its backward reads
//   selective  all but the attention core's (the softmax probabilities),
//              recomputed from the stored q/k/v before the block's backward
//              (Korthikanti et al. 2022)
//   full       only the block's output (the next block's input): the whole
//              block is run again before its backward
// Same kernels in the same order either way, so the results are bitwise
// those of `none`.
#pragma once

#include <string>

namespace loom {

enum class Recompute { none, selective, full };

const char* to_string(Recompute r);
// "none" | "selective" | "full"; UserError naming `field` otherwise.
Recompute parse_recompute(const std::string& s, const char* field = "train.recompute");

}  // namespace loom

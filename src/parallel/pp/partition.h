// Which transformer blocks each pipeline stage (or, interleaved, each virtual
// stage) holds: contiguous ranges in order, balanced by cost.
#pragma once

#include <string>
#include <vector>

namespace loom::pp {

// Splits n_layer blocks (cost 1 each) into `parts` contiguous ranges so that
// the most expensive part is as cheap as possible, where the first part also
// carries first_extra (the embedding) and the last last_extra (the final
// norm, LM head and loss), in units of one block. Every part gets at least
// one block. Returns the block count per part.
std::vector<int> balanced_partition(int n_layer, int parts, double first_extra, double last_extra);

// Checks a user's split (parallel.pp_layers): `parts` counts, each >= 1,
// summing to n_layer. Throws UserError naming the field.
void check_partition(const std::vector<int>& counts, int n_layer, int parts);

// "3+3" style description.
std::string describe_partition(const std::vector<int>& counts);

}  // namespace loom::pp

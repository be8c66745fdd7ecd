// A string from one rank to every rank of a group (a checkpoint folder, a
// run directory, an error message that every rank must raise alike).
#pragma once

#include <string>

#include "comm/communicator.h"

namespace loom {

// Collective over `group`: every rank returns rank `root`'s `text`.
std::string broadcast_text(Communicator& group, const std::string& text, int root = 0);

}  // namespace loom

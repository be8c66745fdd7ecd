// Files loom reads must be regular files: a folder reads as an error deep in
// a library, /dev/null as empty, /dev/zero never ends and a FIFO blocks on
// open. Refused by name instead, before opening.
#pragma once

#include <string>

namespace loom {

// Throws UserError "<what> '<path>' does not exist" or "... is not a regular
// file (a folder, a device or a pipe)".
void require_regular_file(const std::string& path, const std::string& what);

}  // namespace loom

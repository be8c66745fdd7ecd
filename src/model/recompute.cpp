#include "model/recompute.h"

#include "core/check.h"

namespace loom {

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    default: return "none";
  }
}

Recompute parse_recompute(const std::string& s, const char* field) {
  if (s == "none") return Recompute::none;
  if (s == "selective") return Recompute::selective;
  if (s == "full") return Recompute::full;
  throw UserError(strprintf("%s: unknown recomputation '%s' (\"none\", \"selective\" or \"full\")", field, s.c_str()));
}

}  // namespace loom

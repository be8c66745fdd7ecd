#include "obs/trace_span.h"

namespace loom::obs {

namespace {
constexpr const char* kKindNames[kSpanKindCount] = {"forward",   "backward", "comm", "wait", "bubble",
                                                    "optimizer", "data",     "step", "other", "backward_weight"};
constexpr const char* kGroupNames[] = {"", "tp", "dp", "pp", "world"};
}  // namespace

const char* span_kind_name(SpanKind k) { return kKindNames[int(k)]; }

bool parse_span_kind(const std::string& s, SpanKind* out) {
  for (int i = 0; i < kSpanKindCount; i++)
    if (s == kKindNames[i]) return *out = SpanKind(i), true;
  return false;
}

const char* comm_group_name(CommGroup g) { return kGroupNames[int(g)]; }

bool parse_comm_group(const std::string& s, CommGroup* out) {
  for (int i = 0; i < 5; i++)
    if (s == kGroupNames[i]) return *out = CommGroup(i), true;
  return false;
}

}  // namespace loom::obs

// The ranked plans as a fixed-width table, one row per layout.
#pragma once

#include <string>
#include <vector>

#include "planner/search.h"

namespace loom::planner {

std::string format_plan_table(const std::vector<Candidate>& plans);

}  // namespace loom::planner

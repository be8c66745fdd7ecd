#include "model/activation_plan.h"

#include <algorithm>

#include "core/check.h"

namespace loom {

void ActivationPlan::alias(size_t i, size_t to) {
  LOOM_CHECK(i < wants_.size() && to < wants_.size() && wants_[to].alias_of < 0 && wants_[i].bytes == wants_[to].bytes,
             "activation %zu cannot share activation %zu's buffer", i, to);
  wants_[i].alias_of = long(to);
}

void ActivationPlan::drop(size_t i) {
  LOOM_CHECK(i < wants_.size() && wants_[i].alias_of == -1, "activation %zu cannot be dropped", i);
  wants_[i].alias_of = -2;
}

std::vector<size_t> ActivationPlan::offsets(std::map<int, size_t>* sizes) const {
  std::map<int, Arena> regions;  // reserve-only arenas: the same rounding as one arena
  std::vector<size_t> at;
  for (const Want& w : wants_) at.push_back(w.alias_of == -1 ? regions[w.region].reserve(w.bytes) : 0);
  if (sizes)
    for (const auto& [r, arena] : regions) (*sizes)[r] = arena.size();
  return at;
}

void ActivationPlan::allocate(Arena& arena, MemoryResource& memory) {
  std::vector<size_t> own;
  for (const Want& w : wants_) own.push_back(w.alias_of == -1 ? arena.reserve(w.bytes) : 0);
  arena.allocate(memory);
  for (size_t i = 0; i < wants_.size(); i++) {
    const long from = wants_[i].alias_of == -1 ? long(i) : wants_[i].alias_of;
    *wants_[i].p = from == -2 ? nullptr : arena.at<uint8_t>(own[size_t(from)]);
  }
}

size_t ActivationPlan::planned_bytes() const {
  Arena arena;
  for (const Want& w : wants_)
    if (w.alias_of == -1) arena.reserve(w.bytes);
  return arena.size();
}

std::map<int, size_t> ActivationPlan::region_bytes() const {
  std::map<int, size_t> sizes;
  offsets(&sizes);
  return sizes;
}

void ActivationPlan::bind(const std::map<int, std::byte*>& bases) const {
  const std::vector<size_t> at = offsets(nullptr);
  for (size_t i = 0; i < wants_.size(); i++) {
    const long from = wants_[i].alias_of == -1 ? long(i) : wants_[i].alias_of;
    if (from == -2) {
      *wants_[i].p = nullptr;
      continue;
    }
    const Want& w = wants_[size_t(from)];
    *wants_[i].p = bases.at(w.region) + at[size_t(from)];
  }
}

void SharedActivations::enroll(ActivationPlan plan, std::function<void()> bound) {
  LOOM_CHECK(!arena_.allocated(), "shared activations: a plan enrolled after the allocation");
  plans_.push_back({std::move(plan), std::move(bound)});
}

namespace {

// Shared regions (slots and work space): the largest of each over the plans.
std::map<int, size_t> shared_sizes(const std::vector<std::map<int, size_t>>& per_plan) {
  std::map<int, size_t> sizes;
  for (const auto& plan : per_plan)
    for (const auto& [r, bytes] : plan)
      if (r != ActivationPlan::kOwn) sizes[r] = std::max(sizes[r], bytes);
  return sizes;
}

}  // namespace

size_t SharedActivations::planned_bytes() const {
  std::vector<std::map<int, size_t>> per_plan;
  size_t own = 0;
  for (const Enrolled& e : plans_) {
    per_plan.push_back(e.plan.region_bytes());
    if (per_plan.back().count(ActivationPlan::kOwn)) own += per_plan.back().at(ActivationPlan::kOwn);
  }
  size_t total = own;
  for (const auto& [r, bytes] : shared_sizes(per_plan)) total += bytes;
  return total;
}

void SharedActivations::allocate(MemoryResource& memory) {
  LOOM_CHECK(!arena_.allocated(), "shared activations: allocated twice");
  std::vector<std::map<int, size_t>> per_plan;
  for (const Enrolled& e : plans_) per_plan.push_back(e.plan.region_bytes());
  std::map<int, size_t> shared_at;  // region -> offset
  for (const auto& [r, bytes] : shared_sizes(per_plan)) shared_at[r] = arena_.reserve(bytes);
  std::vector<size_t> own_at;
  for (const auto& sizes : per_plan)
    own_at.push_back(sizes.count(ActivationPlan::kOwn) ? arena_.reserve(sizes.at(ActivationPlan::kOwn)) : 0);
  arena_.allocate(memory);
  for (size_t i = 0; i < plans_.size(); i++) {
    std::map<int, std::byte*> bases;
    for (const auto& [r, at] : shared_at) bases[r] = arena_.base() + at;
    bases[ActivationPlan::kOwn] = arena_.base() + own_at[i];
    plans_[i].plan.bind(bases);
    if (plans_[i].bound) plans_[i].bound();
  }
}

}  // namespace loom

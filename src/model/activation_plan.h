// Activation memory, planned first and allocated once (a training step
// allocates nothing), and shared between a pipeline stage's chunks.
//
// A module's wants fall in regions: its own memory, one region per
// activation slot (a micro-batch's stored tensors), and the work space used
// within one action. A stage runs one action at a time and its executor
// gives a slot to one (micro-batch, chunk) at a time across the stage's
// chunks, so with several chunks per stage (interleaved 1F1B, ZB-V) chunk
// c's slot k and every other chunk's slot k can be the same memory, and so
// can the work space: SharedActivations lays each region out once, as large
// as the largest chunk's, so the stage holds its peak of (micro-batch,
// chunk) pairs of activations instead of the sum of each chunk's own peak.
// The buffers point-to-point messages use (a slot's input and gradient)
// stay each chunk's own, one per shared slot: a gradient send may still be
// in flight when another chunk takes the slot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "core/arena.h"

namespace loom {

class ActivationPlan {
 public:
  static constexpr int kOwn = -1;   // the module's alone
  static constexpr int kWork = -2;  // used within one action
  // Wants from here on belong to region r: kOwn, kWork or a slot index.
  void set_region(int r) { region_ = r; }
  template <class P>
  void want(P** p, size_t n, size_t elem = sizeof(float)) {
    wants_.push_back({reinterpret_cast<void**>(p), n * elem, -1, region_});
  }
  size_t size() const { return wants_.size(); }  // wants so far
  void** pointer(size_t i) const { return wants_[i].p; }
  // Want i gets no memory of its own: it will point where want `to` (of the
  // same size and region) does. Recomputation shares one block's buffers this way.
  void alias(size_t i, size_t to);
  // Want i is not needed after all: no memory, its pointer stays null.
  void drop(size_t i);
  // Reserves and allocates `arena`, then points every wanted pointer into it.
  void allocate(Arena& arena, MemoryResource& memory);
  // Reserves only: the bytes allocate() would take (a pure plan for the planner).
  size_t planned_bytes() const;
  // Per region, the bytes its wants take (laid out as bind() does).
  std::map<int, size_t> region_bytes() const;
  // Points every wanted pointer into its region, given each region's base.
  void bind(const std::map<int, std::byte*>& bases) const;

 private:
  struct Want {
    void** p;
    size_t bytes;
    long alias_of;  // -1: its own memory; -2: dropped
    int region;
  };
  std::vector<size_t> offsets(std::map<int, size_t>* sizes) const;  // within each want's region
  std::vector<Want> wants_;
  int region_ = kOwn;
};

// One pipeline stage's chunks' activation memory (see above). Each chunk's
// module enrolls its plan; allocate() then makes one allocation and binds
// every plan (each module's own region too).
class SharedActivations {
 public:
  // `bound` runs once the plan's pointers are set.
  void enroll(ActivationPlan plan, std::function<void()> bound);
  // The bytes allocate() takes: every module's own region, plus each shared
  // region as large as its largest.
  size_t planned_bytes() const;
  void allocate(MemoryResource& memory);
  bool allocated() const { return arena_.allocated(); }
  size_t bytes() const { return arena_.allocated() ? arena_.size() : planned_bytes(); }

 private:
  struct Enrolled {
    ActivationPlan plan;
    std::function<void()> bound;
  };
  std::vector<Enrolled> plans_;
  Arena arena_;
};

}  // namespace loom

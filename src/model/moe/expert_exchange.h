// Expert parallelism's token exchange (Megatron-core's and DeepSpeed-MoE's
// dispatch and combine): each rank of an ep group holds E / ep consecutive
// experts; a rank's routed pairs leave in expert order (the routing's rows,
// unpadded), so the pairs for one owner are one contiguous run, and go out
// in one variable all-to-all (MPI_Ialltoallv); the owner regroups what it
// received (source-major) into its experts' padded rows (expert-major,
// sources in rank order within an expert), runs them, and the reverse
// brings each output back to the routing row it left from.
//
// Forward: counts, tokens out (compute type), outputs back (fp32).
// Backward: output gradients out (compute type), input gradients back (fp32).
// An expert no token reached has zero rows and runs nothing.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "model/moe/moe_layer.h"

namespace loom::moe {

// What an owner knows of its rows once the counts are exchanged (kept for
// backward): rows from each source for each local expert, and its experts'
// padded layout.
struct ExchangeLayout {
  int32_t* recv_count = nullptr;  // [ep, E / ep]
  int32_t* first = nullptr;       // [E / ep + 1], multiples of Shape::kRowAlign
  int32_t* count = nullptr;       // [E / ep]
  ExpertRows rows(const Shape& s) const { return {s.local_experts(), first, count}; }
};

// Collective over ep: sends each owner this rank's counts (r.count [E]) for
// its experts and fills x from what every rank sent.
void exchange_counts(Communicator& ep, const Shape& s, const Routing& r, const ExchangeLayout& x);

// send [pairs, C] (the routing's rows) to the experts' owners; the rows for
// this rank's experts land at their padded rows of local [P, C]. staging:
// room for ep x pairs rows. Returns the seconds spent in the exchange.
template <class T>
double dispatch(Communicator& ep, const T* send, const Shape& s, const Routing& r, const ExchangeLayout& x, T* staging,
                T* local);
// The reverse: local [P, C]'s rows back to their sources' routing rows of
// send [pairs, C].
template <class T>
double gather_back(Communicator& ep, const T* local, const Shape& s, const Routing& r, const ExchangeLayout& x,
                   T* staging, T* send);

}  // namespace loom::moe

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
#include <memory>
#include <vector>

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

// Where the exchange's time went: waiting on it (exposed), and the part of
// its flight that ran beside other work (hidden: until a poke saw it done,
// or the whole window when none did).
struct ExchangeTime {
  double exposed = 0, hidden = 0;
  ExchangeTime& operator+=(const ExchangeTime& o) { return exposed += o.exposed, hidden += o.hidden, *this; }
};

// A dispatch in flight: started, then poked between other work, then
// finished (the rows regrouped into the local experts' layout).
template <class T>
class PendingDispatch {
 public:
  PendingDispatch(Communicator& ep, const T* send, const Shape& s, const Routing& r, const ExchangeLayout& x,
                  T* staging, T* local);
  void poke();           // drives the transfer (MPI moves it inside its calls); notes when it is done
  ExchangeTime finish();  // waits, regroups

 private:
  Communicator& ep_;
  const Shape& s_;
  const ExchangeLayout& x_;
  T *staging_, *local_;
  std::vector<int> from_rows_, from_first_;
  std::unique_ptr<Work> work_;
  double started_ = 0, done_at_ = -1;
};

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

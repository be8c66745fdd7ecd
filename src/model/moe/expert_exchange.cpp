#include "model/moe/expert_exchange.h"

#include <chrono>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace loom::moe {
namespace {

// The all-to-all's row counts and offsets, in both directions: this rank's
// runs to each owner, and each source's run of rows for this rank's experts.
struct Plan {
  std::vector<int> to_rows, to_first, from_rows, from_first;
};

Plan plan(const Shape& s, const Routing& r, const ExchangeLayout& x) {
  const int ep = s.ep, El = s.local_experts();
  Plan p;
  p.to_rows.resize(size_t(ep)), p.to_first.resize(size_t(ep));
  p.from_rows.resize(size_t(ep)), p.from_first.resize(size_t(ep));
  int at = 0;
  for (int q = 0; q < ep; q++) {
    p.to_first[size_t(q)] = r.first[size_t(q) * El];
    p.to_rows[size_t(q)] = r.first[size_t(q + 1) * El] - r.first[size_t(q) * El];
    int rows = 0;
    for (int e = 0; e < El; e++) rows += x.recv_count[size_t(q) * El + e];
    p.from_first[size_t(q)] = at, p.from_rows[size_t(q)] = rows;
    at += rows;
  }
  return p;
}

// Copies rows between the staging buffer (source-major, as received) and the
// local experts' padded rows (expert-major); to_local: that direction.
template <class T>
void regroup(T* staging, T* local, const Shape& s, const ExchangeLayout& x, const Plan& p, bool to_local) {
  const int ep = s.ep, El = s.local_experts();
  const size_t row = size_t(s.C) * sizeof(T);
#pragma omp parallel for schedule(static)
  for (int e = 0; e < El; e++) {
    int64_t at = x.first[size_t(e)];
    for (int q = 0; q < ep; q++) {
      int64_t from = p.from_first[size_t(q)];
      for (int f = 0; f < e; f++) from += x.recv_count[size_t(q) * El + f];
      const int64_t n = x.recv_count[size_t(q) * El + e];
      char* staged = reinterpret_cast<char*>(staging) + size_t(from) * row;
      char* mine = reinterpret_cast<char*>(local) + size_t(at) * row;
      if (to_local) std::memcpy(mine, staged, size_t(n) * row);
      else std::memcpy(staged, mine, size_t(n) * row);
      at += n;
    }
  }
}

template <class T>
constexpr DType dtype_of() {
  if constexpr (sizeof(T) == 4) return DType::f32;
  else return DType::bf16;  // 16-bit data travel as bytes: bf16 and f16 alike
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

void exchange_counts(Communicator& ep, const Shape& s, const Routing& r, const ExchangeLayout& x) {
  const int n = s.ep, El = s.local_experts();
  LOOM_CHECK(ep.size() == n, "the ep group has %d ranks, the layer expects %d", ep.size(), n);
  std::vector<int> ones(size_t(n), 1), at(size_t(n), 0);
  for (int q = 0; q < n; q++) at[size_t(q)] = q;
  // int32 counts travel as 4-byte rows of El (moved as they are).
  ep.all_to_all_rows_async(r.count, ones.data(), at.data(), x.recv_count, ones.data(), at.data(), size_t(El),
                           DType::f32)
      ->wait();
  x.first[0] = 0;
  for (int e = 0; e < El; e++) {
    int rows = 0;
    for (int q = 0; q < n; q++) rows += x.recv_count[size_t(q) * El + e];
    x.count[size_t(e)] = rows;
    const int padded = (rows + Shape::kRowAlign - 1) / Shape::kRowAlign * Shape::kRowAlign;
    x.first[size_t(e) + 1] = x.first[size_t(e)] + padded;
  }
  LOOM_CHECK(x.first[size_t(El)] <= s.padded_rows(), "%d rows for the local experts, room for %lld",
             x.first[size_t(El)], (long long)s.padded_rows());
}

template <class T>
PendingDispatch<T>::PendingDispatch(Communicator& ep, const T* send, const Shape& s, const Routing& r,
                                    const ExchangeLayout& x, T* staging, T* local)
    : ep_(ep), s_(s), x_(x), staging_(staging), local_(local) {
  const Plan p = plan(s, r, x);
  from_rows_ = p.from_rows, from_first_ = p.from_first;
  started_ = now_s();
  work_ = ep.all_to_all_rows_async(send, p.to_rows.data(), p.to_first.data(), staging, p.from_rows.data(),
                                   p.from_first.data(), size_t(s.C), dtype_of<T>());
}

template <class T>
void PendingDispatch<T>::poke() {
  if (done_at_ < 0 && work_->test()) done_at_ = now_s();
}

template <class T>
ExchangeTime PendingDispatch<T>::finish() {
  const double waiting = now_s();
  work_->wait();
  ExchangeTime t;
  t.exposed = now_s() - waiting;
  t.hidden = (done_at_ >= 0 ? done_at_ : waiting) - started_;
  Plan p;
  p.from_rows = from_rows_, p.from_first = from_first_;
  regroup(staging_, local_, s_, x_, p, true);
  return t;
}

template <class T>
double dispatch(Communicator& ep, const T* send, const Shape& s, const Routing& r, const ExchangeLayout& x, T* staging,
                T* local) {
  PendingDispatch<T> pending(ep, send, s, r, x, staging, local);
  return pending.finish().exposed;
}

template <class T>
double gather_back(Communicator& ep, const T* local, const Shape& s, const Routing& r, const ExchangeLayout& x,
                   T* staging, T* send) {
  const Plan p = plan(s, r, x);
  regroup(staging, const_cast<T*>(local), s, x, p, false);
  const auto start = std::chrono::steady_clock::now();
  ep.all_to_all_rows_async(staging, p.from_rows.data(), p.from_first.data(), send, p.to_rows.data(),
                           p.to_first.data(), size_t(s.C), dtype_of<T>())
      ->wait();
  return seconds_since(start);
}

template class PendingDispatch<float>;
template class PendingDispatch<bf16>;
template class PendingDispatch<f16>;

#define LOOM_EXCHANGE(T)                                                                                          \
  template double dispatch<T>(Communicator&, const T*, const Shape&, const Routing&, const ExchangeLayout&, T*, T*); \
  template double gather_back<T>(Communicator&, const T*, const Shape&, const Routing&, const ExchangeLayout&, T*, T*);
LOOM_EXCHANGE(float)
LOOM_EXCHANGE(bf16)
LOOM_EXCHANGE(f16)
#undef LOOM_EXCHANGE

}  // namespace loom::moe

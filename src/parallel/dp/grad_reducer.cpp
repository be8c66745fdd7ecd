#include "parallel/dp/grad_reducer.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/backend.h"

namespace loom {

namespace {
double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }
}  // namespace

GradReducer::GradReducer(Backend& ops, const BucketPlan& plan, Communicator& dp, ReleasableBuffer& grads, Mode mode,
                         bool release_reduced, DType wire)
    : ops_(ops), plan_(plan), dp_(dp), grads_(grads), mode_(mode), release_reduced_(release_reduced), wire_(wire) {
  LOOM_CHECK(wire == DType::f32 || wire == DType::bf16, "gradient reduction in %s", dtype_name(wire));
  LOOM_CHECK(grads.size() >= plan.padded_total(), "gradient buffer of %lld floats, plan needs %lld",
             (long long)grads.size(), (long long)plan.padded_total());
  LOOM_CHECK(mode == Mode::ReduceScatter ? plan.shards() == dp.size() : !release_reduced,
             "reduce-scatter needs one shard per rank; only it can release reduced buckets");
  if (mode == Mode::ReduceScatter) {
    shard_.reserve(size_t(plan.shard_total()) * sizeof(float));
    shard_.allocate(ops_.memory());
  }
  if (wire_ == DType::bf16 && dp.size() > 1) {
    const int64_t n = plan.padded_total() + (mode == Mode::ReduceScatter ? plan.shard_total() : 0);
    wire_buf_.reserve(size_t(n) * sizeof(bf16));
    wire_buf_.allocate(ops_.memory());
  }
  const auto& buckets = plan.buckets();
  const size_t n = buckets.size();
  for (size_t b = 0; b < n; b++) {
    if (tensor_buckets_.size() < size_t(buckets[b].end_tensor))
      tensor_buckets_.resize(size_t(buckets[b].end_tensor), {-1, -1});
    for (int t = buckets[b].first_tensor; t < buckets[b].end_tensor; t++) {
      if (tensor_buckets_[t].first < 0) tensor_buckets_[t].first = int(b);
      tensor_buckets_[t].second = int(b) + 1;
    }
  }
  pending_.resize(n);
  work_.resize(n);
  started_.resize(n);
  done_at_.resize(n);
  done_.resize(n);
}

void GradReducer::begin() {
  LOOM_CHECK(!active_, "GradReducer::begin() twice without finish()");
  active_ = true;
  const auto& buckets = plan_.buckets();
  for (size_t b = 0; b < buckets.size(); b++) {
    pending_[b] = buckets[b].end_tensor - buckets[b].first_tensor;
    done_[b] = false;
  }
  next_launch_ = first_unfinished_ = 0;
  released_until_ = 0;
  calls_s_ = 0;
  launch_ready();
}

void GradReducer::on_grad_ready(int tensor) {
  LOOM_CHECK(active_, "gradient of tensor %d reported outside a reducing backward", tensor);
  LOOM_CHECK(tensor >= 0 && size_t(tensor) < tensor_buckets_.size(), "tensor %d is not in the layout", tensor);
  auto [first, end] = tensor_buckets_[tensor];
  for (int b = first; b < end; b++) LOOM_CHECK(--pending_[b] >= 0, "tensor %d reported twice", tensor);
  const auto t0 = Clock::now();
  launch_ready();
  poll();
  calls_s_ += seconds(Clock::now() - t0);
}

void GradReducer::launch_ready() {
  const auto& buckets = plan_.buckets();
  while (next_launch_ < buckets.size() && pending_[next_launch_] == 0) {
    const size_t b = next_launch_++;
    const FlatRange r = buckets[b].range;
    float* full = grads_.data() + r.begin;
    started_[b] = Clock::now();
    if (wire_buf_.allocated()) {
      bf16* wire = wire_buf_.at<bf16>(0) + r.begin;
      ops_.narrow(wire, full, size_t(r.size()));
      if (mode_ == Mode::AllReduce) {
        work_[b] = dp_.all_reduce_sum_16bit_async(wire, size_t(r.size()), DType::bf16);
      } else {
        bf16* shard = wire_buf_.at<bf16>(0) + plan_.padded_total() + plan_.shard_offset(int(b));
        work_[b] = dp_.reduce_scatter_sum_16bit_async(wire, shard, size_t(plan_.shard_size(int(b))), DType::bf16);
      }
    } else if (mode_ == Mode::AllReduce) {
      if (dp_.size() > 1) work_[b] = dp_.all_reduce_async(full, size_t(r.size()), DType::f32, ReduceOp::Sum);
    } else {
      float* shard = shard_.at<float>(0) + plan_.shard_offset(int(b));
      work_[b] = dp_.reduce_scatter_async(full, shard, size_t(plan_.shard_size(int(b))), DType::f32, ReduceOp::Sum);
    }
  }
}

void GradReducer::poll() {
  for (size_t b = first_unfinished_; b < next_launch_; b++)
    if (!done_[b] && (!work_[b] || work_[b]->test())) complete(b);
  while (first_unfinished_ < next_launch_ && done_[first_unfinished_]) first_unfinished_++;
  if (release_reduced_) release_reduced_prefix();
}

void GradReducer::release_reduced_prefix() {
  const auto& buckets = plan_.buckets();
  const int64_t page = grads_.page_floats();
  int64_t end = grads_.size();
  if (first_unfinished_ < buckets.size()) end = buckets[first_unfinished_].range.begin / page * page;
  if (end > released_until_) {
    grads_.release({released_until_, end});
    released_until_ = end;
  }
}

void GradReducer::complete(size_t b) {
  done_at_[b] = Clock::now();
  done_[b] = true;
  work_[b].reset();
  if (wire_buf_.allocated()) {  // the reduced bf16 values, widened back into the fp32 buffers
    const FlatRange r = plan_.buckets()[b].range;
    if (mode_ == Mode::AllReduce)
      ops_.widen(grads_.data() + r.begin, wire_buf_.at<bf16>(0) + r.begin, size_t(r.size()));
    else
      ops_.widen(shard_.at<float>(0) + plan_.shard_offset(int(b)),
                 wire_buf_.at<bf16>(0) + plan_.padded_total() + plan_.shard_offset(int(b)),
                            size_t(plan_.shard_size(int(b))));
  }
}

void GradReducer::finish() {
  LOOM_CHECK(active_, "GradReducer::finish() without begin()");
  const auto backward_end = Clock::now();
  const auto& buckets = plan_.buckets();
  // A bucket never started means backward skipped a report: every rank
  // would wait on its own, so stop here instead.
  LOOM_CHECK(next_launch_ == buckets.size(),
             "backward ended with bucket %zu of %zu waiting for %d of its tensors (%d..%d)", next_launch_,
             buckets.size(), next_launch_ < buckets.size() ? pending_[next_launch_] : 0,
             next_launch_ < buckets.size() ? buckets[next_launch_].first_tensor : 0,
             next_launch_ < buckets.size() ? buckets[next_launch_].end_tensor - 1 : 0);
  for (size_t b = first_unfinished_; b < buckets.size(); b++) {
    if (!done_[b]) {
      if (work_[b]) work_[b]->wait();
      complete(b);
    }
    first_unfinished_ = b + 1;
    if (release_reduced_) release_reduced_prefix();
  }
  const auto all_done = Clock::now();
  // Merge the buckets' [start, completion] intervals (they start in order)
  // into the time some reduction was in flight, and its part before backward ended.
  double in_flight = 0, before_end = 0;
  auto open = started_[0], close = done_at_[0];
  auto add = [&] {
    in_flight += seconds(close - open);
    before_end += seconds(std::min(close, backward_end) - std::min(open, backward_end));
  };
  for (size_t b = 1; b < buckets.size(); b++) {
    if (started_[b] > close) add(), open = started_[b];
    close = std::max(close, done_at_[b]);
  }
  add();
  times_.in_flight_s += in_flight;
  times_.overlapped_s += std::max(0.0, before_end - calls_s_);
  times_.calls_s += calls_s_;
  times_.wait_s += seconds(all_done - backward_end);
  times_.steps++;
  active_ = false;
}

void GradReducer::gather(float* full) const {
  LOOM_CHECK(!active_, "gather() during a reduction");
  const size_t n = size_t(plan_.padded_total());
  if (mode_ == Mode::AllReduce) {
    std::memcpy(full, grads_.data(), n * sizeof(float));
    return;
  }
  for (size_t b = 0; b < plan_.buckets().size(); b++)
    dp_.all_gather(shard_.at<float>(0) + plan_.shard_offset(int(b)), full + plan_.buckets()[b].range.begin,
                   size_t(plan_.shard_size(int(b))), DType::f32);
}

}  // namespace loom

#include "parallel/zero/param_gather.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "kernels/backend.h"

namespace loom {
namespace {

constexpr int64_t kWindowAlign = (int64_t(2) << 20) / int64_t(sizeof(float));  // a huge page, in floats

// The flat range [lo, hi) the buckets overlapping tensors [first, end) cover.
std::pair<int64_t, int64_t> bucket_hull(const FlatLayout& layout, const BucketPlan& plan, int first, int end) {
  const int64_t lo = layout.tensors[size_t(first)].offset;
  const int64_t hi = layout.tensors[size_t(end - 1)].offset + layout.tensors[size_t(end - 1)].numel;
  int64_t blo = lo, bhi = hi;
  for (const auto& b : plan.buckets())
    if (b.range.begin < hi && b.range.end > lo) blo = std::min(blo, b.range.begin), bhi = std::max(bhi, b.range.end);
  return {blo, bhi};
}

int64_t rounded_window(int64_t floats) { return (floats + kWindowAlign - 1) / kWindowAlign * kWindowAlign; }

}  // namespace

ParamGather::ParamGather(Backend& ops, const FlatLayout& layout, const std::vector<std::pair<int, int>>& segments,
                         const BucketPlan& plan, Communicator& dp, const float* master, DType compute)
    : ops_(ops),
      plan_(plan),
      dp_(dp),
      master_(master),
      compute_(compute),
      segment_of_(layout.tensors.size(), -1),
      windows_(ops.memory().releasable([&] {
        int64_t total = 0;
        for (auto [first, end] : segments)
          if (first < end) {
            auto [lo, hi] = bucket_hull(layout, plan, first, end);
            total += rounded_window(hi - lo);
          }
        return std::max<int64_t>(total, 1);
      }())) {
  LOOM_CHECK(plan.shards() == dp.size(), "ZeRO-3 plan of %d shards for %d ranks", plan.shards(), dp.size());
  if (compute != DType::f32) copy_ = ops.memory().releasable(windows_->size());
  const auto& buckets = plan.buckets();
  int64_t window = 0;
  for (auto [first, end] : segments) {
    if (first >= end) continue;
    Segment s;
    const int64_t lo = layout.tensors[size_t(first)].offset;
    const int64_t hi = layout.tensors[size_t(end - 1)].offset + layout.tensors[size_t(end - 1)].numel;
    s.first_bucket = int(buckets.size()), s.end_bucket = 0;
    for (size_t b = 0; b < buckets.size(); b++)
      if (buckets[b].range.begin < hi && buckets[b].range.end > lo)
        s.first_bucket = std::min(s.first_bucket, int(b)), s.end_bucket = int(b) + 1;
    LOOM_CHECK(s.first_bucket < s.end_bucket, "segment of tensors [%d, %d) has no bucket", first, end);
    s.lo = buckets[size_t(s.first_bucket)].range.begin, s.hi = buckets[size_t(s.end_bucket - 1)].range.end;
    s.window = window;
    window += rounded_window(s.hi - s.lo);
    for (int t = first; t < end; t++) segment_of_[size_t(t)] = int(segs_.size());
    segs_.push_back(std::move(s));
  }
  params_at_.resize(layout.tensors.size(), nullptr);
  weights_at_.resize(layout.tensors.size(), nullptr);
  for (size_t t = 0; t < layout.tensors.size(); t++) {
    LOOM_CHECK(segment_of_[t] >= 0, "tensor %zu is in no ZeRO-3 segment", t);
    const Segment& s = segs_[size_t(segment_of_[t])];
    const int64_t at = s.window + (layout.tensors[t].offset - s.lo);
    params_at_[t] = windows_->data() + at;
    // The 16-bit copy fills the first half of the same window in its own buffer.
    if (copy_) weights_at_[t] = reinterpret_cast<uint16_t*>(copy_->data() + s.window) + (at - s.window);
  }
}

std::vector<int> ParamGather::segments_of(const std::vector<int>& tensors) const {
  std::vector<int> out;
  for (int t : tensors) out.push_back(segment_of_[size_t(t)]);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void ParamGather::start(Segment& s) {
  const auto& buckets = plan_.buckets();
  float* window = windows_->data() + s.window;
  for (int b = s.first_bucket; b < s.end_bucket; b++) {
    const int64_t n = plan_.shard_size(b);
    s.gathers.push_back(dp_.all_gather_async(master_ + plan_.shard_offset(b),
                                             window + (buckets[size_t(b)].range.begin - s.lo), size_t(n), DType::f32));
  }
  s.state = State::in_flight;
  gathered_ += size_t(s.hi - s.lo) * (copy_ ? 6 : 4);
  peak_bytes_ = std::max(peak_bytes_, gathered_);
}

void ParamGather::finish(Segment& s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (auto& g : s.gathers) g->wait();
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.gathers.clear();
  const float* values = windows_->data() + s.window;
  const size_t n = size_t(s.hi - s.lo);
  if (compute_ == DType::bf16) ops_.narrow(reinterpret_cast<bf16*>(copy_->data() + s.window), values, n);
  if (compute_ == DType::f16) ops_.narrow(reinterpret_cast<f16*>(copy_->data() + s.window), values, n);
  s.state = State::present;
}

void ParamGather::drop(Segment& s) {
  const int64_t end = s.window + rounded_window(s.hi - s.lo);
  windows_->release({s.window, std::min(end, windows_->size())});
  if (copy_) copy_->release({s.window, std::min(end, copy_->size())});
  s.state = State::absent;
  gathered_ -= size_t(s.hi - s.lo) * (copy_ ? 6 : 4);
}

void ParamGather::acquire(const std::vector<int>& tensors, const std::vector<int>& then) {
  const std::vector<int> now = segments_of(tensors);
  for (int i : now)
    if (segs_[size_t(i)].state == State::absent) start(segs_[size_t(i)]);
  for (int i : segments_of(then))
    if (segs_[size_t(i)].state == State::absent) start(segs_[size_t(i)]);
  for (int i : now) {
    Segment& s = segs_[size_t(i)];
    if (s.state == State::in_flight) finish(s);
    s.refs++;
  }
}

void ParamGather::release(const std::vector<int>& tensors) {
  for (int i : segments_of(tensors)) {
    Segment& s = segs_[size_t(i)];
    LOOM_CHECK(s.refs > 0, "ZeRO-3 segment %d released more often than acquired", i);
    if (--s.refs == 0) drop(s);
  }
}

void ParamGather::settle() {
  for (Segment& s : segs_)
    if (s.refs == 0 && s.state != State::absent) {
      if (s.state == State::in_flight) finish(s);
      drop(s);
    }
}

}  // namespace loom

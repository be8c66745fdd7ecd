#include "train/param_group.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/layout_pieces.h"
#include "core/check.h"
#include "kernels/backend.h"

namespace loom {

namespace {

// The members' tensors packed in order, each 64-byte aligned (as
// ParamLayout::add lays a chunk out); a table tied across stages is held
// twice by the model's ranks (first and last stage).
FlatLayout group_flat(const std::vector<ParamGroup::Member>& members, const std::vector<const ParamLayout*>& chunks) {
  FlatLayout flat;
  std::vector<FlatLayout> chunk_flats;
  for (const ParamLayout* lay : chunks) chunk_flats.push_back(lay->flat());
  for (const ParamGroup::Member& m : members) {
    FlatTensor t = chunk_flats[size_t(m.chunk)].tensors[size_t(m.tensor)];
    if (chunks[size_t(m.chunk)]->params[size_t(m.tensor)].tied_across_stages) t.copies *= 2;
    t.offset = flat.total;
    flat.total += (t.numel + 15) / 16 * 16;
    flat.tensors.push_back(t);
  }
  return flat;
}

// ZeRO-3's segments (member index ranges): a block's tensors of one chunk
// together, every other tensor alone.
std::vector<std::pair<int, int>> group_segments(const std::vector<ParamGroup::Member>& members,
                                                const std::vector<const ParamLayout*>& chunks) {
  std::vector<std::pair<int, int>> segments;
  for (size_t j = 0; j < members.size(); j++) {
    const ParamGroup::Member& m = members[j];
    const int block = chunks[size_t(m.chunk)]->params[size_t(m.tensor)].block;
    const bool joins = j > 0 && block >= 0 && members[j - 1].chunk == m.chunk &&
                       chunks[size_t(m.chunk)]->params[size_t(members[j - 1].tensor)].block == block;
    if (joins) segments.back().second = int(j) + 1;
    else segments.push_back({int(j), int(j) + 1});
  }
  return segments;
}

std::vector<int64_t> segment_starts(const FlatLayout& flat, const std::vector<std::pair<int, int>>& segments) {
  std::vector<int64_t> starts;
  for (auto [first, end] : segments) starts.push_back(flat.tensors[size_t(first)].offset);
  return starts;
}

void narrow_into(Backend& ops, void* to, ComputePrecision compute, const float* from, size_t n) {
  if (compute == ComputePrecision::bf16) ops.narrow(static_cast<bf16*>(to), from, n);
  if (compute == ComputePrecision::fp16) ops.narrow(static_cast<f16*>(to), from, n);
}

}  // namespace

ParamGroup::ParamGroup(Backend& ops, ParamGroupSpec spec, std::vector<Member> members,
                       const std::vector<const ParamLayout*>& chunks, Communicator& ranks, const Options& o)
    : ops_(ops),
      spec_(std::move(spec)),
      members_(std::move(members)),
      chunks_(chunks),
      ranks_(ranks),
      zero_(o.zero),
      compute_(o.compute),
      sharded_masters_(!spec_.frozen && (zero_ == 3 || (zero_ >= 1 && compute_ != ComputePrecision::fp32))),
      flat_(group_flat(members_, chunks_)),
      segments_(zero_ == 3 ? group_segments(members_, chunks_) : std::vector<std::pair<int, int>>{}),
      plan_(flat_, o.bucket_bytes, ranks.size(), segment_starts(flat_, segments_)) {
  LOOM_CHECK(!members_.empty(), "parameter group '%s' holds no tensor", spec_.name.c_str());
  const bool lowp = compute_ != ComputePrecision::fp32;
  const DType gathered = lowp ? compute_dtype(compute_) : DType::f32;
  if (!frozen()) grads_ = ops_.memory().releasable(plan_.padded_total());
  weights_only_ = spec_.compute_type_storage && frozen() && lowp && zero_ < 3;
  if (weights_only_) {
    int64_t total = 0;
    for (const FlatTensor& t : flat_.tensors) {
      fp32_at_.push_back(t.products_only ? -1 : total);
      if (!t.products_only) total += (t.numel + 15) / 16 * 16;
    }
    params_.reserve(size_t(std::max<int64_t>(total, 16)) * sizeof(float));
    params_.allocate(ops_.memory());
  } else if (!sharded_storage()) {
    params_.reserve(size_t(plan_.padded_total()) * sizeof(float));
    params_.allocate(ops_.memory());
  } else if (zero_ < 3) {
    read_params_ = ops_.memory().releasable(plan_.padded_total(), false);  // small pages: only what is read
  }
  if (lowp && zero_ < 3) {
    weights16_.reserve(size_t(plan_.padded_total()) * 2);
    weights16_.allocate(ops_.memory());
  }
  if (frozen()) {
    if (zero_ == 3) {
      frozen_owned_ = plan_.shard_ranges(ranks.rank());
      frozen_shard_.reserve(size_t(plan_.shard_total()) * sizeof(float));
      frozen_shard_.allocate(ops_.memory());
      gather_ = std::make_unique<ParamGather>(ops_, flat_, segments_, plan_, ranks, frozen_shard_.at<float>(0), gathered);
    }
    return;
  }
  // The model-parallel sum of the norm is the replica's (every group's together).
  optimizer_ = std::make_unique<ShardedOptimizer>(ops_, flat_, plan_, ranks, zero_ > 0, o.adamw, nullptr, sharded_masters_,
                                                  zero_ < 3);
  if (zero_ == 3) gather_ = std::make_unique<ParamGather>(ops_, flat_, segments_, plan_, ranks, optimizer_->master(), gathered);
  using Mode = GradReducer::Mode;
  reducer_ = std::make_unique<GradReducer>(ops_, plan_, ranks, *grads_, zero_ == 0 ? Mode::AllReduce : Mode::ReduceScatter,
                                           zero_ >= 2, o.grad_wire);
}

ParamGroup::~ParamGroup() = default;

float* ParamGroup::whole_values() const {
  if (weights_only_) return nullptr;
  if (params_.allocated()) return params_.at<float>(0);
  return read_params_ ? read_params_->data() : nullptr;
}

float* ParamGroup::shard_values() const {
  if (optimizer_) return optimizer_->master();
  return frozen_shard_.allocated() ? frozen_shard_.at<float>(0) : nullptr;
}

float* ParamGroup::param_at(int j) const {
  if (gather_) return gather_->tensor_params()[size_t(j)];
  if (weights_only_) return fp32_at_[size_t(j)] < 0 ? nullptr : params_.at<float>(0) + fp32_at_[size_t(j)];
  return whole_values() + flat_.tensors[size_t(j)].offset;
}

void ParamGroup::store(size_t j, int64_t at, const float* values, int64_t n) {
  narrow_into(ops_, weights16_.at<uint16_t>(0) + at, compute_, values, size_t(n));
  if (fp32_at_[j] >= 0)
    std::memcpy(params_.at<float>(0) + fp32_at_[j] + (at - flat_.tensors[j].offset), values, size_t(n) * sizeof(float));
}

void* ParamGroup::weight_at(int j) const {
  if (compute_ == ComputePrecision::fp32) return nullptr;
  if (gather_) return gather_->tensor_weights()[size_t(j)];
  return weights16_.at<uint16_t>(0) + flat_.tensors[size_t(j)].offset;
}

float* ParamGroup::grad_at(int j) const { return grads_ ? grads_->data() + flat_.tensors[size_t(j)].offset : nullptr; }

const std::vector<FlatRange>& ParamGroup::owned() const {
  return optimizer_ ? optimizer_->owned() : frozen_owned_;  // frozen: its ZeRO-3 shard, else nothing
}

template <class F>
void ParamGroup::for_held_parts(bool sharded, F&& f) const {
  const std::vector<FlatRange> whole{{0, plan_.padded_total()}};
  for (const FlatPiece& p : pieces_of(flat_, sharded ? owned() : whole)) {
    const Member& m = members_[size_t(p.tensor)];
    const ParamLayout& lay = *chunks_[size_t(m.chunk)];
    const int64_t begin = lay.params[size_t(m.tensor)].offset + (p.offset - flat_.tensors[size_t(p.tensor)].offset);
    f(size_t(p.tensor), lay, begin, begin + p.numel, p.packed);
  }
}

void ParamGroup::publish() {
  if (weights_only_) return;  // store() wrote both copies
  if (sharded_masters_ && zero_ < 3)
    optimizer_->publish(read_params_->data(), {weights16_.base(), compute_dtype(compute_)});
  else if (!sharded_storage() && weights16_.allocated())
    narrow_into(ops_, weights16_.base(), compute_, params_.at<float>(0), size_t(plan_.padded_total()));
}

void ParamGroup::init(uint64_t seed) {
  if (weights_only_) {
    std::vector<float> values;
    for_held_parts(false, [&](size_t j, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      values.assign(size_t(e - b), 0.f);
      lay.init_range(values.data(), b, e, seed);
      store(j, at, values.data(), e - b);
    });
    return;
  }
  if (!sharded_storage()) {
    float* values = params_.at<float>(0);
    std::memset(values, 0, size_t(plan_.padded_total()) * sizeof(float));
    for_held_parts(false, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      lay.init_range(values + at, b, e, seed);
    });
  } else {
    // Each rank fills its shard only (the same values: keyed by global index).
    float* shard = shard_values();
    std::memset(shard, 0, size_t(plan_.shard_total()) * sizeof(float));
    for_held_parts(true, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      lay.init_range(shard + at, b, e, seed);
    });
  }
  publish();
}

void ParamGroup::begin_step() {
  if (!grads_) return;
  // ZeRO 2 and 3 handed every bucket back after reducing it; what remains
  // (none after a whole step) is dropped the same way, without touching the pages.
  if (zero_ >= 2) grads_->release_all();
  else grads_->zero();
  reducer_->begin();
}

int64_t ParamGroup::held() const { return optimizer_ ? total_size(optimizer_->owned()) : 0; }

double ParamGroup::grad_sum_of_squares() { return optimizer_ ? optimizer_->grad_sum_of_squares(reduced()) : 0.0; }

void ParamGroup::update(float lr, float grad_scale) {
  if (!optimizer_) return;
  // The 16-bit compute weights are written by the update itself.
  WeightCopy copy;
  if (weights16_.allocated()) copy = {weights16_.base(), compute_dtype(compute_)};
  optimizer_->step(whole_values(), reduced(), lr, grad_scale, copy);
}

std::vector<float> ParamGroup::gather_grads() const {
  std::vector<float> full(size_t(plan_.padded_total()), 0.f);
  if (reducer_) reducer_->gather(full.data());
  return full;
}

std::vector<CheckpointPiece> ParamGroup::checkpoint_pieces(bool writes_params, bool writes_state) const {
  LOOM_CHECK(!weights_only_, "parameter group '%s' keeps its tensors in the compute type: it is not checkpointed",
             spec_.name.c_str());
  std::vector<CheckpointPiece> pieces;
  auto add = [&](std::vector<CheckpointPiece> p) { pieces.insert(pieces.end(), p.begin(), p.end()); };
  if (!sharded_storage() && writes_params)
    for_held_parts(false, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      add(layout_pieces(lay, whole_values() + at, "", b, e));
    });
  if (!writes_state) return pieces;
  // Sharded: each rank writes its shard of the parameters.
  if (sharded_storage())
    for_held_parts(true, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      add(layout_pieces(lay, shard_values() + at, "", b, e));
    });
  if (!optimizer_) return pieces;
  AdamW& adam = optimizer_->adamw();
  for_held_parts(true, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
    add(layout_pieces(lay, adam.first_moment() + at, "adam.m.", b, e));
    add(layout_pieces(lay, adam.second_moment() + at, "adam.v.", b, e));
  });
  return pieces;
}

void ParamGroup::fill_params(const GlobalTensors& tensors, bool absent_ok) {
  if (weights_only_) {
    std::vector<float> values;
    for_held_parts(false, [&](size_t j, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      values.assign(size_t(e - b), 0.f);
      if (!absent_ok || tensors.has(lay.params[size_t(members_[j].tensor)].name)) {
        fill_from_checkpoint(tensors, lay, values.data(), "", b, e, absent_ok);
        store(j, at, values.data(), e - b);
      }
    });
    return;
  }
  if (!sharded_storage())
    for_held_parts(false, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      fill_from_checkpoint(tensors, lay, whole_values() + at, "", b, e, absent_ok);
    });
  else
    for_held_parts(true, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      fill_from_checkpoint(tensors, lay, shard_values() + at, "", b, e, absent_ok);
    });
}

void ParamGroup::load_params(const GlobalTensors& tensors, bool absent_ok) {
  fill_params(tensors, absent_ok);
  publish();
}

void ParamGroup::load(const Checkpoint& checkpoint) {
  const ShardedTensors& tensors = checkpoint.tensors();
  fill_params(tensors);
  if (optimizer_) {
    AdamW& adam = optimizer_->adamw();
    for_held_parts(true, [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t at) {
      fill_from_checkpoint(tensors, lay, adam.first_moment() + at, "adam.m.", b, e);
      fill_from_checkpoint(tensors, lay, adam.second_moment() + at, "adam.v.", b, e);
    });
  }
  publish();
}

void ParamGroup::copy_whole_params(const std::vector<float*>& into) {
  if (weights_only_) {  // fp32 where kept, else widened from the compute type
    for (size_t j = 0; j < members_.size(); j++) {
      const FlatTensor& t = flat_.tensors[j];
      if (fp32_at_[j] >= 0) std::memcpy(into[j], params_.at<float>(0) + fp32_at_[j], size_t(t.numel) * sizeof(float));
      else if (compute_ == ComputePrecision::bf16) ops_.widen(into[j], weights16_.at<bf16>(0) + t.offset, size_t(t.numel));
      else ops_.widen(into[j], weights16_.at<f16>(0) + t.offset, size_t(t.numel));
    }
    return;
  }
  std::vector<float> gathered;
  const float* whole = whole_values();
  if (sharded_storage()) {
    gathered.assign(size_t(plan_.padded_total()), 0.f);
    const float* shard = shard_values();
    std::vector<std::unique_ptr<Work>> gathers;
    for (size_t b = 0; b < plan_.buckets().size(); b++)
      gathers.push_back(ranks_.all_gather_async(shard + plan_.shard_offset(int(b)),
                                                gathered.data() + plan_.buckets()[b].range.begin,
                                                size_t(plan_.shard_size(int(b))), DType::f32));
    for (auto& g : gathers) g->wait();
    whole = gathered.data();
  }
  for (size_t j = 0; j < members_.size(); j++) {
    const FlatTensor& t = flat_.tensors[j];
    std::memcpy(into[j], whole + t.offset, size_t(t.numel) * sizeof(float));
  }
}

size_t ParamGroup::param_bytes() const {
  if (!sharded_storage()) return params_.size();
  const size_t shard = optimizer_ ? optimizer_->master_bytes() : frozen_shard_.size();
  return shard + (read_params_ ? read_params_->resident_bytes() : 0);
}

size_t ParamGroup::grad_bytes_resident() const {
  return grads_ ? grads_->resident_bytes() + reducer_->shard_bytes() : 0;
}

}  // namespace loom

#include "train/replica.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "checkpoint/layout_pieces.h"
#include "comm/rank_sum.h"
#include "core/check.h"
#include "precision/found_inf.h"
#include "precision/non_finite.h"

namespace loom {

// The executor's view of this stage: chunk c's stage module, one micro-batch at a time.
class Replica::Stage : public pp::StageModel {
 public:
  Stage(Replica& r, const std::vector<int32_t>* tokens, const std::vector<int32_t>* targets, int T)
      : r_(r), tokens_(tokens), targets_(targets), T_(T) {}
  void set_batch(const std::vector<int32_t>* tokens, const std::vector<int32_t>* targets, int T) {
    tokens_ = tokens, targets_ = targets, T_ = T, loss_sum_ = 0;
  }
  double loss_sum() const { return loss_sum_; }

  void forward(int mb, int c, int slot) override {
    obs::ScopedSpan span(r_.trace_, "forward", obs::SpanKind::forward, obs::CommGroup::none, mb);
    r_.chunks_[size_t(c)]->forward_stage(slot, tok(mb), B(), T_);
  }
  void backward(int mb, int c, int slot) override {
    obs::ScopedSpan span(r_.trace_, "backward", obs::SpanKind::backward, obs::CommGroup::none, mb);
    ReportReady report(*this, mb, c);
    loss_sum_ += chunk(c).backward_stage(slot, tok(mb), tgt(mb), B(), T_, loss_scale());
  }
  void backward_input(int mb, int c, int slot) override {
    obs::ScopedSpan span(r_.trace_, "backward input", obs::SpanKind::backward, obs::CommGroup::none, mb);
    ReportReady report(*this, mb, c);
    loss_sum_ += chunk(c).backward_input(slot, tok(mb), tgt(mb), B(), T_, loss_scale());
  }
  void backward_weight(int mb, int c, int slot) override {
    obs::ScopedSpan span(r_.trace_, "backward weight", obs::SpanKind::backward_weight, obs::CommGroup::none, mb);
    ReportReady report(*this, mb, c);
    chunk(c).backward_weight(slot, B(), T_);
  }
  float* activation_in(int c, int slot) override { return r_.chunks_[size_t(c)]->stage_input(slot); }
  const float* activation_out(int c, int slot) override { return r_.chunks_[size_t(c)]->stage_output(slot); }
  float* grad(int c, int slot) override { return r_.chunks_[size_t(c)]->stage_grad(slot); }
  void waiting(bool begins) override {
    if (!r_.trace_) return;
    if (begins) r_.trace_->begin("wait for neighbour stage", obs::SpanKind::bubble, obs::CommGroup::pp);
    else r_.trace_->end();
  }
  size_t activation_floats() const override {
    return size_t(r_.chunks_[0]->local_rows(int64_t(B()) * T_)) * size_t(r_.chunks_[0]->config().d_model);
  }

 private:
  // Only each chunk's last micro-batch reports gradients to the reducer
  // (each tensor when its last write of the step is done: in B or in W).
  class ReportReady {
   public:
    ReportReady(Stage& s, int mb, int c) : chunk_(s.chunk(c)) {
      if (mb + 1 != s.r_.micro_batches_) return;
      Replica& r = s.r_;
      const int first_tensor = r.chunk_tensor_[size_t(c)];
      const ParamLayout& lay = chunk_.layout();
      chunk_.set_grad_ready_hook([&r, first_tensor, &lay](int i) {
        // A tensor tied across stages is reported after its copies are summed.
        if (!lay.params[size_t(i)].tied_across_stages) r.reducer_->on_grad_ready(first_tensor + i);
      });
    }
    ~ReportReady() { chunk_.set_grad_ready_hook(nullptr); }

   private:
    StageModule& chunk_;
  };
  StageModule& chunk(int c) const { return *r_.chunks_[size_t(c)]; }
  float loss_scale() const { return r_.target_weight_; }
  int B() const { return r_.micro_batch_; }
  const int32_t* tok(int mb) const { return tokens_->data() + size_t(mb) * B() * T_; }
  const int32_t* tgt(int mb) const { return targets_->data() + size_t(mb) * B() * T_; }
  Replica& r_;
  const std::vector<int32_t>* tokens_;
  const std::vector<int32_t>* targets_;
  int T_;
  double loss_sum_ = 0;
};

std::vector<ModelShard> stage_shards(const RunConfig& cfg, const ParallelContext& ctx, const PipelinePlan& plan) {
  return chunk_shards(cfg, plan, ctx.coord().pp, ctx.coord().tp, ctx.grid().tp());
}

std::vector<int64_t> chunk_offsets(const ModelConfig& model, const std::vector<ModelShard>& shards) {
  std::vector<int64_t> offsets(shards.size());
  int64_t at = 0;
  for (int c = int(shards.size()) - 1; c >= 0; c--) {
    offsets[size_t(c)] = at;
    at += ParamLayout::for_model(model, shards[size_t(c)]).total;
  }
  return offsets;
}

std::vector<std::pair<int, int>> zero3_segments(const ModelConfig& model, const std::vector<ModelShard>& shards) {
  std::vector<std::pair<int, int>> segments;
  int base = 0;
  for (int c = int(shards.size()) - 1; c >= 0; c--) {
    const ParamLayout lay = ParamLayout::for_model(model, shards[size_t(c)]);
    for (size_t i = 0; i < lay.params.size(); i++) {
      const int block = lay.params[i].block, t = base + int(i);
      if (block >= 0 && i > 0 && lay.params[i - 1].block == block) segments.back().second = t + 1;
      else segments.push_back({t, t + 1});
    }
    base += int(lay.params.size());
  }
  return segments;
}

// ZeRO-3: one chunk's view of the stage's ParamGather (its tensors are the
// stage's from `first` on).
class Replica::ChunkParams : public ParamSource {
 public:
  ChunkParams(ParamGather& gather, int first, int count)
      : gather_(gather),
        first_(first),
        params_(gather.tensor_params().begin() + first, gather.tensor_params().begin() + first + count),
        weights_(gather.tensor_weights().begin() + first, gather.tensor_weights().begin() + first + count) {}
  void acquire(const std::vector<int>& tensors, const std::vector<int>& then) override {
    gather_.acquire(global(tensors, now_), global(then, then_));
  }
  void release(const std::vector<int>& tensors) override { gather_.release(global(tensors, now_)); }
  const std::vector<float*>& tensor_params() const override { return params_; }
  const std::vector<void*>& tensor_weights() const override { return weights_; }

 private:
  const std::vector<int>& global(const std::vector<int>& local, std::vector<int>& out) const {
    out.clear();
    for (int t : local) out.push_back(first_ + t);
    return out;
  }
  ParamGather& gather_;
  int first_;
  std::vector<float*> params_;
  std::vector<void*> weights_;
  std::vector<int> now_, then_;  // reused: a step allocates nothing here once warm
};

namespace {

// Calls f(chunk, layout, begin, end, packed) for each owned range's part in
// each chunk: [begin, end) in the chunk's own offsets, packed = where that
// part starts in the packed moments (and masters).
template <class F>
void for_owned_parts(const std::vector<FlatRange>& owned, const std::vector<std::unique_ptr<StageModule>>& chunks,
                     const std::vector<int64_t>& chunk_offset, F&& f) {
  int64_t packed = 0;
  for (const FlatRange& r : owned) {
    for (size_t c = 0; c < chunks.size(); c++) {
      const int64_t lo = chunk_offset[c], hi = lo + chunks[c]->layout().total;
      const int64_t b = std::max(r.begin, lo), e = std::min(r.end, hi);
      if (b < e) f(c, chunks[c]->layout(), b - lo, e - lo, packed + (b - r.begin));
    }
    packed += r.size();
  }
}

std::vector<int64_t> segment_starts(const FlatLayout& flat, const std::vector<std::pair<int, int>>& segments) {
  std::vector<int64_t> starts;
  for (auto [first, end] : segments) starts.push_back(flat.tensors[size_t(first)].offset);
  return starts;
}

// The stage's flat layout: its chunks' tensors, chunk v-1 first (its
// backward finishes first).
FlatLayout stage_flat(const ModelConfig& model, const std::vector<ModelShard>& shards) {
  FlatLayout flat;
  for (int c = int(shards.size()) - 1; c >= 0; c--) {
    const ParamLayout lay = ParamLayout::for_model(model, shards[size_t(c)]);
    const size_t first = flat.tensors.size();
    for (FlatTensor t : lay.flat().tensors) {
      t.offset += flat.total;
      flat.tensors.push_back(t);
    }
    // Pipeline: the first and last stage each hold a copy of a tied table.
    for (int i : lay.tied_across_stages()) flat.tensors[first + size_t(i)].copies *= 2;
    flat.total += lay.total;
  }
  return flat;
}

}  // namespace

Replica::Replica(const RunConfig& cfg, const ParallelContext& ctx, int micro_batch, int micro_batches)
    : ctx_(ctx),
      zero_(cfg.parallel.zero),
      micro_batch_(micro_batch),
      micro_batches_(micro_batches),
      sharded_masters_(zero_ == 3 || (zero_ >= 1 && cfg.precision.compute_precision() != ComputePrecision::fp32)),
      split_{ctx.grid().cp(), ctx.coord().cp},
      compute_(cfg.precision.compute_precision()),
      scaler_(cfg.precision.scaler_options()),
      pipeline_(plan_pipeline(cfg, ctx.grid().pp(), micro_batches)),
      schedule_(pipeline_.actions[size_t(ctx.coord().pp)]),
      shards_(stage_shards(cfg, ctx, pipeline_)),
      chunk_offset_(shards_.size()),
      chunk_tensor_(shards_.size()),
      flat_(stage_flat(cfg.model, shards_)),
      segments_(zero_ == 3 ? zero3_segments(cfg.model, shards_) : std::vector<std::pair<int, int>>{}),
      plan_(flat_, double(cfg.parallel.bucket_mb) * (1 << 20), ctx.dp().size(), segment_starts(flat_, segments_)),
      grads_(plan_.padded_total()) {
  LOOM_CHECK(ctx.pp().rank() == ctx.coord().pp, "pipeline group rank %d is not the stage %d", ctx.pp().rank(),
             ctx.coord().pp);
  chunk_offset_ = chunk_offsets(cfg.model, shards_);
  for (int c = int(shards_.size()) - 1, tensor = 0; c >= 0; c--) {
    chunk_tensor_[size_t(c)] = tensor;
    tensor += int(ParamLayout::for_model(cfg.model, shards_[size_t(c)]).params.size());
  }
  const bool lowp = compute_ != ComputePrecision::fp32;
  if (!sharded_masters_) {
    params_.reserve(size_t(plan_.padded_total()) * sizeof(float));
    params_.allocate();
  } else if (zero_ < 3) {
    read_params_ = std::make_unique<PagedBuffer>(plan_.padded_total(), false);  // small pages: only what is read
  }
  if (lowp && zero_ < 3) {
    weights16_.reserve(size_t(plan_.padded_total()) * 2);
    weights16_.allocate();
  }
  optimizer_ = std::make_unique<ShardedOptimizer>(
      flat_, plan_, ctx.dp(), zero_ > 0,
      AdamWConfig{cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay},
      &ctx.group(GroupKind::model), sharded_masters_, zero_ < 3);
  if (zero_ == 3)
    gather_ = std::make_unique<ParamGather>(flat_, segments_, plan_, ctx.dp(), optimizer_->master(),
                                            lowp ? compute_dtype(compute_) : DType::f32);
  // Several chunks per stage share their activation sets and work space.
  std::vector<int> slots = pipeline_.slots[size_t(ctx.coord().pp)];
  if (pipeline_.shares_slots()) {
    shared_acts_ = std::make_unique<SharedActivations>();
    slots.assign(slots.size(), pipeline_.shared_slots[size_t(ctx.coord().pp)]);
  }
  for (size_t c = 0; c < shards_.size(); c++) {
    StageBuffers buffers{params_base() ? params_base() + chunk_offset_[c] : nullptr, grads_.data() + chunk_offset_[c],
                         0, slots[c], compute_,
                         weights16_.allocated() ? weights16_.at<uint16_t>(0) + chunk_offset_[c] : nullptr,
                         cfg.train.recompute_mode()};
    buffers.shared_activations = shared_acts_.get();
    buffers.split = split_, buffers.cp_group = &ctx.cp();
    if (gather_) {
      const int count = int(ParamLayout::for_model(cfg.model, shards_[c]).params.size());
      chunk_sources_.push_back(std::make_unique<ChunkParams>(*gather_, chunk_tensor_[c], count));
      buffers.source = chunk_sources_.back().get();
    }
    chunks_.push_back(make_stage_module(cfg.model, shards_[c],
                                        TensorParallel(&ctx.tp(), shards_[c].sequence_parallel), micro_batch,
                                        split_.local_len(cfg.model.seq_len), buffers));
  }
  using Mode = GradReducer::Mode;
  reducer_ = std::make_unique<GradReducer>(plan_, ctx.dp(), grads_, zero_ == 0 ? Mode::AllReduce : Mode::ReduceScatter,
                                           zero_ >= 2, cfg.precision.grad_reduce == "bf16" ? DType::bf16 : DType::f32);
  if (shared_acts_) shared_acts_->allocate();
  executor_ = std::make_unique<pp::PipelineExecutor>(ctx.pp(), slots, pipeline_.map(), shared_acts_ != nullptr);
  stage_ = std::make_unique<Stage>(*this, nullptr, nullptr, split_.local_len(cfg.model.seq_len));
}

Replica::~Replica() = default;

float* Replica::params_base() const {
  if (params_.allocated()) return params_.at<float>(0);
  return read_params_ ? read_params_->data() : nullptr;
}

void Replica::init_parameters(uint64_t seed) {
  if (!sharded_masters_) {
    std::memset(params_.at<float>(0), 0, size_t(plan_.padded_total()) * sizeof(float));
    for (auto& chunk : chunks_) chunk->init_parameters(seed);
    return;
  }
  // Each rank fills its master shard only (the same values: keyed by global index).
  float* master = optimizer_->master();
  std::memset(master, 0, size_t(plan_.shard_total()) * sizeof(float));
  for_owned_parts(optimizer_->owned(), chunks_, chunk_offset_,
                  [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t packed) {
                    lay.init_range(master + packed, b, e, seed);
                  });
  if (zero_ < 3) optimizer_->publish(read_params_->data(), {weights16_.base(), compute_dtype(compute_)});
}

float Replica::forward_backward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int T) {
  // ZeRO 2 and 3 handed every bucket back after reducing it; what remains (none
  // after a whole step) is dropped the same way, without touching the pages.
  if (zero_ >= 2) grads_.release_all();
  else grads_.zero();
  auto& stage = static_cast<Stage&>(*stage_);
  if (split_.active()) {  // this rank's two chunks of every sequence
    local_tokens_.resize(tokens.size() / size_t(split_.cp)), local_targets_.resize(local_tokens_.size());
    split_.take(local_tokens_.data(), tokens.data(), int(tokens.size() / size_t(T)), T);
    split_.take(local_targets_.data(), targets.data(), int(targets.size() / size_t(T)), T);
    stage.set_batch(&local_tokens_, &local_targets_, split_.local_len(T));
  } else {
    stage.set_batch(&tokens, &targets, T);
  }
  // The whole batch's valid targets: this rank's rows (its chunks under cp;
  // tp and pp ranks hold the same rows), summed over the data group.
  const std::vector<int32_t>& mine = split_.active() ? local_targets_ : targets;
  step_targets_ = int64_t(sum_over_ranks(ctx_.dp(), double(count_valid_targets(mine.data(), int64_t(mine.size())))));
  target_weight_ = step_targets_ > 0 ? scaler_.scale() / float(step_targets_) : 0.f;
  reducer_->begin();
  executor_->run(schedule_, stage);
  if (gather_) gather_->settle();
  sync_tied_embedding();
  // The loss lives on the last stage; every stage reports it.
  float loss = step_targets_ > 0 ? float(stage.loss_sum() / double(step_targets_)) : 0.f;
  if (ctx_.grid().pp() > 1) ctx_.pp().all_reduce(&loss, 1, DType::f32, ReduceOp::Sum);
  return loss;
}

// A tied embedding (GPT-2's token table): the first virtual stage's
// embedding and the last one's head hold copies, whose gradients are summed
// (then reduced over dp like the rest). The family's layout says which
// tensors are tied. The copies sit on the first and the last stage, or
// (ZB-V's V) both on the first: then they are summed here.
void Replica::sync_tied_embedding() {
  std::vector<std::pair<size_t, int>> tied;  // (chunk, tensor)
  for (size_t c = 0; c < chunks_.size(); c++)
    for (int i : chunks_[c]->layout().tied_across_stages()) tied.push_back({c, i});
  const bool both_here = tied.size() == 2 && tied[0].first != tied[1].first;
  if (both_here) {
    auto [ca, ia] = tied[0];
    auto [cb, ib] = tied[1];
    float *a = chunks_[ca]->grad(ia), *b = chunks_[cb]->grad(ib);
    const int64_t n = chunks_[ca]->layout().params[size_t(ia)].numel;
    LOOM_CHECK(n == chunks_[cb]->layout().params[size_t(ib)].numel, "tied copies of different sizes");
    for (int64_t k = 0; k < n; k++) a[k] = b[k] = a[k] + b[k];  // what a two-rank sum gives
  }
  for (auto [c, i] : tied) {
    StageModule& chunk = *chunks_[c];
    if (!both_here)
      ctx_.group(GroupKind::embedding)
          .all_reduce(chunk.grad(i), size_t(chunk.layout().params[size_t(i)].numel), DType::f32, ReduceOp::Sum);
    reducer_->on_grad_ready(chunk_tensor_[c] + i);
  }
}

Replica::LossSum Replica::evaluate(const int32_t* tokens, const int32_t* targets, int T) {
  if (split_.active()) {
    local_tokens_.resize(size_t(micro_batch_) * split_.local_len(T)), local_targets_.resize(local_tokens_.size());
    split_.take(local_tokens_.data(), tokens, micro_batch_, T);
    split_.take(local_targets_.data(), targets, micro_batch_, T);
    tokens = local_tokens_.data(), targets = local_targets_.data(), T = split_.local_len(T);
  }
  // One micro-batch through the chunks in virtual-stage order, blocking.
  const int pp = ctx_.grid().pp(), stage = ctx_.coord().pp;
  const size_t n = size_t(chunks_[0]->local_rows(int64_t(micro_batch_) * T)) * size_t(chunks_[0]->config().d_model);
  const pp::ChunkMap map = pipeline_.map();
  double loss = 0;
  // A stage's chunks are in increasing virtual-stage order either way.
  for (int c = 0; c < pipeline_.v; c++) {
    StageModule& chunk = *chunks_[size_t(c)];
    const int vs = map.virtual_stage(stage, c);
    if (!chunk.layout().shard.embedding) {
      const int from = map.stage_of(vs - 1);
      if (from == stage)  // the V's turn: this stage's other chunk
        std::memcpy(chunk.stage_input(0), chunks_[size_t(map.chunk_of(vs - 1))]->stage_output(0), n * sizeof(float));
      else
        ctx_.pp().recv(chunk.stage_input(0), n, DType::f32, from, 1);
    }
    chunk.forward_stage(0, tokens, micro_batch_, T);
    if (chunk.layout().shard.head) loss = chunk.stage_loss(0, targets, micro_batch_, T);
    else if (const int to = map.stage_of(vs + 1); to != stage)
      ctx_.pp().send(chunk.stage_output(0), n, DType::f32, to, 1);
  }
  if (gather_) gather_->settle();
  if (pp > 1) loss = sum_over_ranks(ctx_.pp(), loss);
  return {loss, count_valid_targets(targets, int64_t(micro_batch_) * T)};
}

double Replica::reduce() {
  reducer_->finish();
  reduce_sequence_partial_grads();
  overflowed_ = false;
  if (compute_ != ComputePrecision::fp32 || scaler_.mode() != LossScaleMode::off) {
    // What this rank holds after the reduction: the whole buffer, or its
    // ZeRO shard (packed in the order of owned()).
    int64_t held = 0;
    for (const FlatRange& r : optimizer_->owned()) held += r.size();
    float* reduced = reducer_->reduced();
    if (inject_inf_ && held > 0) reduced[0] = INFINITY, inject_inf_ = false;
    const bool local = unscale_and_check(reduced, size_t(held), scaler_.inv_scale());
    overflowed_ = any_rank_found_inf(ctx_.world(), local);
    decision_ = scaler_.update(overflowed_);
  }
  if (overflowed_) return NAN;
  return optimizer_->grad_norm(reducer_->reduced());
}

void Replica::update(float lr, float grad_scale) {
  // The 16-bit compute weights are written by the update itself.
  WeightCopy copy;
  if (weights16_.allocated()) copy = {weights16_.base(), compute_dtype(compute_)};
  optimizer_->step(params_base(), reducer_->reduced(), lr, grad_scale, copy);
}

// With sequence parallelism each tp rank's norm (and position-table)
// gradients cover its own rows only. The sum over tp commutes with the sum
// over dp, so it runs once per step on what this rank holds after the dp
// reduction (all of it, or its ZeRO shard: the same ranges on every tp rank,
// whose layouts have equal sizes).
void Replica::reduce_sequence_partial_grads() {
  std::vector<int> partial;
  for (size_t c = 0; c < chunks_.size(); c++)
    if (shards_[c].sequence_parallel)
      for (int i : chunks_[c]->layout().sequence_partial()) partial.push_back(chunk_tensor_[c] + i);
  if (partial.empty()) return;
  std::sort(partial.begin(), partial.end());
  std::vector<FlatRange> owned = zero_ > 0 ? plan_.shard_ranges(ctx_.dp().rank())
                                           : std::vector<FlatRange>{{0, plan_.padded_total()}};
  std::vector<FlatPiece> pieces;
  for (const FlatPiece& p : pieces_of(flat_, owned))
    if (std::binary_search(partial.begin(), partial.end(), p.tensor)) pieces.push_back(p);
  std::vector<float> packed;
  float* reduced = reducer_->reduced();
  for (const FlatPiece& p : pieces) packed.insert(packed.end(), reduced + p.packed, reduced + p.packed + p.numel);
  ctx_.tp().all_reduce(packed.data(), packed.size(), DType::f32, ReduceOp::Sum);
  size_t at = 0;
  for (const FlatPiece& p : pieces) {
    std::copy(packed.begin() + at, packed.begin() + at + p.numel, reduced + p.packed);
    at += size_t(p.numel);
  }
}

std::vector<float> Replica::gather_grads() const {
  std::vector<float> full(size_t(plan_.padded_total()));
  reducer_->gather(full.data());
  full.resize(size_t(flat_.total));
  return full;
}

std::vector<Replica::ChunkPlace> Replica::chunk_places() const {
  std::vector<ChunkPlace> out;
  for (size_t c = 0; c < chunks_.size(); c++) out.push_back({&chunks_[c]->layout(), chunk_offset_[c]});
  return out;
}

size_t Replica::activation_bytes() const {
  size_t sum = 0;
  for (const auto& c : chunks_) sum += c->activation_bytes();
  if (shared_acts_) sum += shared_acts_->bytes();
  return sum;
}

size_t Replica::compute_weight_bytes() const { return weights16_.size(); }

size_t Replica::param_bytes() const {
  if (!sharded_masters_) return params_.size();
  return optimizer_->master_bytes() + (read_params_ ? read_params_->resident_bytes() : 0) +
         (gather_ ? gather_->peak_bytes() : 0);
}

// The data group's first rank (dp x cp: cp ranks hold the same replica).
bool Replica::writes_checkpoint() const { return ctx_.dp().rank() == 0 || zero_ > 0; }

const float* Replica::whole_model_params() const {
  if (ctx_.grid().tp() != 1 || ctx_.grid().pp() != 1 || chunks_.size() != 1) return nullptr;
  if (sharded_masters_) return whole_.empty() ? nullptr : whole_.data();
  return chunks_[0]->params();
}

void Replica::gather_whole_params() {
  // ZeRO-3 exists for models no rank holds whole: it is not gathered for a sample.
  if (!sharded_masters_ || zero_ == 3 || ctx_.grid().tp() != 1 || ctx_.grid().pp() != 1) return;
  whole_.assign(size_t(plan_.padded_total()), 0.f);
  optimizer_->gather_masters(whole_.data());
}

std::vector<CheckpointPiece> Replica::checkpoint_pieces() {
  std::vector<CheckpointPiece> pieces;
  if (ctx_.dp().rank() == 0 && !sharded_masters_)
    for (size_t c = 0; c < chunks_.size(); c++) {
      auto p = layout_pieces(chunks_[c]->layout(), chunks_[c]->params());
      pieces.insert(pieces.end(), p.begin(), p.end());
    }
  if (!writes_checkpoint()) return pieces;
  AdamW& adam = optimizer_->adamw();
  for_owned_parts(optimizer_->owned(), chunks_, chunk_offset_,
                  [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t packed) {
                    // With sharded masters each rank writes its shard of the parameters too.
                    if (sharded_masters_) {
                      auto p = layout_pieces(lay, optimizer_->master() + packed, "", b, e);
                      pieces.insert(pieces.end(), p.begin(), p.end());
                    }
                    for (auto [prefix, moment] : {std::pair{"adam.m.", adam.first_moment()},
                                                  std::pair{"adam.v.", adam.second_moment()}}) {
                      auto p = layout_pieces(lay, moment + packed, prefix, b, e);
                      pieces.insert(pieces.end(), p.begin(), p.end());
                    }
                  });
  return without_repeats(std::move(pieces));
}

// A tied table's two copies on one rank (ZB-V's V puts the embedding and
// the head on the first stage) hold the same values: each place once.
std::vector<CheckpointPiece> Replica::without_repeats(std::vector<CheckpointPiece> pieces) {
  std::set<std::string> seen;
  std::vector<CheckpointPiece> out;
  for (CheckpointPiece& p : pieces)
    if (seen.insert(piece_key(place_of(p, "checkpoint"))).second) out.push_back(std::move(p));
  return out;
}

void Replica::load(const Checkpoint& checkpoint, int adam_steps) {
  if (!sharded_masters_)
    for (auto& chunk : chunks_) {
      fill_from_checkpoint(checkpoint.tensors(), chunk->layout(), chunk->params());
      chunk->refresh_compute_weights();
    }
  AdamW& adam = optimizer_->adamw();
  for_owned_parts(optimizer_->owned(), chunks_, chunk_offset_,
                  [&](size_t, const ParamLayout& lay, int64_t b, int64_t e, int64_t packed) {
                    if (sharded_masters_)
                      fill_from_checkpoint(checkpoint.tensors(), lay, optimizer_->master() + packed, "", b, e);
                    fill_from_checkpoint(checkpoint.tensors(), lay, adam.first_moment() + packed, "adam.m.", b, e);
                    fill_from_checkpoint(checkpoint.tensors(), lay, adam.second_moment() + packed, "adam.v.", b, e);
                  });
  adam.set_steps_taken(adam_steps);
  if (sharded_masters_ && zero_ < 3) optimizer_->publish(read_params_->data(), {weights16_.base(), compute_dtype(compute_)});
}

double Replica::tp_comm_seconds() const {
  double sum = 0;
  for (const auto& c : chunks_) sum += c->tp_comm_seconds();
  return sum;
}

}  // namespace loom

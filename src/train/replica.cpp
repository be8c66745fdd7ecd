#include "train/replica.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <numeric>
#include <set>
#include <thread>

#include "checkpoint/layout_pieces.h"
#include "comm/rank_sum.h"
#include "core/check.h"
#include "model/moe/router_state.h"
#include "precision/found_inf.h"
#include "train/grad_sync.h"

namespace loom {

std::vector<ModelShard> stage_shards(const RunConfig& cfg, const ParallelContext& ctx, const PipelinePlan& plan) {
  return chunk_shards(cfg, plan, ctx.coord().pp, ctx.coord().tp, ctx.grid().tp(), ctx.grid().ep_rank(ctx.rank()),
                      ctx.grid().ep());
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

Replica::Replica(std::unique_ptr<Backend> own, Backend* ops, const RunConfig& cfg, const ParallelContext& ctx,
                 int micro_batch, int micro_batches)
    : own_ops_(std::move(own)),
      ops_(ops ? *ops : *own_ops_),
      ctx_(ctx),
      zero_(cfg.parallel.zero),
      base_outside_checkpoints_(cfg.model.lora.enabled()),
      micro_batch_(micro_batch),
      micro_batches_(micro_batches),
      sharded_masters_(zero_ == 3 || (zero_ >= 1 && cfg.precision.compute_precision() != ComputePrecision::fp32)),
      split_{ctx.grid().cp(), ctx.coord().cp},
      compute_(cfg.precision.compute_precision()),
      scaler_(cfg.precision.scaler_options()),
      pipeline_(plan_pipeline(cfg, ctx.grid().pp(), micro_batches)),
      schedule_(pipeline_.actions[size_t(ctx.coord().pp)]),
      shards_(stage_shards(cfg, ctx, pipeline_)),
      chunk_offset_(chunk_offsets(cfg.model, shards_)) {
  LOOM_CHECK(ctx.pp().rank() == ctx.coord().pp, "pipeline group rank %d is not the stage %d", ctx.pp().rank(),
             ctx.coord().pp);
  // The groups: each chunk's tensors to the group holding them, members in
  // stage order (chunk v-1 first: its backward finishes first).
  for (const ModelShard& shard : shards_) layouts_.push_back(ParamLayout::for_model(cfg.model, shard));
  std::vector<const ParamLayout*> layout_of;
  for (const ParamLayout& lay : layouts_) layout_of.push_back(&lay);
  const std::vector<ParamGroupSpec> specs = param_groups(cfg.model, cfg.train.freeze, ctx.grid().ep());
  std::vector<std::vector<ParamGroup::Member>> members(specs.size());
  places_.resize(shards_.size());
  for (int c = int(shards_.size()) - 1; c >= 0; c--) {
    const std::vector<int> of = group_of_tensors(specs, layouts_[size_t(c)]);
    for (size_t i = 0; i < of.size(); i++) {
      places_[size_t(c)].push_back(GroupPlace{of[i], int(members[size_t(of[i])].size())});
      members[size_t(of[i])].push_back({c, int(i)});
    }
  }
  ParamGroup::Options options;
  options.zero = zero_, options.compute = compute_;
  options.bucket_bytes = double(cfg.parallel.bucket_mb) * (1 << 20);
  options.grad_wire = cfg.precision.grad_reduce == "bf16" ? DType::bf16 : DType::f32;
  options.adamw = AdamWConfig{cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay};
  // A group no tensor of this stage falls in is left out (the same on every
  // rank of its communicator: they hold the same stage).
  std::vector<int> renumber(specs.size(), -1);
  for (size_t g = 0; g < specs.size(); g++) {
    if (members[g].empty()) continue;
    renumber[g] = int(groups_.size());
    groups_.push_back(std::make_unique<ParamGroup>(ops_, specs[g], std::move(members[g]), layout_of,
                                                   ctx.group(specs[g].ranks), options));
  }
  for (auto& chunk_places : places_)
    for (GroupPlace& p : chunk_places) p.group = renumber[size_t(p.group)];
  // Several chunks per stage share their activation sets and work space.
  std::vector<int> slots = pipeline_.slots[size_t(ctx.coord().pp)];
  if (pipeline_.shares_slots()) {
    shared_acts_ = std::make_unique<SharedActivations>();
    slots.assign(slots.size(), pipeline_.shared_slots[size_t(ctx.coord().pp)]);
  }
  for (size_t c = 0; c < shards_.size(); c++) {
    chunk_sources_.push_back(std::make_unique<ChunkParams>(groups_, places_[c]));
    StageBuffers buffers;
    buffers.slots = slots[c], buffers.compute = compute_, buffers.recompute = cfg.train.recompute_mode();
    buffers.source = chunk_sources_.back().get();
    buffers.shared_activations = shared_acts_.get();
    buffers.backend = &ops_;
    buffers.split = split_, buffers.cp_group = &ctx.cp(), buffers.ep_group = &ctx.group(GroupKind::ep);
    chunks_.push_back(make_stage_module(cfg.model, shards_[c],
                                        TensorParallel(&ctx.tp(), shards_[c].sequence_parallel), micro_batch,
                                        split_.local_len(cfg.model.seq_len), buffers));
  }
  if (shared_acts_) shared_acts_->allocate(ops_.memory());
  executor_ = std::make_unique<pp::PipelineExecutor>(ctx.pp(), slots, pipeline_.map(), shared_acts_ != nullptr);
  // Gradients are final once a chunk's last micro-batch wrote them; a table
  // tied across stages once its copies are summed (sync_tied_embedding).
  stage_ = std::make_unique<StageAdapter>(chunks_, micro_batch, micro_batches, [this](int c, int i) {
    if (layouts_[size_t(c)].params[size_t(i)].tied_across_stages) return;
    const GroupPlace& p = places_[size_t(c)][size_t(i)];
    groups_[size_t(p.group)]->on_grad_ready(p.member);
  });
}

Replica::~Replica() = default;

void Replica::init_parameters(uint64_t seed) {
  for (auto& g : groups_) g->init(seed);
}

float Replica::forward_backward(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int T,
                                const std::vector<int32_t>& positions, int injected_delay_ms) {
  for (auto& g : groups_) g->begin_step();
  for (auto& c : chunks_)
    if (c->router_state()) c->router_state()->begin_step();
  LOOM_CHECK(positions.empty() || positions.size() == tokens.size(), "%zu positions for %zu tokens", positions.size(),
             tokens.size());
  if (split_.active()) {  // this rank's two chunks of every sequence
    const int rows = int(tokens.size() / size_t(T));
    local_tokens_.resize(tokens.size() / size_t(split_.cp)), local_targets_.resize(local_tokens_.size());
    split_.take(local_tokens_.data(), tokens.data(), rows, T);
    split_.take(local_targets_.data(), targets.data(), rows, T);
    if (!positions.empty()) {
      local_positions_.resize(local_tokens_.size());
      split_.take(local_positions_.data(), positions.data(), rows, T);
    }
  }
  const std::vector<int32_t>& my_tokens = split_.active() ? local_tokens_ : tokens;
  const std::vector<int32_t>& my_targets = split_.active() ? local_targets_ : targets;
  const int32_t* my_positions =
      positions.empty() ? nullptr : split_.active() ? local_positions_.data() : positions.data();
  // The whole batch's valid targets: this rank's rows (its chunks under cp;
  // tp and pp ranks hold the same rows), summed over the data group.
  step_targets_ = int64_t(
      sum_over_ranks(ctx_.dp(), double(count_valid_targets(my_targets.data(), int64_t(my_targets.size())))));
  const float target_weight = step_targets_ > 0 ? scaler_.scale() / float(step_targets_) : 0.f;
  // Every data rank holds as many tokens: the global batch's are this rank's x the data group's size.
  step_tokens_ = int64_t(my_tokens.size()) * ctx_.dp().size();
  for (auto& c : chunks_)
    if (moe::RouterState* r = c->router_state()) r->set_loss_weight(scaler_.scale() / float(step_tokens_));
  stage_->set_batch(my_tokens.data(), my_targets.data(), my_positions, split_.active() ? split_.local_len(T) : T,
                    target_weight);
  if (injected_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(injected_delay_ms));
  executor_->run(schedule_, *stage_);
  for (auto& g : groups_)
    if (g->gather()) g->gather()->settle();
  sum_tied_copies(chunks_, places_, groups_, ctx_.group(GroupKind::embedding));
  // The loss lives on the last stage; every stage reports it.
  float loss = step_targets_ > 0 ? float(stage_->loss_sum() / double(step_targets_)) : 0.f;
  if (ctx_.grid().pp() > 1) ctx_.pp().all_reduce(&loss, 1, DType::f32, ReduceOp::Sum);
  return loss;
}

Replica::LossSum Replica::evaluate(const int32_t* tokens, const int32_t* targets, int T, const int32_t* positions) {
  if (split_.active()) {
    local_tokens_.resize(size_t(micro_batch_) * split_.local_len(T)), local_targets_.resize(local_tokens_.size());
    split_.take(local_tokens_.data(), tokens, micro_batch_, T);
    split_.take(local_targets_.data(), targets, micro_batch_, T);
    if (positions) {
      local_positions_.resize(local_tokens_.size());
      split_.take(local_positions_.data(), positions, micro_batch_, T);
      positions = local_positions_.data();
    }
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
    chunk.set_documents(0, positions, micro_batch_, T);
    chunk.forward_stage(0, tokens, micro_batch_, T);
    if (chunk.layout().shard.head) loss = chunk.stage_loss(0, targets, micro_batch_, T);
    else if (const int to = map.stage_of(vs + 1); to != stage)
      ctx_.pp().send(chunk.stage_output(0), n, DType::f32, to, 1);
  }
  for (auto& g : groups_)
    if (g->gather()) g->gather()->settle();
  if (pp > 1) loss = sum_over_ranks(ctx_.pp(), loss);
  return {loss, count_valid_targets(targets, int64_t(micro_batch_) * T)};
}

double Replica::reduce() {
  for (auto& g : groups_) g->finish_reduction();
  sum_sequence_partial(groups_, layouts_, shards_, ctx_.tp());
  combine_router_step();
  overflowed_ = false;
  if (scaler_.mode() != LossScaleMode::off) {
    overflowed_ = unscale_and_find_inf(ops_, groups_, scaler_.inv_scale(), inject_inf_, ctx_.world());
    inject_inf_ = false;
    decision_ = scaler_.update(overflowed_);
    if (overflowed_) return NAN;
  }
  const double norm = global_grad_norm(groups_, ctx_.group(GroupKind::model), ctx_.group(GroupKind::ep));
  if (compute_ != ComputePrecision::fp32 && scaler_.mode() == LossScaleMode::off) {
    // Unscaled 16-bit compute: nothing to divide, and a non-finite gradient
    // makes the norm's sum (in double, which finite fp32 squares cannot
    // overflow) non-finite, so the norm's pass is the check: one pass over
    // the gradients, not two. The flag still goes round the world: an inf
    // injected on one replica leaves the others' norms finite.
    if (inject_inf_) overflowed_ = true, inject_inf_ = false;
    overflowed_ = any_rank_found_inf(ctx_.world(), overflowed_ || !std::isfinite(norm));
    decision_ = scaler_.update(overflowed_);
    if (overflowed_) return NAN;
  }
  return norm;
}

void Replica::update(float lr, float grad_scale) {
  for (auto& g : groups_) g->update(lr, grad_scale);
  // aux_free balancing: each held layer's bias from the global counts.
  for (auto& c : chunks_)
    if (moe::RouterState* r = c->router_state()) r->update_bias(router_step_.layers, router_step_.counts.data());
}

// Each stage's MoE layers' counts and loss sums, summed over the world (the
// first tp rank of each replica contributes: tp ranks route alike). Counts
// travel as two floats, their low 12 bits and the rest, so the sums are
// exact integers for up to 4096 ranks and 2^36 pairs.
void Replica::combine_router_step() {
  const ModelConfig& m = chunks_[0]->config();
  if (!m.is_moe()) return;
  RouterStep& s = router_step_;
  s.experts = m.n_experts, s.layers.clear();
  for (int l = 0; l < m.n_layer; l++)
    if (m.moe_block(l)) s.layers.push_back(l);
  const size_t E = size_t(m.n_experts), n = s.layers.size() * E;
  std::vector<float>& buf = router_buf_;  // kept: a step allocates nothing here after the first
  buf.assign(2 * n + 2, 0.f);
  if (ctx_.tp().rank() == 0)
    for (auto& c : chunks_) {
      const moe::RouterState* r = c->router_state();
      if (!r) continue;
      for (size_t i = 0; i < r->layers().size(); i++) {
        const size_t at = size_t(std::find(s.layers.begin(), s.layers.end(), r->layers()[i]) - s.layers.begin()) * E;
        for (size_t e = 0; e < E; e++) {
          const int64_t v = r->step_counts()[i * E + e];
          buf[at + e] = float(v & 4095), buf[n + at + e] = float(v >> 12);
        }
      }
      buf[2 * n] += float(r->z_sum()), buf[2 * n + 1] += float(r->balance_sum());
    }
  // Expert parallelism: what this rank waited on, hid and received.
  float mine[4] = {0, 0, 0, 0};  // the largest |bias|, exchange seconds exposed, rows received (then load), hidden
  for (auto& c : chunks_)
    if (const moe::RouterState* r = c->router_state())
      mine[1] += float(r->exchange_seconds()), mine[2] += float(r->rows_received()), mine[3] += float(r->hidden_seconds());
  // The rank's received rows over its ep group's mean (the group's ranks hold
  // the same layers; other stages hold others).
  float group_rows = mine[2];
  Communicator& ep = ctx_.group(GroupKind::ep);
  if (ep.size() > 1) ep.all_reduce(&group_rows, 1, DType::f32, ReduceOp::Sum);
  const float load = group_rows > 0 ? mine[2] * float(ep.size()) / group_rows : 0.f;
  ctx_.world().all_reduce(buf.data(), buf.size(), DType::f32, ReduceOp::Sum);
  s.counts.assign(n, 0);
  for (size_t i = 0; i < n; i++) s.counts[i] = int64_t(buf[i]) + (int64_t(buf[n + i]) << 12);
  const double per_token = step_tokens_ > 0 ? 1.0 / double(step_tokens_) : 0.0;
  s.z_loss = m.moe_z_coef * buf[2 * n] * per_token;
  s.balance_loss = m.moe_aux_coef * buf[2 * n + 1] * per_token;
  for (auto& c : chunks_)
    if (const moe::RouterState* r = c->router_state())
      for (int l : r->layers())
        if (const float* b = r->bias(l))
          for (int e = 0; e < r->experts(); e++) mine[0] = std::max(mine[0], std::fabs(b[e]));
  mine[2] = load;
  ctx_.world().all_reduce(mine, 4, DType::f32, ReduceOp::Max);
  s.bias_max = mine[0], s.exchange_s = mine[1], s.hidden_s = mine[3];
  s.rank_load_max = mine[2];
}

double Replica::RouterStep::load_max() const {
  double most = 0;
  for (size_t i = 0; i * size_t(experts) < counts.size(); i++) {
    const int64_t* c = counts.data() + i * size_t(experts);
    const int64_t total = std::accumulate(c, c + experts, int64_t(0));
    if (total > 0) most = std::max(most, double(*std::max_element(c, c + experts)) * experts / double(total));
  }
  return most;
}

double Replica::RouterStep::load_min() const {
  double least = counts.empty() ? 0 : 1e300;
  for (size_t i = 0; i * size_t(experts) < counts.size(); i++) {
    const int64_t* c = counts.data() + i * size_t(experts);
    const int64_t total = std::accumulate(c, c + experts, int64_t(0));
    if (total > 0) least = std::min(least, double(*std::min_element(c, c + experts)) * experts / double(total));
  }
  return least == 1e300 ? 0 : least;
}


std::vector<float> Replica::gather_grads() const {
  // In stage-buffer order: chunk c's tensors from chunk_offset_[c] on.
  int64_t total = 0;
  for (size_t c = 0; c < layouts_.size(); c++) total = std::max(total, chunk_offset_[c] + layouts_[c].total);
  std::vector<float> full(size_t(total), 0.f);
  for (const auto& g : groups_) {
    const std::vector<float> grads = g->gather_grads();
    for (size_t j = 0; j < g->members().size(); j++) {
      const ParamGroup::Member& m = g->members()[j];
      const FlatTensor& t = g->flat().tensors[j];
      const int64_t at = chunk_offset_[size_t(m.chunk)] + layouts_[size_t(m.chunk)].params[size_t(m.tensor)].offset;
      std::copy(grads.begin() + t.offset, grads.begin() + t.offset + t.numel, full.begin() + at);
    }
  }
  return full;
}

std::vector<float> Replica::gather_params() {
  int64_t total = 0;
  for (size_t c = 0; c < layouts_.size(); c++) total = std::max(total, chunk_offset_[c] + layouts_[c].total);
  std::vector<float> full(size_t(total), 0.f);
  for (auto& g : groups_) {
    std::vector<float*> into;
    for (const ParamGroup::Member& m : g->members())
      into.push_back(full.data() + chunk_offset_[size_t(m.chunk)] +
                     layouts_[size_t(m.chunk)].params[size_t(m.tensor)].offset);
    g->copy_whole_params(into);
  }
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

size_t Replica::compute_weight_bytes() const {
  size_t sum = 0;
  for (const auto& g : groups_) sum += g->compute_weight_bytes();
  return sum;
}

size_t Replica::param_bytes() const {
  size_t sum = 0, gathered = 0;
  for (const auto& g : groups_) sum += g->param_bytes();
  // ZeRO-3: the most gathered at once (the chunks run one at a time).
  for (const auto& c : chunk_sources_) gathered = std::max(gathered, c->peak_gathered());
  return sum + gathered;
}

size_t Replica::optimizer_state_bytes() const {
  size_t sum = 0;
  for (const auto& g : groups_) sum += g->optimizer_state_bytes();
  return sum;
}

size_t Replica::grad_bytes_resident() const {
  size_t sum = 0;
  for (const auto& g : groups_) sum += g->grad_bytes_resident();
  return sum;
}

const ReduceTimes& Replica::reduce_times() const {
  for (const auto& g : groups_)
    if (g->reduce_times() && g->spec().ranks == GroupKind::data) return *g->reduce_times();
  return no_reductions_;  // a stage that trains nothing reduces nothing
}

int Replica::adam_steps() const {
  for (const auto& g : groups_)
    if (!g->frozen()) return g->adam_steps();
  return 0;
}

int Replica::buckets() const {
  int n = 0;
  for (const auto& g : groups_)
    if (!g->frozen()) n += int(g->plan().buckets().size());
  return n;
}

int64_t Replica::largest_bucket() const {
  int64_t most = 0;
  for (const auto& g : groups_)
    if (!g->frozen())
      for (const auto& b : g->plan().buckets()) most = std::max(most, b.range.size());
  return most;
}

int64_t Replica::grad_floats() const {
  int64_t n = 0;
  for (const auto& g : groups_)
    if (!g->frozen()) n += g->plan().padded_total();
  return n;
}

int64_t Replica::grad_shard_floats() const {
  int64_t n = 0;
  for (const auto& g : groups_)
    if (!g->frozen()) n += g->plan().shard_total();
  return n;
}

int64_t Replica::frozen_floats() const {
  int64_t n = 0;
  for (const auto& g : groups_)
    if (g->frozen()) n += g->flat().total;
  return n;
}

// The data group's first rank (dp x cp: cp ranks hold the same replica).
bool Replica::writes_checkpoint() const {
  // With expert parallelism each expert-data group's first rank writes its experts.
  return ctx_.dp().rank() == 0 || zero_ > 0 || ctx_.group(GroupKind::expert_data).rank() == 0;
}

const float* Replica::whole_model_params() const {
  if (zero_ == 3 || ctx_.grid().tp() != 1 || ctx_.grid().pp() != 1 || ctx_.grid().ep() != 1 || chunks_.size() != 1)
    return nullptr;
  // One group of every tensor, kept whole: its buffer is the model's layout.
  if (groups_.size() == 1 && groups_[0]->whole_buffer()) return groups_[0]->whole_buffer();
  return whole_.empty() ? nullptr : whole_.data();
}

void Replica::gather_whole_params() {
  // ZeRO-3 exists for models no rank holds whole: it is not gathered for a sample.
  if (zero_ == 3 || ctx_.grid().tp() != 1 || ctx_.grid().pp() != 1 || ctx_.grid().ep() != 1 || chunks_.size() != 1)
    return;
  if (groups_.size() == 1 && groups_[0]->whole_buffer()) return;  // read in place
  whole_.assign(size_t(layouts_[0].total), 0.f);
  for (auto& g : groups_) {
    std::vector<float*> into;
    for (const ParamGroup::Member& m : g->members())
      into.push_back(whole_.data() + layouts_[size_t(m.chunk)].params[size_t(m.tensor)].offset);
    g->copy_whole_params(into);
  }
}

std::vector<CheckpointPiece> Replica::checkpoint_pieces() {
  std::vector<CheckpointPiece> pieces;
  for (const auto& g : groups_) {
    if (g->frozen() && base_outside_checkpoints_) continue;
    // Parameters from the group's first rank; the state from it, or from
    // every rank of the group when ZeRO shards it.
    const bool first = ctx_.group(g->spec().ranks).rank() == 0;
    auto p = g->checkpoint_pieces(first, first || zero_ > 0);
    pieces.insert(pieces.end(), std::make_move_iterator(p.begin()), std::make_move_iterator(p.end()));
  }
  // A mixture of experts' balancing biases: each layer's from its stage's
  // first data and tensor rank (every rank of the stage holds them alike).
  if (ctx_.dp().rank() == 0 && ctx_.tp().rank() == 0)
    for (auto& c : chunks_)
      if (moe::RouterState* r = c->router_state())
        for (int l : r->layers()) {
          CheckpointPiece p;
          p.name = moe::RouterState::bias_name(l), p.global_shape = {r->experts()}, p.data = r->bias_values(l);
          pieces.push_back(std::move(p));
        }
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
  for (auto& g : groups_) {
    if (g->frozen() && base_outside_checkpoints_) continue;
    g->load(checkpoint);
    g->set_adam_steps(adam_steps);
  }
  load_router_biases(checkpoint.tensors());
}

void Replica::load_router_biases(const GlobalTensors& tensors) {
  for (auto& c : chunks_)
    if (moe::RouterState* r = c->router_state()) r->load_biases(tensors);
}

void Replica::load_parameters(const GlobalTensors& tensors, bool absent_ok) {
  for (auto& g : groups_) g->load_params(tensors, absent_ok);
}

double Replica::gather_wait_seconds() const {
  double sum = 0;
  for (const auto& g : groups_)
    if (g->gather()) sum += g->gather()->wait_seconds();
  return sum;
}

double Replica::tp_comm_seconds() const {
  double sum = 0;
  for (const auto& c : chunks_) sum += c->tp_comm_seconds();
  return sum;
}

}  // namespace loom

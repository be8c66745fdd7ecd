#include "model/transformer_stage.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "model/moe/router_state.h"
#include "model/split_rules.h"
#include "parallel/tp/linear.h"

namespace loom {
namespace {

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}

// An ignored target's loss is 0.
double loss_sum(const float* losses, int n) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += losses[i];
  return sum;
}

void check_targets(const int32_t* targets, int n, int V) {
  for (int i = 0; i < n; i++)
    LOOM_CHECK(targets[i] < V, "target %d at row %d is outside the vocabulary (%d)", targets[i], i, V);
}

}  // namespace

TransformerStage::TransformerStage(const ModelConfig& cfg, ParamLayout layout, SharedTensors shared,
                                   const ModelShard& shard, const TensorParallel& tp, int B, int T,
                                   const StageBuffers& buffers)
    : cfg_(cfg),
      layout_(std::move(layout)),
      shared_(shared),
      tp_(tp),
      compute_(buffers.compute),
      recompute_(buffers.recompute),
      plan_only_(buffers.plan_only),
      own_ops_(buffers.backend ? nullptr : std::make_unique<Backend>()),
      ops_(buffers.backend ? *buffers.backend : *own_ops_),
      source_(buffers.source),
      shared_acts_(buffers.shared_activations),
      maxB_(B),
      maxT_(T),
      slot_count_(buffers.slots) {
  cfg_.validate();
  LOOM_USER_CHECK(T >= 1 && T <= cfg.seq_len, "sequence length %d is outside [1, model.seq_len=%d]", T,
                  cfg.seq_len);
  LOOM_USER_CHECK(B >= 1, "batch size must be >= 1 (got %d)", B);
  LOOM_CHECK(shard.tp_size == tp.size() && shard.tp_rank == tp.rank(), "model shard tp %d/%d on a tp group %d/%d",
             shard.tp_rank, shard.tp_size, tp.rank(), tp.size());
  LOOM_CHECK(shard.sequence_parallel == tp.sequence_parallel(), "sequence parallelism differs in shard and group");
  LOOM_CHECK(shard.first_layer >= 0 && shard.first_layer <= shard.layers_end(cfg) &&
                 shard.layers_end(cfg) <= cfg.n_layer && buffers.slots >= 1,
             "bad model chunk: layers [%d, %d) of %d, %d slots", shard.first_layer, shard.layers_end(cfg),
             cfg.n_layer, buffers.slots);
  // The rules every layout check shares (model/split_rules.h).
  const std::string tp_problem = tp_split_problem(cfg, tp.size());
  LOOM_USER_CHECK(tp_problem.empty(), "%s", tp_problem.c_str());
  const std::string sp_problem = tp.sequence_parallel() ? sequence_parallel_problem(B, T, tp.size()) : "";
  LOOM_USER_CHECK(sp_problem.empty(), "%s", sp_problem.c_str());
  vocab_ = {shard.vocab_begin(cfg), int(shard.vocab_per_rank(cfg)), int(shard.vocab_valid(cfg))};
  access_.layout = &layout_;
  const SequenceSplit& split = buffers.split;
  split_ = split;
  LOOM_CHECK(!split.active() || T % 2 == 0, "context parallelism: %d local rows are not two chunks", T);
  if (split.active())
    for (int b = 0; b < B; b++)
      for (int t = 0; t < T; t++) positions_.push_back(split.position(t, T));
  docs_.resize(size_t(buffers.slots));
  const int t = tp.size(), Cl = cfg.d_model / t, NHl = cfg.n_head / t, NKVl = cfg.kv_heads() / t;
  const bool tiled = cfg.tiled_attention(T * split.cp, split.cp), lowp = compute_ != ComputePrecision::fp32;
  if (plan_only_) {
    // Sizes only: the attention's work space is counted, not made (for
    // buffers.plan_threads threads; 0: this process's, as a real module).
    attn_ = Attention(ops_, tiled);
    attention_work_bytes_ =
        Attention::work_floats(tiled, lowp, split.cp, B, T, Cl, NHl, NKVl, buffers.plan_threads) * 4;
    return;
  }
  if (split.active()) {
    LOOM_CHECK(buffers.cp_group && buffers.cp_group->size() == split.cp && buffers.cp_group->rank() == split.rank,
               "context parallelism without its group");
    ring_ = std::make_unique<RingAttention>(ops_, *buffers.cp_group);
    cp_group_ = buffers.cp_group;
  }
  if (shard.ep_size > 1) {
    LOOM_CHECK(buffers.ep_group && buffers.ep_group->size() == shard.ep_size &&
                   buffers.ep_group->rank() == shard.ep_rank,
               "expert parallelism without its group");
    ep_group_ = buffers.ep_group;
  }
  if (cfg.is_moe())
    router_ = std::make_unique<moe::RouterState>(cfg, shard.first_layer, shard.layers_end(cfg), buffers.slots);
  attn_ = Attention(ops_, tiled, ring_.get());
  attn_.reserve(lowp, B, T, Cl, NHl, NKVl);
  // ZeRO-3 units from the layout: blocks by their index, the rest by role.
  unit_block_.resize(size_t(shard.num_layers(cfg)));
  for (size_t i = 0; i < layout_.params.size(); i++) {
    const int b = layout_.params[i].block, t = int(i);
    if (b >= 0) unit_block_[size_t(b - shard.first_layer)].push_back(t);
    else if (t == shared_.embed || t == shared_.positions) unit_embed_.push_back(t);
    else if (t != shared_.head) unit_norm_.push_back(t);
  }
  if (shared_.head >= 0) unit_head_ = {shared_.head};
  unit_norm_head_ = unit_norm_;
  unit_norm_head_.insert(unit_norm_head_.end(), unit_head_.begin(), unit_head_.end());
  if (!layout_.shard.embedding) unit_embed_.clear();  // a tied head's table is used as the head only
  if (source_) {
    access_.params_at = &source_->tensor_params();
    if (compute_ != ComputePrecision::fp32) access_.weights_at = &source_->tensor_weights();
  } else if (buffers.params) {
    access_.params = buffers.params;
  } else {
    params_.reserve(size_t(std::max(layout_.total, buffers.param_floats)) * 4);
    params_.allocate(ops_.memory());
    access_.params = params_.at<float>(0);
  }
  if (source_ && source_->tensor_grads()) {
    access_.grads_at = source_->tensor_grads();
  } else if (buffers.grads) {
    access_.grads = buffers.grads;
  } else {
    grads_.reserve(size_t(layout_.total) * 4);
    grads_.allocate(ops_.memory());
    access_.grads = grads_.at<float>(0);
  }
  if (source_) {
  } else if (compute_ != ComputePrecision::fp32 && buffers.weights16) {
    access_.weights16 = buffers.weights16;
  } else if (compute_ != ComputePrecision::fp32) {
    weights16_.reserve(size_t(layout_.total) * 2);
    weights16_.allocate(ops_.memory());
    access_.weights16 = weights16_.base();
  }
}

void TransformerStage::plan(int B, int T, int slots) {
  const size_t N = size_t(B) * T, R = size_t(tp_.local_rows(int64_t(N))), C = cfg_.d_model;
  const size_t Vl = size_t(vocab_.rows), a = act_bytes();
  const bool sp = tp_.sequence_parallel(), head = layout_.shard.head, lowp = compute_ != ComputePrecision::fp32;
  ActivationPlan p;
  slots_.resize(size_t(slots));
  for (size_t k = 0; k < slots_.size(); k++) {
    Slot& s = slots_[k];
    // What point-to-point messages land in or leave from stays the chunk's
    // own (a gradient send may still be in flight when another chunk takes
    // the slot); the rest of the slot is shared with the stage's other chunks.
    p.set_region(ActivationPlan::kOwn);
    p.want(&s.input, R * C), p.want(&s.dres, R * C);
    p.set_region(int(k));
    s.head_in = nullptr;
    if (head) p.want(&s.head_in, R * C, a);
  }
  p.set_region(ActivationPlan::kWork);  // the rest is used within one action
  if (head) p.want(&logits_, size_t(head_chunk_rows(int(N))) * Vl, a), p.want(&losses_, N), p.want(&xent_scratch_, 3 * N);
  if (head && sp) p.want(&head_in_full_, N * C, a);
  if (sp) p.want(&gathered_, N * C, a), p.want(&grad_work_, N * C);
  p.want(&dbuf_c_, R * C);
  if (lowp) {
    p.want(&dres16_, R * C, a);
    if (sp) p.want(&dres16_full_, N * C, a);
  }
  plan_family(p, B, T, slots);
  if (shared_acts_) {
    // The stage's pool holds all of it (this module's own region too).
    if (plan_only_) planned_bytes_ = attention_work_bytes_;
    shared_acts_->enroll(std::move(p), [this] {
      for (Slot& s : slots_) s.output = s.input;
    });
    return;
  }
  if (plan_only_) {
    planned_bytes_ = p.planned_bytes() + attention_work_bytes_;
    return;
  }
  p.allocate(acts_, ops_.memory());
  for (Slot& s : slots_) s.output = s.input;
}

const float* TransformerStage::logits() const {
  LOOM_CHECK(compute_ == ComputePrecision::fp32, "logits() of a %s model: they are kept in 16 bits",
             compute_precision_name(compute_));
  LOOM_CHECK(logits_whole_, "logits(): the head ran in chunks of rows; only the last chunk's are kept");
  return as<float>(logits_);
}

std::vector<float> TransformerStage::logits_f32(int64_t rows) const {
  LOOM_CHECK(logits_whole_, "logits_f32(): the head ran in chunks of rows; only the last chunk's are kept");
  const size_t n = size_t(rows) * size_t(vocab_slice().rows);
  std::vector<float> out(n);
  if (compute_ == ComputePrecision::fp32) std::copy_n(as<float>(logits_), n, out.data());
  else if (compute_ == ComputePrecision::bf16) convert_bf16_to_f32(out.data(), as<bf16>(logits_), n);
  else convert_f16_to_f32(out.data(), as<f16>(logits_), n);
  return out;
}

void TransformerStage::init_parameters(uint64_t seed) {
  LOOM_CHECK(!source_, "parameters from a ParamSource are filled by their owner");
  layout_.init_parameters(params(), seed);
  refresh_compute_weights();
}

void TransformerStage::refresh_compute_weights() {
  if (source_) return;  // ZeRO-3: made as each tensor is gathered
  const size_t n = size_t(layout_.total);
  if (compute_ == ComputePrecision::bf16) ops_.narrow(static_cast<bf16*>(access_.weights16), params(), n);
  if (compute_ == ComputePrecision::fp16) ops_.narrow(static_cast<f16*>(access_.weights16), params(), n);
}

void TransformerStage::set_documents(int slot, const int32_t* positions, int B, int T) {
  Documents& d = docs_[size_t(slot)];
  d.packed = positions != nullptr;
  if (!d.packed) return;
  LOOM_CHECK(B <= maxB_ && T <= maxT_, "batch %dx%d exceeds the planned %dx%d", B, T, maxB_, maxT_);
  const size_t N = size_t(B) * T;
  d.pos.assign(positions, positions + N);
  d.start.resize(N);
  for (size_t n = 0; n < N; n++) {
    const int global = split_.position(int(n % size_t(T)), T);
    LOOM_CHECK(positions[n] >= 0 && positions[n] <= global, "token row %zu: position %d in its document, %d in the row",
               n, positions[n], global);
    d.start[n] = global - positions[n];
  }
}

void TransformerStage::forward_stage(int slot, const int32_t* tokens, int B, int T) {
  LOOM_CHECK(B <= maxB_ && T <= maxT_, "batch %dx%d exceeds the planned %dx%d", B, T, maxB_, maxT_);
  Slot& s = slots_[size_t(slot)];
  const int N = B * T, C = cfg_.d_model;
  if (layout_.shard.embedding) {
    use(unit_embed_, unit_block_.empty() ? unit_norm_ : unit_block_[0]);
    tp::embedding_forward(ops_, tp_, s.input, grad_work_, tokens, access_.param(shared_.embed), vocab_,
                          shared_.positions >= 0 ? access_.param(shared_.positions) : nullptr, N, T, C,
                          token_positions(slot));
    done(unit_embed_);
  }
  s.output = forward_blocks(slot, B, T);
  if (layout_.shard.head) {
    use(unit_norm_);
    final_norm_forward(slot, s.output, int(tp_.local_rows(N)));
    done(unit_norm_);
  }
}

// The LM head, column-parallel over the vocabulary:
// logits[N, Vl] = head_in[N, C] @ head_rows[Vl, C]^T (head_in gathered with
// sequence parallelism). In bf16 / fp16 the logits are rounded once to 16
// bits; the softmax and the loss widen them and compute in fp32.
//
// The head runs on chunks of rows so that a large vocabulary's logits never
// exist for the whole micro-batch at once (GPT-2's 50k for 1024 tokens are
// 196 MiB in fp32): at most kHeadChunkBytes of them, loss and gradient taken
// per chunk. One chunk with sequence parallelism (its reduce-scatter splits
// all rows) and whenever the whole fits. 16-bit logits take twice the rows
// in the same bytes: the head's weight gradient (dW += dlogitsᵀ x, its sum
// over the chunk's rows) then reads and writes the fp32 table half as often
// (bf16 GPT-2 124M: 4 chunks of 256 rows, not 7 of 147).
int TransformerStage::head_chunk_rows(int N) const {
  const int64_t elems = kHeadChunkBytes / (compute_ == ComputePrecision::fp32 ? 4 : 2);
  if (tp_.sequence_parallel() || int64_t(N) * vocab_.rows <= elems) return N;
  // Chunks of equal size: a short last chunk (28 of GPT-2's 1024 rows at
  // 166 a chunk) runs its products at half the rate of the others.
  const int most = std::max(1, int(elems / vocab_.rows)), chunks = (N + most - 1) / most;
  return (N + chunks - 1) / chunks;
}

template <class A>
const A* TransformerStage::head_input_rows(int slot, int N) {
  return tp_.gather_rows(as<A>(head_input(slot)), as<A>(head_in_full_), N, cfg_.d_model);
}

template <class A>
void TransformerStage::head_logits(const A* x, int rows) {
  tp::column_parallel_forward(ops_, as<A>(logits_), x, access_.weight<A>(shared_.head), nullptr, rows,
                              cfg_.d_model, vocab_.rows);
}

double TransformerStage::stage_loss(int slot, const int32_t* targets, int B, int T) {
  LOOM_CHECK(layout_.shard.head, "the loss is computed on the chunk with the head");
  const int N = B * T;
  check_targets(targets, N, cfg_.vocab_size);
  use(unit_head_);
  const int chunk = head_chunk_rows(N), C = cfg_.d_model;
  with_compute_type([&](auto a) {
    using A = decltype(a);
    const A* x = head_input_rows<A>(slot, N);
    for (int r0 = 0; r0 < N; r0 += chunk) {
      const int n = std::min(chunk, N - r0);
      head_logits<A>(x + size_t(r0) * C, n);
      tp::cross_entropy(ops_, tp_, losses_ + r0, as<A>(logits_), xent_scratch_, targets + r0, vocab_, n, false, 0.f);
    }
  });
  logits_whole_ = chunk == N;
  done(unit_head_);
  return loss_sum(losses_, N);
}

double TransformerStage::backward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                                        float target_weight) {
  return backward_pass(slot, tokens, targets, B, T, target_weight, false);
}

double TransformerStage::backward_input(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                                        float target_weight) {
  // Full recomputation keeps only each block's output: nothing to keep the
  // weight pass's operands in (config validation refuses the pair first).
  LOOM_USER_CHECK(recompute_ != Recompute::full,
                  "train.recompute = \"full\" cannot run a zero-bubble schedule's split backward");
  return backward_pass(slot, tokens, targets, B, T, target_weight, true);
}

void TransformerStage::backward_weight(int slot, int B, int T) { backward_blocks_weight(slot, B, T); }

void TransformerStage::embedding_backward(int slot, const int32_t* tokens, int B, int T) {
  // On the whole model a tied table's gradient was first written by the
  // head; this is its last write.
  float* dpos = shared_.positions >= 0 ? access_.grad(shared_.positions) : nullptr;
  tp::embedding_backward(ops_, tp_, access_.grad(shared_.embed), dpos, slots_[size_t(slot)].dres, grad_work_, tokens,
                         vocab_, B * T, T, cfg_.d_model, token_positions(slot));
  if (shared_.positions >= 0) grad_ready(shared_.positions);
  grad_ready(shared_.embed);
}

double TransformerStage::backward_pass(int slot, const int32_t* tokens, const int32_t* targets, int B, int T,
                                       float target_weight, bool split) {
  const int N = B * T, C = cfg_.d_model, R = int(tp_.local_rows(N));
  const bool sp = tp_.sequence_parallel();
  Slot& s = slots_[size_t(slot)];
  double loss = 0;
  if (layout_.shard.head) {
    check_targets(targets, N, cfg_.vocab_size);
    const float dloss = target_weight;
    use(unit_norm_head_, unit_block_.empty() ? no_unit_ : unit_block_.back());
    const int chunk = head_chunk_rows(N);
    with_compute_type([&](auto a) {
      using A = decltype(a);
      const A* x = head_input_rows<A>(slot, N);
      A* const dlogits = as<A>(logits_);  // the logits become d(loss)/d(logits) in place
      for (int r0 = 0; r0 < N; r0 += chunk) {
        const int n = std::min(chunk, N - r0);
        head_logits<A>(x + size_t(r0) * C, n);
        tp::cross_entropy(ops_, tp_, losses_ + r0, dlogits, xent_scratch_, targets + r0, vocab_, n, true, dloss);
        // dnorm = reduce(dlogits @ head_rows); dhead_rows += dlogits^T @ head_in
        float* dnorm = dbuf_c_ + size_t(r0) * C;
        tp::column_parallel_backward(ops_, tp_, dnorm, sp ? grad_work_ : dnorm, access_.grad(shared_.head),
                                     nullptr, dlogits, x + size_t(r0) * C, access_.weight<A>(shared_.head), n, C,
                                     vocab_.rows);
      }
    });
    logits_whole_ = chunk == N;
    loss = loss_sum(losses_, N);
    // An untied head's gradient is final here; a tied one waits for the embedding's.
    if (shared_.head != shared_.embed) grad_ready(shared_.head);
    std::memset(s.dres, 0, size_t(R) * C * sizeof(float));
    final_norm_backward(slot, s.dres, dbuf_c_, s.output, R);
    done(unit_norm_head_);
  }
  backward_blocks(slot, B, T, split);
  // Split or not, the embedding's gradient is taken here: on the first
  // stage nothing waits for this pass's end, and a table tied to a head on
  // the same chunk then sums its gradients in the combined pass's order.
  if (layout_.shard.embedding) embedding_backward(slot, tokens, B, T);
  else if (shared_.embed >= 0) grad_ready(shared_.embed);  // a tied head's table, final after the head
  return loss;
}

void StageModule::zero_grads() { std::memset(grads(), 0, size_t(layout().total) * sizeof(float)); }

int64_t count_valid_targets(const int32_t* targets, int64_t n) {
  int64_t valid = 0;
  for (int64_t i = 0; i < n; i++) valid += targets[i] >= 0;
  return valid;
}

float StageModule::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  forward_stage(0, tokens, B, T);
  const int64_t valid = count_valid_targets(targets, int64_t(B) * T);
  const double sum = stage_loss(0, targets, B, T);
  return valid > 0 ? float(sum / double(valid)) : 0.f;
}

float StageModule::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale) {
  LOOM_CHECK(layout().shard.embedding && layout().shard.head, "forward_backward needs the whole model");
  forward_stage(0, tokens, B, T);
  const int64_t valid = count_valid_targets(targets, int64_t(B) * T);
  const float weight = valid > 0 ? loss_scale / float(valid) : 0.f;
  if (moe::RouterState* r = router_state()) r->begin_step(), r->set_loss_weight(loss_scale / float(int64_t(B) * T));
  const double sum = backward_stage(0, tokens, targets, B, T, weight);
  return valid > 0 ? float(sum / double(valid)) : 0.f;
}

}  // namespace loom

#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_lowp.h"
#include "kernels/cpu/cast.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "parallel/tp/linear.h"

namespace loom {
namespace {

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}

}  // namespace

GPT::GPT(const GPTConfig& cfg, int B, int T, float* grad_buffer, int64_t param_floats)
    : GPT(cfg, ModelShard{}, TensorParallel{}, B, T, GPTBuffers{nullptr, grad_buffer, param_floats, 1}) {}

GPT::GPT(const GPTConfig& cfg, const ModelShard& shard, const TensorParallel& tp, int B, int T,
         const GPTBuffers& buffers)
    : cfg_(cfg),
      layout_(ParamLayout::gpt2(cfg, shard)),
      tp_(tp),
      compute_(buffers.compute),
      maxB_(B),
      maxT_(T) {
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
  LOOM_USER_CHECK(cfg.n_head % tp.size() == 0, "model.n_head (%d) must be divisible by parallel.tp (%d)",
                  cfg.n_head, tp.size());
  LOOM_USER_CHECK(!tp.sequence_parallel() || (int64_t(B) * T) % tp.size() == 0,
                  "sequence parallelism splits the micro-batch's %d x %d tokens over parallel.tp = %d ranks: "
                  "they must divide evenly",
                  B, T, tp.size());
  vocab_ = {shard.vocab_begin(cfg), int(shard.vocab_per_rank(cfg)), int(shard.vocab_valid(cfg))};
  if (buffers.params) {
    params_ptr_ = buffers.params;
  } else {
    params_.reserve(size_t(std::max(layout_.total, buffers.param_floats)) * 4);
    params_.allocate();
    params_ptr_ = params_.at<float>(0);
  }
  if (buffers.grads) {
    grads_ptr_ = buffers.grads;
  } else {
    grads_.reserve(size_t(layout_.total) * 4);
    grads_.allocate();
    grads_ptr_ = grads_.at<float>(0);
  }
  if (compute_ != ComputePrecision::fp32 && buffers.weights16) {
    weights16_ptr_ = buffers.weights16;
  } else if (compute_ != ComputePrecision::fp32) {
    weights16_.reserve(size_t(layout_.total) * 2);
    weights16_.allocate();
    weights16_ptr_ = weights16_.base();
  }
  plan_activations(B, T, buffers.slots);
}

template <class F>
decltype(auto) GPT::with_compute_type(F&& f) {
  switch (compute_) {
    case ComputePrecision::bf16: return f(bf16{});
    case ComputePrecision::fp16: return f(f16{});
    default: return f(float{});
  }
}

template <class A>
const A* GPT::weight(int i) const {
  if constexpr (std::is_same_v<A, float>)
    return params_ptr_ + layout_.params[size_t(i)].offset;
  else
    return static_cast<const A*>(weights16_ptr_) + layout_.params[size_t(i)].offset;
}

void GPT::refresh_compute_weights() {
  const size_t n = size_t(layout_.total);
  if (compute_ == ComputePrecision::bf16) cpu::narrow(static_cast<bf16*>(weights16_ptr_), params_ptr_, n);
  if (compute_ == ComputePrecision::fp16) cpu::narrow(static_cast<f16*>(weights16_ptr_), params_ptr_, n);
}

void GPT::plan_activations(int B, int T, int slots) {
  // Plan every activation first, then make the one allocation.
  const size_t N = size_t(B) * T, R = size_t(tp_.local_rows(int64_t(N))), C = cfg_.d_model;
  const size_t t = size_t(tp_.size()), Cl = C / t, NHl = size_t(cfg_.n_head) / t, Fl = 4 * C / t;
  const size_t Vl = size_t(vocab_.rows), att = size_t(B) * NHl * T * T;
  const bool sp = tp_.sequence_parallel(), head = layout_.shard.head, lowp = compute_ != ComputePrecision::fp32;
  const size_t a = dtype_size(compute_dtype(compute_));  // bytes of a compute-type element
  std::vector<std::pair<void**, size_t>> plan;           // (pointer, bytes)
  auto want = [&](auto** p, size_t n, size_t elem = 4) { plan.push_back({reinterpret_cast<void**>(p), n * elem}); };
  slots_.resize(size_t(slots));
  for (Slot& s : slots_) {
    s.layers.resize(size_t(layout_.shard.num_layers(cfg_)));
    want(&s.input, R * C), want(&s.dres, R * C);
    for (auto& l : s.layers) {
      want(&l.ln1, R * C, a), want(&l.ln1_mean, R), want(&l.ln1_rstd, R);
      want(&l.qkv, N * 3 * Cl, a), want(&l.atty, N * Cl, a), want(&l.att, att, a), want(&l.res2, R * C);
      want(&l.ln2, R * C, a), want(&l.ln2_mean, R), want(&l.ln2_rstd, R);
      want(&l.fch, N * Fl, a), want(&l.fch_gelu, N * Fl, a), want(&l.res3, R * C);
    }
    if (head) want(&s.lnf, R * C, a), want(&s.lnf_mean, R), want(&s.lnf_rstd, R);
  }
  logits_ = nullptr, losses_ = xent_scratch_ = nullptr;
  lnf_full_ = gathered_ = dres16_ = dres16_full_ = nullptr;
  grad_work_ = attn_work_ = nullptr;
  if (head) want(&logits_, N * Vl, a), want(&losses_, N), want(&xent_scratch_, 3 * N);
  if (head && sp) want(&lnf_full_, N * C, a);
  if (sp) want(&gathered_, N * C, a), want(&grad_work_, N * C);
  want(&dbuf_c_, R * C), want(&datty_, N * Cl), want(&dbuf_3c_, N * 3 * Cl, a);
  want(&dbuf_4c_, N * Fl), want(&datt_, att);
  if (lowp) {
    want(&dfch_, N * Fl, a), want(&dres16_, R * C, a);
    if (sp) want(&dres16_full_, N * C, a);
    want(&attn_work_, cpu::attention_lowp_work_floats(T, int(C / t), int(NHl)));
  }
  std::vector<size_t> offsets;
  for (auto& [p, n] : plan) offsets.push_back(acts_.reserve(n));
  acts_.allocate();
  for (size_t i = 0; i < plan.size(); i++) *plan[i].first = acts_.at<uint8_t>(offsets[i]);
  if (!lowp) dfch_ = dbuf_4c_;  // fp32: GELU's backward runs in place
}

const float* GPT::logits() const {
  LOOM_CHECK(compute_ == ComputePrecision::fp32, "logits() of a %s model: they are kept in 16 bits",
             compute_precision_name(compute_));
  return as<float>(logits_);
}

void GPT::init_parameters(uint64_t seed) {
  layout_.init_parameters(params(), seed);
  refresh_compute_weights();
}

void GPT::zero_grads() { std::memset(grads(), 0, size_t(layout_.total) * sizeof(float)); }

std::vector<int> GPT::sequence_partial_grads() const {
  std::vector<int> out;
  if (!tp_.sequence_parallel()) return out;
  for (const BlockParams& b : layout_.blocks)
    for (int i : {b.ln1_w, b.ln1_b, b.ln2_w, b.ln2_b}) out.push_back(i);
  for (int i : {layout_.lnf_w, layout_.lnf_b, layout_.wpe})
    if (i >= 0) out.push_back(i);
  std::sort(out.begin(), out.end());
  return out;
}

const float* GPT::stage_output(int slot) const {
  const Slot& s = slots_[size_t(slot)];
  return s.layers.empty() ? s.input : s.layers.back().res3;
}

void GPT::forward_stage(int slot, const int32_t* tokens, int B, int T) {
  LOOM_CHECK(B <= maxB_ && T <= maxT_, "batch %dx%d exceeds the planned %dx%d", B, T, maxB_, maxT_);
  with_compute_type([&](auto a) { forward_impl<decltype(a)>(slot, tokens, B, T); });
}

template <class A>
void GPT::forward_impl(int slot, const int32_t* tokens, int B, int T) {
  constexpr bool lowp = !std::is_same_v<A, float>;
  const int C = cfg_.d_model, t = tp_.size(), Cl = C / t, NHl = cfg_.n_head / t, Fl = 4 * C / t;
  const int N = B * T, R = int(tp_.local_rows(N));
  const bool sp = tp_.sequence_parallel();
  Slot& s = slots_[size_t(slot)];
  A* work = as<A>(gathered_);  // only used with sequence parallelism
  if (layout_.shard.embedding)
    tp::embedding_forward(tp_, s.input, grad_work_, tokens, param(layout_.wte), vocab_, param(layout_.wpe), N, T, C);
  const float* res = s.input;
  for (size_t l = 0; l < s.layers.size(); l++) {
    const BlockParams& p = layout_.blocks[l];
    LayerActs& a = s.layers[l];
    A *ln1 = as<A>(a.ln1), *qkv = as<A>(a.qkv), *atty = as<A>(a.atty), *att = as<A>(a.att);
    A *ln2 = as<A>(a.ln2), *fch = as<A>(a.fch), *fch_gelu = as<A>(a.fch_gelu);
    // Attention: res2 = res + attn_proj(attention(qkv(ln1(res))))
    cpu::layernorm_forward(ln1, a.ln1_mean, a.ln1_rstd, res, param(p.ln1_w), param(p.ln1_b), 1, R, C);
    const A* x = tp_.gather_rows(ln1, work, N, C);
    tp::column_parallel_forward(matmul_, qkv, x, weight<A>(p.qkv_w), param(p.qkv_b), N, C, 3 * Cl);
    if constexpr (lowp)
      cpu::attention_forward(atty, att, qkv, attn_work_, B, T, Cl, NHl);
    else
      cpu::attention_forward(atty, att, qkv, B, T, Cl, NHl);
    tp::row_parallel_forward(matmul_, tp_, a.res2, sp ? grad_work_ : a.res2, atty, weight<A>(p.attn_proj_w),
                             param(p.attn_proj_b), res, N, Cl, C);
    // MLP: res3 = res2 + fc_proj(gelu(fc(ln2(res2))))
    cpu::layernorm_forward(ln2, a.ln2_mean, a.ln2_rstd, a.res2, param(p.ln2_w), param(p.ln2_b), 1, R, C);
    x = tp_.gather_rows(ln2, work, N, C);
    tp::column_parallel_forward(matmul_, fch, x, weight<A>(p.fc_w), param(p.fc_b), N, C, Fl);
    cpu::gelu_forward(fch_gelu, fch, size_t(N) * Fl);
    tp::row_parallel_forward(matmul_, tp_, a.res3, sp ? grad_work_ : a.res3, fch_gelu, weight<A>(p.fc_proj_w),
                             param(p.fc_proj_b), a.res2, N, Fl, C);
    res = a.res3;
  }
  if (layout_.shard.head)
    cpu::layernorm_forward(as<A>(s.lnf), s.lnf_mean, s.lnf_rstd, res, param(layout_.lnf_w), param(layout_.lnf_b), 1,
                           R, C);
}

// LM head tied to the token embedding, column-parallel over the vocabulary:
// logits[N, Vl] = lnf[N, C] @ wte_rows[Vl, C]^T (lnf gathered with sequence
// parallelism). In bf16 / fp16 the logits are rounded once to 16 bits; the
// softmax and the loss widen them and compute in fp32.
template <class A>
void GPT::head_logits(Slot& s, int N) {
  const int C = cfg_.d_model;
  const A* lnf = tp_.gather_rows(as<A>(s.lnf), as<A>(lnf_full_), N, C);
  tp::column_parallel_forward(matmul_, as<A>(logits_), lnf, weight<A>(layout_.wte), nullptr, N, C, vocab_.rows);
}

static int count_targets(const int32_t* targets, int n) {
  int valid = 0;
  for (int i = 0; i < n; i++) valid += targets[i] >= 0;
  return valid;
}

static float mean_loss(const float* losses, int n, int valid) {
  double sum = 0;
  for (int i = 0; i < n; i++) sum += losses[i];
  return valid > 0 ? float(sum / valid) : 0.f;
}

static void check_targets(const int32_t* targets, int n, int V) {
  for (int i = 0; i < n; i++)
    LOOM_CHECK(targets[i] < V, "target %d at row %d is outside the vocabulary (%d)", targets[i], i, V);
}

float GPT::stage_loss(int slot, const int32_t* targets, int B, int T) {
  LOOM_CHECK(layout_.shard.head, "the loss is computed on the chunk with the head");
  const int N = B * T;
  check_targets(targets, N, cfg_.vocab_size);
  with_compute_type([&](auto a) {
    using A = decltype(a);
    head_logits<A>(slots_[size_t(slot)], N);
    tp::cross_entropy(tp_, losses_, as<A>(logits_), xent_scratch_, targets, vocab_, N, false, 0.f);
  });
  return mean_loss(losses_, N, count_targets(targets, N));
}

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  forward_stage(0, tokens, B, T);
  return stage_loss(0, targets, B, T);
}

float GPT::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale) {
  LOOM_CHECK(layout_.shard.embedding && layout_.shard.head, "forward_backward needs the whole model");
  forward_stage(0, tokens, B, T);
  return backward_stage(0, tokens, targets, B, T, loss_scale);
}

float GPT::backward_stage(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale) {
  return with_compute_type(
      [&](auto a) { return backward_impl<decltype(a)>(slot, tokens, targets, B, T, loss_scale); });
}

template <class A>
float GPT::backward_impl(int slot, const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale) {
  constexpr bool lowp = !std::is_same_v<A, float>;
  const int C = cfg_.d_model, t = tp_.size(), Cl = C / t, NHl = cfg_.n_head / t, Fl = 4 * C / t;
  const int N = B * T, R = int(tp_.local_rows(N));
  const bool sp = tp_.sequence_parallel();
  Slot& s = slots_[size_t(slot)];
  float* const dres = s.dres;  // gradient of the residual stream; each block updates it in place
  float* const partial = sp ? grad_work_ : dbuf_c_;  // input-gradient partial sums before their reduction
  A* const gathered = as<A>(gathered_);
  A* const dqkv = as<A>(dbuf_3c_);
  A* const dfch = as<A>(dfch_);
  // The row-parallel products read the residual gradient in A: itself in
  // fp32; rounded (and, sequence parallel, gathered into dres16_full_) in 16 bits.
  A* dres_a;
  A* dres_rows;
  if constexpr (lowp) {
    dres_a = as<A>(dres16_), dres_rows = as<A>(dres16_full_);
  } else {
    dres_a = dres, dres_rows = grad_work_;
  }
  auto round_dres = [&] {
    if constexpr (lowp) cpu::narrow(dres_a, dres, size_t(R) * C);
  };
  float loss = 0;
  if (layout_.shard.head) {
    check_targets(targets, N, cfg_.vocab_size);
    head_logits<A>(s, N);
    const int valid = count_targets(targets, N);
    const float dloss = valid > 0 ? loss_scale / float(valid) : 0.f;
    // logits_ becomes d(loss)/d(logits) in place.
    A* const dlogits = as<A>(logits_);
    tp::cross_entropy(tp_, losses_, dlogits, xent_scratch_, targets, vocab_, N, true, dloss);
    loss = mean_loss(losses_, N, valid);
    // LM head: dlnf = reduce(dlogits @ wte_rows); dwte_rows += dlogits^T @ lnf
    tp::column_parallel_backward(matmul_, tp_, dbuf_c_, partial, grad(layout_.wte), nullptr, dlogits,
                                 sp ? as<A>(lnf_full_) : as<A>(s.lnf), weight<A>(layout_.wte), N, C, vocab_.rows);
    std::memset(dres, 0, size_t(R) * C * sizeof(float));
    cpu::layernorm_backward(dres, grad(layout_.lnf_w), grad(layout_.lnf_b), dbuf_c_, stage_output(slot),
                            param(layout_.lnf_w), s.lnf_mean, s.lnf_rstd, 1, R, C);
    grad_ready(layout_.lnf_w), grad_ready(layout_.lnf_b);
  }
  for (int l = int(s.layers.size()) - 1; l >= 0; l--) {
    const BlockParams& p = layout_.blocks[size_t(l)];
    LayerActs& a = s.layers[size_t(l)];
    A *ln1 = as<A>(a.ln1), *qkv = as<A>(a.qkv), *atty = as<A>(a.atty), *att = as<A>(a.att);
    A *ln2 = as<A>(a.ln2), *fch = as<A>(a.fch), *fch_gelu = as<A>(a.fch_gelu);
    const float* res_in = l > 0 ? s.layers[size_t(l - 1)].res3 : s.input;
    // MLP. Sequence parallel: ln2's rows are gathered again (not kept whole),
    // while the row-parallel backward runs.
    auto ln2_ready = tp_.gather_rows_async(ln2, gathered, N, C);
    round_dres();
    tp::row_parallel_backward(matmul_, tp_, dbuf_4c_, grad(p.fc_proj_w), grad(p.fc_proj_b), dres_a, dres_rows,
                              fch_gelu, weight<A>(p.fc_proj_w), N, Fl, C);
    grad_ready(p.fc_proj_w), grad_ready(p.fc_proj_b);
    cpu::gelu_backward(dfch, fch, dbuf_4c_, size_t(N) * Fl);
    tp::column_parallel_backward(matmul_, tp_, dbuf_c_, partial, grad(p.fc_w), grad(p.fc_b), dfch,
                                 sp ? gathered : ln2, weight<A>(p.fc_w), N, C, Fl, ln2_ready.get());
    grad_ready(p.fc_w), grad_ready(p.fc_b);
    cpu::layernorm_backward(dres, grad(p.ln2_w), grad(p.ln2_b), dbuf_c_, a.res2, param(p.ln2_w), a.ln2_mean,
                            a.ln2_rstd, 1, R, C);
    grad_ready(p.ln2_w), grad_ready(p.ln2_b);
    // Attention.
    auto ln1_ready = tp_.gather_rows_async(ln1, gathered, N, C);
    round_dres();
    tp::row_parallel_backward(matmul_, tp_, datty_, grad(p.attn_proj_w), grad(p.attn_proj_b), dres_a, dres_rows,
                              atty, weight<A>(p.attn_proj_w), N, Cl, C);
    grad_ready(p.attn_proj_w), grad_ready(p.attn_proj_b);
    if constexpr (lowp)
      cpu::attention_backward(dqkv, datt_, attn_work_, datty_, qkv, att, B, T, Cl, NHl);
    else
      cpu::attention_backward(dqkv, datt_, datty_, qkv, att, B, T, Cl, NHl);
    tp::column_parallel_backward(matmul_, tp_, dbuf_c_, partial, grad(p.qkv_w), grad(p.qkv_b), dqkv,
                                 sp ? gathered : ln1, weight<A>(p.qkv_w), N, C, 3 * Cl, ln1_ready.get());
    grad_ready(p.qkv_w), grad_ready(p.qkv_b);
    cpu::layernorm_backward(dres, grad(p.ln1_w), grad(p.ln1_b), dbuf_c_, res_in, param(p.ln1_w), a.ln1_mean,
                            a.ln1_rstd, 1, R, C);
    grad_ready(p.ln1_w), grad_ready(p.ln1_b);
  }
  if (layout_.shard.embedding) {
    // On the whole model wte's gradient was first written by the head above;
    // this is its last write.
    tp::embedding_backward(tp_, grad(layout_.wte), grad(layout_.wpe), dres, grad_work_, tokens, vocab_, N, T, C);
    grad_ready(layout_.wpe);
  }
  if (layout_.wte >= 0) grad_ready(layout_.wte);
  return loss;
}

}  // namespace loom

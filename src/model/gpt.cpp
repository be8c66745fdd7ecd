#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "parallel/tp/linear.h"

namespace loom {

GPT::GPT(const GPTConfig& cfg, int B, int T, float* grad_buffer, int64_t param_floats)
    : GPT(cfg, ModelShard{}, TensorParallel{}, B, T, GPTBuffers{nullptr, grad_buffer, param_floats, 1}) {}

GPT::GPT(const GPTConfig& cfg, const ModelShard& shard, const TensorParallel& tp, int B, int T,
         const GPTBuffers& buffers)
    : cfg_(cfg), layout_(ParamLayout::gpt2(cfg, shard)), tp_(tp), maxB_(B), maxT_(T) {
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
  plan_activations(B, T, buffers.slots);
}

void GPT::plan_activations(int B, int T, int slots) {
  // Plan every activation first, then make the one allocation.
  const size_t N = size_t(B) * T, R = size_t(tp_.local_rows(int64_t(N))), C = cfg_.d_model;
  const size_t t = size_t(tp_.size()), Cl = C / t, NHl = size_t(cfg_.n_head) / t, Fl = 4 * C / t;
  const size_t Vl = size_t(vocab_.rows), att = size_t(B) * NHl * T * T;
  const bool sp = tp_.sequence_parallel(), head = layout_.shard.head;
  std::vector<std::pair<float**, size_t>> plan;
  auto want = [&](float** p, size_t n) { plan.push_back({p, n}); };
  slots_.resize(size_t(slots));
  for (Slot& s : slots_) {
    s.layers.resize(size_t(layout_.shard.num_layers(cfg_)));
    want(&s.input, R * C), want(&s.dres, R * C);
    for (auto& a : s.layers) {
      want(&a.ln1, R * C), want(&a.ln1_mean, R), want(&a.ln1_rstd, R);
      want(&a.qkv, N * 3 * Cl), want(&a.atty, N * Cl), want(&a.att, att), want(&a.res2, R * C);
      want(&a.ln2, R * C), want(&a.ln2_mean, R), want(&a.ln2_rstd, R);
      want(&a.fch, N * Fl), want(&a.fch_gelu, N * Fl), want(&a.res3, R * C);
    }
    if (head) want(&s.lnf, R * C), want(&s.lnf_mean, R), want(&s.lnf_rstd, R);
  }
  lnf_full_ = logits_ = losses_ = xent_scratch_ = nullptr;
  if (head) want(&logits_, N * Vl), want(&losses_, N), want(&xent_scratch_, 3 * N);
  if (head && sp) want(&lnf_full_, N * C);
  if (sp) want(&gathered_, N * C), want(&grad_work_, N * C);
  want(&dbuf_c_, R * C), want(&datty_, N * Cl), want(&dbuf_3c_, N * 3 * Cl);
  want(&dbuf_4c_, N * Fl), want(&datt_, att);
  std::vector<size_t> offsets;
  for (auto& [p, n] : plan) offsets.push_back(acts_.reserve(n * sizeof(float)));
  acts_.allocate();
  for (size_t i = 0; i < plan.size(); i++) *plan[i].first = acts_.at<float>(offsets[i]);
}

void GPT::init_parameters(uint64_t seed) { layout_.init_parameters(params(), seed); }

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
  const int C = cfg_.d_model, t = tp_.size(), Cl = C / t, NHl = cfg_.n_head / t, Fl = 4 * C / t;
  const int N = B * T, R = int(tp_.local_rows(N));
  Slot& s = slots_[size_t(slot)];
  float* work = gathered_;  // only used with sequence parallelism
  if (layout_.shard.embedding)
    tp::embedding_forward(tp_, s.input, grad_work_, tokens, param(layout_.wte), vocab_, param(layout_.wpe), N, T, C);
  const float* res = s.input;
  for (size_t l = 0; l < s.layers.size(); l++) {
    const BlockParams& p = layout_.blocks[l];
    LayerActs& a = s.layers[l];
    // Attention: res2 = res + attn_proj(attention(qkv(ln1(res))))
    cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, param(p.ln1_w), param(p.ln1_b), 1, R, C);
    const float* x = tp_.gather_rows(a.ln1, work, N, C);
    tp::column_parallel_forward(matmul_, a.qkv, x, param(p.qkv_w), param(p.qkv_b), N, C, 3 * Cl);
    cpu::attention_forward(a.atty, a.att, a.qkv, B, T, Cl, NHl);
    tp::row_parallel_forward(matmul_, tp_, a.res2, tp_.sequence_parallel() ? grad_work_ : a.res2, a.atty,
                             param(p.attn_proj_w), param(p.attn_proj_b), res, N, Cl, C);
    // MLP: res3 = res2 + fc_proj(gelu(fc(ln2(res2))))
    cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, param(p.ln2_w), param(p.ln2_b), 1, R, C);
    x = tp_.gather_rows(a.ln2, work, N, C);
    tp::column_parallel_forward(matmul_, a.fch, x, param(p.fc_w), param(p.fc_b), N, C, Fl);
    cpu::gelu_forward(a.fch_gelu, a.fch, size_t(N) * Fl);
    tp::row_parallel_forward(matmul_, tp_, a.res3, tp_.sequence_parallel() ? grad_work_ : a.res3, a.fch_gelu,
                             param(p.fc_proj_w), param(p.fc_proj_b), a.res2, N, Fl, C);
    res = a.res3;
  }
  if (layout_.shard.head)
    cpu::layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, res, param(layout_.lnf_w), param(layout_.lnf_b), 1, R, C);
}

// LM head tied to the token embedding, column-parallel over the vocabulary:
// logits[N, Vl] = lnf[N, C] @ wte_rows[Vl, C]^T (lnf gathered with sequence
// parallelism).
void GPT::head_logits(Slot& s, int N) {
  const int C = cfg_.d_model;
  const float* lnf = tp_.sequence_parallel() ? tp_.gather_rows(s.lnf, lnf_full_, N, C) : s.lnf;
  tp::column_parallel_forward(matmul_, logits_, lnf, param(layout_.wte), nullptr, N, C, vocab_.rows);
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
  head_logits(slots_[size_t(slot)], N);
  tp::cross_entropy(tp_, losses_, logits_, xent_scratch_, targets, vocab_, N, false, 0.f);
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
  const int C = cfg_.d_model, t = tp_.size(), Cl = C / t, NHl = cfg_.n_head / t, Fl = 4 * C / t;
  const int N = B * T, R = int(tp_.local_rows(N));
  const bool sp = tp_.sequence_parallel();
  Slot& s = slots_[size_t(slot)];
  float* const dres = s.dres;  // gradient of the residual stream; each block updates it in place
  float* const partial = sp ? grad_work_ : dbuf_c_;  // input-gradient partial sums before their reduction
  float loss = 0;
  if (layout_.shard.head) {
    check_targets(targets, N, cfg_.vocab_size);
    head_logits(s, N);
    const int valid = count_targets(targets, N);
    const float dloss = valid > 0 ? loss_scale / float(valid) : 0.f;
    // logits_ becomes d(loss)/d(logits) in place.
    tp::cross_entropy(tp_, losses_, logits_, xent_scratch_, targets, vocab_, N, true, dloss);
    loss = mean_loss(losses_, N, valid);
    // LM head: dlnf = reduce(dlogits @ wte_rows); dwte_rows += dlogits^T @ lnf
    tp::column_parallel_backward(matmul_, tp_, dbuf_c_, partial, grad(layout_.wte), nullptr, logits_,
                                 sp ? lnf_full_ : s.lnf, param(layout_.wte), N, C, vocab_.rows);
    std::memset(dres, 0, size_t(R) * C * sizeof(float));
    cpu::layernorm_backward(dres, grad(layout_.lnf_w), grad(layout_.lnf_b), dbuf_c_, stage_output(slot),
                            param(layout_.lnf_w), s.lnf_mean, s.lnf_rstd, 1, R, C);
    grad_ready(layout_.lnf_w), grad_ready(layout_.lnf_b);
  }
  for (int l = int(s.layers.size()) - 1; l >= 0; l--) {
    const BlockParams& p = layout_.blocks[size_t(l)];
    LayerActs& a = s.layers[size_t(l)];
    const float* res_in = l > 0 ? s.layers[size_t(l - 1)].res3 : s.input;
    // MLP. Sequence parallel: ln2's rows are gathered again (not kept whole),
    // while the row-parallel backward runs.
    auto ln2_ready = tp_.gather_rows_async(a.ln2, gathered_, N, C);
    tp::row_parallel_backward(matmul_, tp_, dbuf_4c_, grad(p.fc_proj_w), grad(p.fc_proj_b), dres, grad_work_,
                              a.fch_gelu, param(p.fc_proj_w), N, Fl, C);
    grad_ready(p.fc_proj_w), grad_ready(p.fc_proj_b);
    cpu::gelu_backward(dbuf_4c_, a.fch, dbuf_4c_, size_t(N) * Fl);
    tp::column_parallel_backward(matmul_, tp_, dbuf_c_, partial, grad(p.fc_w), grad(p.fc_b), dbuf_4c_,
                                 sp ? gathered_ : a.ln2, param(p.fc_w), N, C, Fl, ln2_ready.get());
    grad_ready(p.fc_w), grad_ready(p.fc_b);
    cpu::layernorm_backward(dres, grad(p.ln2_w), grad(p.ln2_b), dbuf_c_, a.res2, param(p.ln2_w), a.ln2_mean,
                            a.ln2_rstd, 1, R, C);
    grad_ready(p.ln2_w), grad_ready(p.ln2_b);
    // Attention.
    auto ln1_ready = tp_.gather_rows_async(a.ln1, gathered_, N, C);
    tp::row_parallel_backward(matmul_, tp_, datty_, grad(p.attn_proj_w), grad(p.attn_proj_b), dres, grad_work_,
                              a.atty, param(p.attn_proj_w), N, Cl, C);
    grad_ready(p.attn_proj_w), grad_ready(p.attn_proj_b);
    cpu::attention_backward(dbuf_3c_, datt_, datty_, a.qkv, a.att, B, T, Cl, NHl);
    tp::column_parallel_backward(matmul_, tp_, dbuf_c_, partial, grad(p.qkv_w), grad(p.qkv_b), dbuf_3c_,
                                 sp ? gathered_ : a.ln1, param(p.qkv_w), N, C, 3 * Cl, ln1_ready.get());
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

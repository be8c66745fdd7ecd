#include "model/gpt.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/encoder.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/residual.h"
#include "kernels/cpu/softmax_xent.h"

namespace loom {

GPT::GPT(const GPTConfig& cfg, int B, int T, float* grad_buffer, int64_t param_floats)
    : cfg_(cfg), layout_(ParamLayout::gpt2(cfg)), maxB_(B), maxT_(T) {
  cfg_.validate();
  LOOM_USER_CHECK(T >= 1 && T <= cfg.seq_len, "sequence length %d is outside [1, model.seq_len=%d]", T,
                  cfg.seq_len);
  LOOM_USER_CHECK(B >= 1, "batch size must be >= 1 (got %d)", B);
  params_.reserve(size_t(std::max(layout_.total, param_floats)) * 4);
  params_.allocate();
  if (grad_buffer) {
    grads_ptr_ = grad_buffer;
  } else {
    grads_.reserve(size_t(layout_.total) * 4);
    grads_.allocate();
    grads_ptr_ = grads_.at<float>(0);
  }

  // Plan every activation first, then make the one allocation.
  const size_t BT = size_t(B) * T, C = cfg.d_model, NH = cfg.n_head, V = cfg.vocab_size;
  std::vector<std::pair<float**, size_t>> plan;
  auto want = [&](float** p, size_t n) { plan.push_back({p, n}); };
  layers_.resize(cfg.n_layer);
  want(&encoded_, BT * C);
  for (auto& a : layers_) {
    want(&a.ln1, BT * C), want(&a.ln1_mean, BT), want(&a.ln1_rstd, BT);
    want(&a.qkv, BT * 3 * C), want(&a.atty, BT * C), want(&a.att, size_t(B) * NH * T * T);
    want(&a.res2, BT * C);
    want(&a.ln2, BT * C), want(&a.ln2_mean, BT), want(&a.ln2_rstd, BT);
    want(&a.fch, BT * 4 * C), want(&a.fch_gelu, BT * 4 * C), want(&a.res3, BT * C);
  }
  want(&lnf_, BT * C), want(&lnf_mean_, BT), want(&lnf_rstd_, BT);
  want(&logits_, BT * V), want(&losses_, BT);
  want(&dres_, BT * C), want(&dbuf_c_, BT * C), want(&dbuf_3c_, BT * 3 * C), want(&dbuf_4c_, BT * 4 * C);
  want(&datt_, size_t(B) * NH * T * T);
  std::vector<size_t> offsets;
  for (auto& [p, n] : plan) offsets.push_back(acts_.reserve(n * sizeof(float)));
  acts_.allocate();
  for (size_t i = 0; i < plan.size(); i++) *plan[i].first = acts_.at<float>(offsets[i]);
}

void GPT::init_parameters(uint64_t seed) {
  for (const auto& p : layout_.params) {
    float* dst = params() + p.offset;
    switch (p.init) {
      case Init::Zeros: std::fill(dst, dst + p.numel, 0.f); break;
      case Init::Ones: std::fill(dst, dst + p.numel, 1.f); break;
      case Init::Normal:
        rng_fill_normal(dst, p.numel, seed, stable_hash(p.name.c_str()), 0, 0.f, p.init_std);
        break;
    }
  }
}

void GPT::zero_grads() { std::memset(grads(), 0, size_t(layout_.total) * sizeof(float)); }

void GPT::run_forward(const int32_t* tokens, int B, int T) {
  LOOM_CHECK(B <= maxB_ && T <= maxT_, "batch %dx%d exceeds the planned %dx%d", B, T, maxB_, maxT_);
  const int C = cfg_.d_model, NH = cfg_.n_head, V = cfg_.vocab_size, BT = B * T;
  cpu::encoder_forward(encoded_, tokens, param(layout_.wte), param(layout_.wpe), B, T, C);
  const float* res = encoded_;
  for (int l = 0; l < cfg_.n_layer; l++) {
    const BlockParams& p = layout_.blocks[l];
    LayerActs& a = layers_[l];
    cpu::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, res, param(p.ln1_w), param(p.ln1_b), B, T, C);
    cpu::matmul_forward(matmul_, a.qkv, a.ln1, param(p.qkv_w), param(p.qkv_b), BT, C, 3 * C);
    cpu::attention_forward(a.atty, a.att, a.qkv, B, T, C, NH);
    cpu::matmul_forward(matmul_, a.res2, a.atty, param(p.attn_proj_w), param(p.attn_proj_b), BT, C, C);
    cpu::residual_forward(a.res2, a.res2, res, size_t(BT) * C);
    cpu::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, param(p.ln2_w), param(p.ln2_b), B, T, C);
    cpu::matmul_forward(matmul_, a.fch, a.ln2, param(p.fc_w), param(p.fc_b), BT, C, 4 * C);
    cpu::gelu_forward(a.fch_gelu, a.fch, size_t(BT) * 4 * C);
    cpu::matmul_forward(matmul_, a.res3, a.fch_gelu, param(p.fc_proj_w), param(p.fc_proj_b), BT, 4 * C, C);
    cpu::residual_forward(a.res3, a.res3, a.res2, size_t(BT) * C);
    res = a.res3;
  }
  cpu::layernorm_forward(lnf_, lnf_mean_, lnf_rstd_, res, param(layout_.lnf_w), param(layout_.lnf_b), B, T, C);
  // LM head tied to the token embedding: logits[BT,V] = lnf[BT,C] @ wte[V,C]^T
  cpu::matmul_forward(matmul_, logits_, lnf_, param(layout_.wte), nullptr, BT, C, V);
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

float GPT::forward(const int32_t* tokens, const int32_t* targets, int B, int T) {
  run_forward(tokens, B, T);
  const int BT = B * T;
  cpu::softmax_xent_forward(losses_, logits_, targets, BT, cfg_.vocab_size);
  return mean_loss(losses_, BT, count_targets(targets, BT));
}

float GPT::forward_backward(const int32_t* tokens, const int32_t* targets, int B, int T, float loss_scale) {
  run_forward(tokens, B, T);
  const int BT = B * T;
  int valid = count_targets(targets, BT);
  float dloss = valid > 0 ? loss_scale / float(valid) : 0.f;
  // logits_ becomes d(loss)/d(logits) in place.
  cpu::softmax_xent_fused(losses_, logits_, targets, dloss, BT, cfg_.vocab_size);
  run_backward(tokens, B, T);
  return mean_loss(losses_, BT, valid);
}

void GPT::run_backward(const int32_t* tokens, int B, int T) {
  const int C = cfg_.d_model, NH = cfg_.n_head, V = cfg_.vocab_size, BT = B * T;
  const float* dlogits = logits_;
  // LM head: dlnf = dlogits @ wte; dwte += dlogits^T @ lnf
  cpu::matmul_backward(matmul_, dbuf_c_, grad(layout_.wte), nullptr, dlogits, lnf_, param(layout_.wte), BT, C, V);
  std::memset(dres_, 0, size_t(BT) * C * sizeof(float));
  const float* last = cfg_.n_layer > 0 ? layers_.back().res3 : encoded_;
  cpu::layernorm_backward(dres_, grad(layout_.lnf_w), grad(layout_.lnf_b), dbuf_c_, last, param(layout_.lnf_w),
                          lnf_mean_, lnf_rstd_, B, T, C);
  grad_ready(layout_.lnf_w), grad_ready(layout_.lnf_b);
  // dres_ holds the gradient of the residual stream; each block updates it in place.
  for (int l = cfg_.n_layer - 1; l >= 0; l--) {
    const BlockParams& p = layout_.blocks[l];
    LayerActs& a = layers_[l];
    const float* res_in = l > 0 ? layers_[l - 1].res3 : encoded_;
    // MLP: res3 = res2 + fc_proj(gelu(fc(ln2(res2))))
    cpu::matmul_backward(matmul_, dbuf_4c_, grad(p.fc_proj_w), grad(p.fc_proj_b), dres_, a.fch_gelu,
                         param(p.fc_proj_w), BT, 4 * C, C);
    grad_ready(p.fc_proj_w), grad_ready(p.fc_proj_b);
    cpu::gelu_backward(dbuf_4c_, a.fch, dbuf_4c_, size_t(BT) * 4 * C);
    cpu::matmul_backward(matmul_, dbuf_c_, grad(p.fc_w), grad(p.fc_b), dbuf_4c_, a.ln2, param(p.fc_w), BT, C,
                         4 * C);
    grad_ready(p.fc_w), grad_ready(p.fc_b);
    cpu::layernorm_backward(dres_, grad(p.ln2_w), grad(p.ln2_b), dbuf_c_, a.res2, param(p.ln2_w), a.ln2_mean,
                            a.ln2_rstd, B, T, C);
    grad_ready(p.ln2_w), grad_ready(p.ln2_b);
    // Attention: res2 = res_in + attn_proj(attention(qkv(ln1(res_in))))
    cpu::matmul_backward(matmul_, dbuf_c_, grad(p.attn_proj_w), grad(p.attn_proj_b), dres_, a.atty,
                         param(p.attn_proj_w), BT, C, C);
    grad_ready(p.attn_proj_w), grad_ready(p.attn_proj_b);
    cpu::attention_backward(dbuf_3c_, datt_, dbuf_c_, a.qkv, a.att, B, T, C, NH);
    cpu::matmul_backward(matmul_, dbuf_c_, grad(p.qkv_w), grad(p.qkv_b), dbuf_3c_, a.ln1, param(p.qkv_w), BT, C,
                         3 * C);
    grad_ready(p.qkv_w), grad_ready(p.qkv_b);
    cpu::layernorm_backward(dres_, grad(p.ln1_w), grad(p.ln1_b), dbuf_c_, res_in, param(p.ln1_w), a.ln1_mean,
                            a.ln1_rstd, B, T, C);
    grad_ready(p.ln1_w), grad_ready(p.ln1_b);
  }
  // wte's gradient was first written by the LM head above; this is its last write.
  cpu::encoder_backward(grad(layout_.wte), grad(layout_.wpe), dres_, tokens, B, T, C);
  grad_ready(layout_.wpe), grad_ready(layout_.wte);
}

}  // namespace loom

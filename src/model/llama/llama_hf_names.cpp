// LLaMA in Hugging Face's names (LlamaForCausalLM, Qwen2ForCausalLM's
// q/k/v biases, MixtralForCausalLM's and Qwen2MoeForCausalLM's experts): nn.Linear is [out, in]
// as loom's; loom's fused qkv_proj and gate_up_proj are HF's q/k/v_proj and
// gate/up_proj stacked by rows. loom applies rotary embeddings with HF's
// rotate-half convention (feature i paired with i + head_dim/2), so the q
// and k rows are already in HF's order: no per-head permutation (Meta's
// interleaved original checkpoints need one; HF's do not).
#include "model/hf_names.h"

namespace loom {

bool hf_qwen2_moe(const ModelConfig& cfg) {
  return cfg.is_moe() && (cfg.qkv_bias || cfg.moe_shared_ffn > 0 || cfg.moe_every > 1 || !cfg.moe_renormalize);
}

std::vector<HfTensorMap> llama_hf_tensor_map(const ModelConfig& cfg) {
  const int64_t C = cfg.d_model, V = cfg.vocab_size, F = cfg.ffn(), hd = cfg.head_dim();
  const int64_t q_rows = int64_t(cfg.n_head) * hd, kv_rows = int64_t(cfg.kv_heads()) * hd;
  std::vector<HfTensorMap> m;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) { m.push_back({name, shape, {{name, shape[0]}}}); };
  add("model.embed_tokens.weight", {V, C});
  for (int l = 0; l < cfg.n_layer; l++) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {C});
    m.push_back({p + "self_attn.qkv_proj.weight",
                 {cfg.qkv_rows(), C},
                 {{p + "self_attn.q_proj.weight", q_rows},
                  {p + "self_attn.k_proj.weight", kv_rows},
                  {p + "self_attn.v_proj.weight", kv_rows}}});
    if (cfg.qkv_bias)
      m.push_back({p + "self_attn.qkv_proj.bias",
                   {cfg.qkv_rows()},
                   {{p + "self_attn.q_proj.bias", q_rows},
                    {p + "self_attn.k_proj.bias", kv_rows},
                    {p + "self_attn.v_proj.bias", kv_rows}}});
    add(p + "self_attn.o_proj.weight", {C, q_rows});
    add(p + "post_attention_layernorm.weight", {C});
    if (cfg.moe_block(l) && hf_qwen2_moe(cfg)) {
      // Qwen2MoeForCausalLM: under mlp., the router, per expert gate/up/down_proj,
      // the shared expert's and its gate.
      const int64_t E = cfg.n_experts, Fe = cfg.expert_ffn(), Fs = cfg.moe_shared_ffn;
      const std::string moe = p + "block_sparse_moe.", mlp = p + "mlp.";
      m.push_back({moe + "gate.weight", {E, C}, {{mlp + "gate.weight", E}}});
      HfTensorMap gate_up{moe + "experts.gate_up.weight", {E * 2 * Fe, C}, {}}, down{moe + "experts.down.weight", {E * C, Fe}, {}};
      for (int64_t e = 0; e < E; e++) {
        const std::string ex = mlp + "experts." + std::to_string(e) + ".";
        gate_up.parts.push_back({ex + "gate_proj.weight", Fe}), gate_up.parts.push_back({ex + "up_proj.weight", Fe});
        down.parts.push_back({ex + "down_proj.weight", C});
      }
      m.push_back(std::move(gate_up)), m.push_back(std::move(down));
      if (Fs > 0) {
        m.push_back({moe + "shared_expert.gate_up_proj.weight",
                     {2 * Fs, C},
                     {{mlp + "shared_expert.gate_proj.weight", Fs}, {mlp + "shared_expert.up_proj.weight", Fs}}});
        m.push_back({moe + "shared_expert.down_proj.weight", {C, Fs}, {{mlp + "shared_expert.down_proj.weight", C}}});
        m.push_back({moe + "shared_expert_gate.weight", {1, C}, {{mlp + "shared_expert_gate.weight", 1}}});
      }
      continue;
    }
    if (cfg.moe_block(l)) {
      // MixtralForCausalLM: the router, and per expert w1 (gate), w3 (up), w2 (down).
      const int64_t E = cfg.n_experts, Fe = cfg.expert_ffn();
      const std::string moe = p + "block_sparse_moe.";
      add(moe + "gate.weight", {E, C});
      HfTensorMap gate_up{moe + "experts.gate_up.weight", {E * 2 * Fe, C}, {}}, down{moe + "experts.down.weight", {E * C, Fe}, {}};
      for (int64_t e = 0; e < E; e++) {
        const std::string ex = moe + "experts." + std::to_string(e) + ".";
        gate_up.parts.push_back({ex + "w1.weight", Fe}), gate_up.parts.push_back({ex + "w3.weight", Fe});
        down.parts.push_back({ex + "w2.weight", C});
      }
      m.push_back(std::move(gate_up)), m.push_back(std::move(down));
      continue;
    }
    m.push_back({p + "mlp.gate_up_proj.weight",
                 {2 * F, C},
                 {{p + "mlp.gate_proj.weight", F}, {p + "mlp.up_proj.weight", F}}});
    add(p + "mlp.down_proj.weight", {C, F});
  }
  add("model.norm.weight", {C});
  if (!cfg.tied()) add("lm_head.weight", {V, C});
  return m;
}

}  // namespace loom

// The model's shape: which family (GPT-2 or LLaMA) and its sizes.
//
// GPT-2: LayerNorm, GELU MLP of width 4 x d_model, learned positions, biases,
// the LM head tied to the token embedding. LLaMA: RMSNorm, SwiGLU MLP,
// rotary positions (Hugging Face's rotate-half convention), grouped-query
// attention (n_kv_head key/value heads, each shared by n_head / n_kv_head
// query heads), no biases (but q/k/v biases with qkv_bias, as Qwen2 has),
// untied head unless tie_embeddings; rotary frequencies as Llama 3.1
// rescales them with rope_scaling = llama3.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/lora/lora_config.h"

namespace loom {

enum class ModelFamily { gpt2, llama };
const char* model_family_name(ModelFamily f);
// "gpt2" / "llama"; nullopt for anything else.
std::optional<ModelFamily> parse_model_family(const std::string& name);

// Which attention core the blocks run (model/attention.h): auto picks tiled
// from kTiledAttentionFrom tokens per sequence on, where it is the faster
// (bench/attention_bench), and always under context parallelism.
enum class AttentionKind { auto_, tiled, materialized };
const char* attention_kind_name(AttentionKind k);  // "auto" / "tiled" / "materialized"
std::optional<AttentionKind> parse_attention_kind(const std::string& name);
constexpr int kTiledAttentionFrom = 1024;

// Rotary frequency scaling (LLaMA). llama3 (Llama 3.1 and later, Hugging
// Face's rope_type "llama3"): wavelengths above original_max_positions /
// low_freq_factor are divided by factor, those below original_max_positions
// / high_freq_factor kept, the band between blended smoothly.
struct RopeScaling {
  enum class Kind { none, llama3 } kind = Kind::none;
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int original_max_positions = 8192;
  bool operator==(const RopeScaling&) const = default;
};
const char* rope_scaling_name(RopeScaling::Kind k);  // "none" / "llama3"

// How a mixture of experts keeps its experts loaded (model/moe/router_state.h):
// aux_free: a per-expert bias on the selection scores, moved after each step
// from the global batch's integer token counts (DeepSeek-V3); sequence: an
// auxiliary loss over each sequence's own expert fractions and mean
// probabilities; switch: the Switch Transformer / Mixtral loss over a
// micro-batch's tokens of every MoE layer together (transformers'
// load_balancing_loss_func; it depends on how the batch is split); none.
enum class MoeBalance { aux_free, sequence, switch_, none };
const char* moe_balance_name(MoeBalance b);  // "aux_free" / "sequence" / "switch" / "none"
std::optional<MoeBalance> parse_moe_balance(const std::string& name);
std::optional<RopeScaling::Kind> parse_rope_scaling(const std::string& name);

// ModelConfig{vocab_size, n_layer, n_head, d_model, seq_len} is a GPT-2.
struct ModelConfig {
  int vocab_size = 8192;  // the default SentencePiece tokenizer of `loom prepare`
  int n_layer = 6;
  int n_head = 8;
  int d_model = 256;
  int seq_len = 256;  // maximum sequence length (GPT-2: rows of the position table)
  ModelFamily family = ModelFamily::gpt2;
  // LLaMA's fields (GPT-2 accepts only their GPT-2 values: 0 / -1 = unset).
  int n_kv_head = 0;         // 0: n_head (multi-head attention)
  int ffn_hidden = 0;        // MLP width; 0: GPT-2 4 x d_model, LLaMA the multiple_of rule
  int ffn_multiple_of = 256; // LLaMA: ffn = multiple_of x ceil((8/3 d_model) / multiple_of)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  int tie_embeddings = -1;  // -1: the family's default (GPT-2 tied, LLaMA untied); 0 / 1
  bool qkv_bias = false;    // LLaMA: biases on the q/k/v projections (Qwen2); GPT-2 always has its own
  RopeScaling rope_scaling;
  AttentionKind attention = AttentionKind::auto_;  // a kernel choice: same parameters and results either way
  // LoRA adapters ([lora]): their tensors join the layout, the base is frozen.
  LoraConfig lora;
  // Mixture of experts (model.family = "mixtral": LLaMA's attention, a
  // dropless top-k MoE MLP, model/moe/): n_experts SwiGLU experts of width
  // moe_ffn_hidden (0: ffn()), top_k per token, in every moe_every-th block
  // (block l when (l + 1) % moe_every == 0; the others dense). 0: dense.
  int n_experts = 0;
  int top_k = 2;
  int moe_ffn_hidden = 0;
  int moe_every = 1;
  // A shared SwiGLU expert of this width every token of an MoE block passes
  // through beside its routed ones, its output scaled by sigmoid(x . w_gate)
  // (Qwen2-MoE's shared_expert and shared_expert_gate); 0: none.
  int moe_shared_ffn = 0;
  MoeBalance moe_balance = MoeBalance::aux_free;
  double moe_bias_rate = 1e-3;  // aux_free: the bias's step per update
  double moe_aux_coef = 1e-3;   // sequence / switch: the auxiliary loss's weight
  double moe_z_coef = 0.0;      // the router z-loss's weight (0: off)
  // The router's scores: softmax over the experts (Mixtral) or each
  // expert's sigmoid (DeepSeek-V3); the chosen scores renormalised either way.
  bool moe_sigmoid = false;
  // The chosen experts' scores renormalised to sum 1 as their combine
  // weights (Mixtral; Qwen2-MoE's norm_topk_prob), or used as they are.
  bool moe_renormalize = true;
  bool is_moe() const { return n_experts > 0; }
  bool moe_block(int layer) const { return is_moe() && (layer + 1) % moe_every == 0; }
  int expert_ffn() const { return moe_ffn_hidden > 0 ? moe_ffn_hidden : ffn(); }
  // "gpt2", "llama" or "mixtral" (LLaMA with experts).
  const char* family_name() const { return is_moe() ? "mixtral" : model_family_name(family); }

  int head_dim() const { return d_model / n_head; }
  int kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int ffn() const;
  bool tied() const { return tie_embeddings < 0 ? family == ModelFamily::gpt2 : tie_embeddings == 1; }
  // Whether micro-batches of T tokens per sequence run the tiled attention
  // (cp: the context-parallel group's size, which needs it).
  bool tiled_attention(int T, int cp = 1) const {
    return cp > 1 || attention == AttentionKind::tiled ||
           (attention == AttentionKind::auto_ && T >= kTiledAttentionFrom);
  }
  bool is_llama() const { return family == ModelFamily::llama; }
  // Output rows of the fused query/key/value projection: (n_head + 2 n_kv_head) x head_dim.
  int64_t qkv_rows() const { return int64_t(n_head + 2 * kv_heads()) * head_dim(); }
  // The rotary inverse frequencies, one per pair of a head's features
  // (theta^(-2i/hd), rescaled as rope_scaling says).
  std::vector<double> rope_inverse_frequencies() const;
  // Checks the fields; throws UserError naming the field ("model.n_head").
  void validate() const;
  // Number of parameters (embeddings included, a tied LM head counted once;
  // every expert of a mixture of experts).
  int64_t num_parameters() const;
  // Training FLOPs per token: 6 N + 12 L C T (PaLM / nanoGPT estimate; N
  // without the tables that are only looked up: GPT-2's positions, an untied
  // token embedding). With LoRA 4 N + 6 N_adapters + 12 L C T: no weight
  // gradient of the frozen base. A mixture of experts counts the top_k
  // experts a token runs (and the router), not all of them.
  double train_flops_per_token(int T) const;
};

}  // namespace loom

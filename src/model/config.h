// GPT-2 model shape.
#pragma once

#include <cstdint>

namespace loom {

struct GPTConfig {
  int vocab_size = 8192;  // the default SentencePiece tokenizer of `loom prepare`
  int n_layer = 6;
  int n_head = 8;
  int d_model = 256;
  int seq_len = 256;  // maximum sequence length (rows of the position table)

  int head_dim() const { return d_model / n_head; }
  // Checks the fields; throws UserError naming the field ("model.n_head").
  void validate() const;
  // Number of parameters (embeddings included, tied LM head counted once).
  int64_t num_parameters() const;
  // Training FLOPs per token: 6 N + 12 L C T (PaLM / nanoGPT estimate; N
  // without the position table since it does no multiply-adds).
  double train_flops_per_token(int T) const;
};

}  // namespace loom

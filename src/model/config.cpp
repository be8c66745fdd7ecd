#include "model/config.h"

#include "core/check.h"

namespace loom {

void GPTConfig::validate() const {
  auto positive = [](int v, const char* field) {
    LOOM_USER_CHECK(v > 0, "config field '%s' must be > 0 (got %d)", field, v);
  };
  positive(vocab_size, "model.vocab_size");
  positive(n_layer, "model.n_layer");
  positive(n_head, "model.n_head");
  positive(d_model, "model.d_model");
  positive(seq_len, "model.seq_len");
  LOOM_USER_CHECK(d_model % n_head == 0,
                  "config field 'model.d_model' (%d) must be divisible by 'model.n_head' (%d)", d_model, n_head);
  // Sanity bounds: far beyond any model this code can hold, and they keep
  // the layout and size arithmetic below from overflowing.
  LOOM_USER_CHECK(n_layer <= 4096, "config field 'model.n_layer' is too large (%d > 4096)", n_layer);
  LOOM_USER_CHECK(d_model <= 65536, "config field 'model.d_model' is too large (%d > 65536)", d_model);
  LOOM_USER_CHECK(seq_len <= (1 << 20), "config field 'model.seq_len' is too large (%d > 1048576)", seq_len);
  // int32 tokens and int offsets inside kernels.
  LOOM_USER_CHECK(vocab_size <= (1 << 30), "config field 'model.vocab_size' is too large (%d)", vocab_size);
  LOOM_USER_CHECK(int64_t(seq_len) * d_model <= (int64_t(1) << 31),
                  "config fields 'model.seq_len' x 'model.d_model' are too large");
}

int64_t GPTConfig::num_parameters() const {
  int64_t C = d_model, L = n_layer;
  int64_t per_layer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (4 * C * C + 4 * C) + (4 * C * C + C);
  return int64_t(vocab_size) * C + int64_t(seq_len) * C + L * per_layer + 2 * C;
}

double GPTConfig::train_flops_per_token(int T) const {
  double n = double(num_parameters() - int64_t(seq_len) * d_model);
  return 6.0 * n + 12.0 * n_layer * d_model * double(T);
}

}  // namespace loom

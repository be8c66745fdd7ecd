// Which base model a LoRA run's adapters belong to, without hashing the
// base whole: a run's checkpoints hold only the adapters (and their
// optimizer state), so a resume must start from the same base.
//
// A Hugging Face folder's fingerprint is the sha256 of its config.json and,
// for each safetensors file (by name), its size, its header (every
// tensor's name, dtype, shape and offsets) and the first and last 64 KiB
// of its data: a different checkpoint (other weights, other shapes, a
// re-saved dtype) changes it, and it reads well under a megabyte per file
// however large the model. A base loom initialised itself is identified by
// its seed and model fields.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace loom {

// Throws UserError naming the folder or file if it cannot be read.
std::string hf_folder_fingerprint(const std::string& dir);

// The base of a run: "hf sha256:<fingerprint>" with train.init_from (the
// folder may move), else "init seed N" (its shape is checked with the model
// fields).
std::string lora_base_identity(const std::string& init_from, int64_t seed);

}  // namespace loom

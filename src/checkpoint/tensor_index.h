// The manifest's index of tensor pieces, and its cross-check against the
// rank files.
//
// Each rank file describes its own pieces (its "loom.pieces" metadata); the
// manifest's "tensors" lists them all in one place for people and tools:
//   name -> {global_shape, pieces: [{file, key, offset, shape[, flat_range]}]}
// A checkpoint is trusted only when the two agree: same tensors, same global
// shapes, same pieces in the same files.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"

namespace loom {

// The index of the pieces that `files` (in `dir`) hold, in file order.
nlohmann::json tensor_index(const std::string& dir, const std::vector<FileRecord>& files);

// Throws UserError naming `manifest_path`, the tensor and what differs when
// `recorded` (the manifest's "tensors") is not `actual` (tensor_index of the files).
void check_tensor_index(const nlohmann::json& recorded, const nlohmann::json& actual,
                        const std::string& manifest_path);

}  // namespace loom

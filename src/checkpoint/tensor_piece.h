// A piece of a global tensor, as one rank holds it.
//
// A piece is a box of the global tensor (an offset and a shape per
// dimension), e.g. rows [64, 128) of a [256, 64] matrix that a
// tensor-parallel rank owns, or columns [32, 64) of a [64, 128] one (offset
// {0, 32}). Of that box, a rank may hold only a contiguous row-major range
// [flat_begin, flat_end) — what a ZeRO shard of a flat buffer cuts out of a
// tensor. Each piece is one safetensors entry, keyed by piece_key(); the
// file's __metadata__["loom.pieces"] lists every piece's place, so a rank
// file describes itself.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"

namespace loom {

// What a writer hands over (data stays the caller's).
struct CheckpointPiece {
  std::string name;                   // global name, e.g. "h.0.attn.c_attn.weight"
  std::vector<int64_t> global_shape;  // e.g. {768, 256}
  std::vector<int64_t> offset;        // of the box in the global tensor; empty = all zeros
  std::vector<int64_t> shape;         // the box; empty = global_shape (the whole tensor)
  int64_t flat_begin = 0;             // the stored part of the box, row-major
  int64_t flat_end = -1;              // -1 = to the end of the box
  const float* data = nullptr;        // flat_end - flat_begin floats
  StDType store = StDType::F32;       // on disk: F32, BF16 or F16
};

// Where a piece sits, with every default filled in.
struct PiecePlace {
  std::string name;
  std::vector<int64_t> global_shape, offset, shape;
  int64_t flat_begin = 0, flat_end = 0;

  bool whole() const;     // the entire global tensor
  bool full_box() const;  // the entire box (no flat cut)
  int64_t count() const { return flat_end - flat_begin; }
  bool same_place(const PiecePlace& o) const;
};

// Fills defaults and checks that the box lies inside the global tensor and
// the range inside the box; `origin` names the writer in messages.
PiecePlace place_of(const CheckpointPiece& p, const std::string& origin);
// The safetensors entry name: "NAME" for a whole tensor, else
// "NAME@o0,o1,..." (offset) and "#begin-end" when only a range is held.
std::string piece_key(const PiecePlace& p);

// "[3,0]"
std::string dims_text(const std::vector<int64_t>& v);

nlohmann::json place_to_json(const PiecePlace& p);
// Throws UserError naming `origin` when the JSON does not describe a valid piece.
PiecePlace place_from_json(const nlohmann::json& j, const std::string& origin);

// Writes one rank's pieces as a safetensors file (atomically; hashed while
// written). `metadata` goes into __metadata__ beside "loom.pieces".
// `half_written`: see write_safetensors.
WrittenFile write_piece_file(const std::string& path, const std::vector<CheckpointPiece>& pieces,
                             std::map<std::string, std::string> metadata = {},
                             const std::function<void()>& half_written = {});

// The places a piece file lists, each checked against its safetensors entry.
std::vector<PiecePlace> pieces_in_file(const SafetensorsFile& file);

}  // namespace loom

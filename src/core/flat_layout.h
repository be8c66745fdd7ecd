// FlatLayout: tensors as ranges of one flat fp32 buffer, with the one property
// an optimizer needs (weight decay) and nothing of the model they belong to.
//
// The model describes its parameters this way (ParamLayout::flat()), so that
// optim/ and parallel/ work on the flat buffers without including model/.
// ZeRO shards are lists of FlatRange that may cut through tensors;
// pieces_of() intersects them with the tensors.
#pragma once

#include <cstdint>
#include <vector>

namespace loom {

struct FlatTensor {
  int64_t offset = 0;  // floats from the buffer start
  int64_t numel = 0;
  bool weight_decay = false;
  // Model-parallel ranks holding an identical copy (a norm replicated over
  // tensor parallelism): the global norm counts each copy 1 / copies.
  int copies = 1;
  // Read only by matrix products (ParamSpec::products_only).
  bool products_only = false;
};

struct FlatLayout {
  std::vector<FlatTensor> tensors;  // in buffer order
  int64_t total = 0;                // floats, alignment padding included
};

// [begin, end) in floats.
struct FlatRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// The part of one tensor inside one owned range, and where that part sits
// once the owned ranges are packed end to end (a shard buffer).
struct FlatPiece {
  int tensor = 0;
  int64_t offset = 0;  // in the flat buffer
  int64_t packed = 0;  // in the packed owned elements
  int64_t numel = 0;
};

// Every tensor element inside `owned` (sorted, disjoint ranges), as pieces in
// buffer order; padding between tensors belongs to no piece.
std::vector<FlatPiece> pieces_of(const FlatLayout& layout, const std::vector<FlatRange>& owned);

// Floats in all of `ranges`.
int64_t total_size(const std::vector<FlatRange>& ranges);

}  // namespace loom

// A rank's flat buffer (parameters, fp32 master weights, AdamW moments: all
// laid out by the model's ParamLayout) as checkpoint pieces.
//
// Each local tensor is one or more rectangles of its global tensor
// (ParamLayout::pieces: e.g. q, k, v row blocks of the fused QKV under tensor
// parallelism; padding rows belong to none). A ZeRO shard is a range
// [begin, end) of the buffer that may cut through tensors: the parts of the
// rectangles inside it become pieces with a flat range.
#pragma once

#include <string>
#include <vector>

#include "checkpoint/tensor_piece.h"
#include "model/param_layout.h"

namespace loom {

// data points at buffer element `begin`; end = -1: layout.total. Names are
// name_prefix + the global name ("" for parameters, e.g. "adam.m." for moments).
std::vector<CheckpointPiece> layout_pieces(const ParamLayout& layout, const float* data,
                                           const std::string& name_prefix = "", int64_t begin = 0, int64_t end = -1,
                                           StDType store = StDType::F32);

// The reverse, for resuming under any layout: fills every tensor of `layout`
// in buffer[begin, end) (data points at element begin) from the checkpoint's
// global tensors named name_prefix + global name; padding is left as it is.
// absent_ok: a tensor `tensors` does not have is left as it is too.
class GlobalTensors;
void fill_from_checkpoint(const GlobalTensors& tensors, const ParamLayout& layout, float* data,
                          const std::string& name_prefix = "", int64_t begin = 0, int64_t end = -1,
                          bool absent_ok = false);

}  // namespace loom

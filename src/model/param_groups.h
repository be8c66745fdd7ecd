// Parameter groups: which of a model's tensors are trained together, over
// which ranks, and which are frozen.
//
// A group is a set of tensors with a buffer of its own (train/param_group.h
// gives it its bucket plan, gradient buffer, reducer, ZeRO stage and
// optimizer state). A trained group's gradients are reduced and ZeRO-sharded
// over its communicator; a frozen group has parameters only (no gradients,
// no master copy, no moments), and under ZeRO-3 it is still sharded and
// gathered like trained parameters. Every tensor belongs to exactly one
// group. Today's model is one trained group over the data group; train.freeze
// moves the tensors it names to a frozen one; expert parallelism puts the
// experts in groups reduced over the smaller expert-data communicator.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/param_layout.h"
#include "parallel/grid/parallel_grid.h"

namespace loom {

struct ParamGroupSpec {
  std::string name;  // "trained", "frozen": named in the run log and in errors
  bool frozen = false;
  // The ranks its gradients are reduced and its ZeRO shards spread over
  // (a frozen group: its ZeRO-3 shards). Must hold the same tensors on
  // every member: a group of the data group's ranks.
  GroupKind ranks = GroupKind::data;
  // Whether it holds the tensor with this global name.
  std::function<bool(const std::string& name)> holds;
  // Frozen, in 16-bit compute below ZeRO-3: the tensors only products read
  // are kept in the compute type alone (2 bytes a parameter, not 4 + 2), as
  // LoRA's base is; the group is then neither checkpointed nor read back
  // whole in fp32 except by widening.
  bool compute_type_storage = false;
};

// The run's groups: the tensors train.freeze's patterns match are frozen,
// the rest trained over the data group; with expert parallelism (ep > 1)
// the experts' tensors are groups of their own ("experts", "frozen
// experts") over the expert-data group. Groups no tensor of a model falls in
// are left out.
std::vector<ParamGroupSpec> param_groups(const ModelConfig& model, const std::vector<std::string>& freeze, int ep = 1);
// A routed expert's stacked tensor (spread over ep ranks).
bool is_expert_tensor(const std::string& name);

// Per tensor of `layout`: the index of the one group holding it. A tensor
// held by no group or by two is an internal error naming it.
std::vector<int> group_of_tensors(const std::vector<ParamGroupSpec>& groups, const ParamLayout& layout);

// Shell-style pattern (fnmatch: *, ?, [0-5]) against a global tensor name.
bool tensor_name_matches(const std::string& pattern, const std::string& name);

// What is wrong with `freeze` for `model` ("" if nothing): a pattern that
// matches no tensor, or every tensor frozen.
std::string freeze_problem(const ModelConfig& model, const std::vector<std::string>& freeze);

// Parameters (global elements) the patterns freeze, and the model's total.
struct FrozenShare {
  int64_t frozen = 0, total = 0;
  int tensors = 0;
};
FrozenShare frozen_share(const ModelConfig& model, const std::vector<std::string>& freeze);

}  // namespace loom

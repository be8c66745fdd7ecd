// What a stage's gradients need between backward and the update beyond each
// group's own bucketed reduction: the sums that cross other groups of ranks
// (a table tied across pipeline stages; sequence-parallel partial
// gradients over tp), and what combines every group (the found-inf check,
// the global norm).
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"
#include "model/param_layout.h"
#include "model/stage_module.h"
#include "train/chunk_params.h"
#include "train/param_group.h"

namespace loom {

using ParamGroups = std::vector<std::unique_ptr<ParamGroup>>;

// A tied embedding (GPT-2's token table): the first virtual stage's
// embedding and the last one's head hold copies, whose gradients are summed
// over `embedding` (the two stages), or here when both sit on this stage
// (ZB-V's V); then each copy is reported ready to its group. A frozen table
// has no gradient: nothing to sum (frozen by name, so on both stages).
void sum_tied_copies(const std::vector<std::unique_ptr<StageModule>>& chunks,
                     const std::vector<std::vector<GroupPlace>>& places, ParamGroups& groups,
                     Communicator& embedding);

// With sequence parallelism each tp rank's norm (and position-table)
// gradients cover its own rows only; a LoRA factor kept whole beside a split
// one has a partial gradient on each tp rank in any case (tp_partial). The sum over tp commutes with the sum
// over dp, so it runs once per step on what this rank holds of each trained
// group after its reduction (all of it, or its ZeRO shard: the same ranges
// on every tp rank, whose layouts have equal sizes).
void sum_sequence_partial(ParamGroups& groups, const std::vector<ParamLayout>& layouts,
                          const std::vector<ModelShard>& shards, Communicator& tp);

// Mixed precision: divides what each trained group holds by the loss scale
// and checks it for inf/NaN; true when any rank of `world` found one
// (inject: this rank pretends it did, for tests).
bool unscale_and_find_inf(Backend& ops, ParamGroups& groups, float inv_scale, bool inject, Communicator& world);

// The L2 norm of the whole gradient: the square root of every group's
// summed squares, summed over `model` (the ranks holding the replica); the
// expert groups' first summed over `ep` (each of its ranks holds E / ep experts).
double global_grad_norm(ParamGroups& groups, Communicator& model, Communicator& ep);

}  // namespace loom

#include "train/replica.h"

#include <algorithm>

namespace loom {

namespace {

ModelShard tensor_parallel_shard(const RunConfig& cfg, const ParallelContext& ctx) {
  ModelShard shard;
  shard.tp_rank = ctx.coord().tp;
  shard.tp_size = ctx.grid().tp();
  shard.sequence_parallel = cfg.parallel.sequence_parallel && shard.tp_size > 1;
  return shard;
}

}  // namespace

Replica::Replica(const RunConfig& cfg, const ParallelContext& ctx, int micro_batch, int accumulation)
    : ctx_(ctx),
      zero_(cfg.parallel.zero),
      micro_batch_(micro_batch),
      loss_scale_(1.0f / float(ctx.dp().size() * accumulation)),
      shard_(tensor_parallel_shard(cfg, ctx)),
      plan_(ParamLayout::gpt2(cfg.model, shard_).flat(), double(cfg.parallel.bucket_mb) * (1 << 20),
            ctx.dp().size()),
      grads_(plan_.padded_total()) {
  model_ = std::make_unique<GPT>(cfg.model, shard_, TensorParallel(&ctx.tp(), shard_.sequence_parallel), micro_batch,
                                 cfg.model.seq_len, grads_.data(), plan_.padded_total());
  const FlatLayout flat = model_->layout().flat();
  using Mode = GradReducer::Mode;
  reducer_ = std::make_unique<GradReducer>(plan_, ctx.dp(), grads_, zero_ == 0 ? Mode::AllReduce : Mode::ReduceScatter,
                                           zero_ == 2);
  optimizer_ = std::make_unique<ShardedOptimizer>(
      flat, plan_, ctx.dp(), zero_ > 0,
      AdamWConfig{cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay},
      &ctx.group(GroupKind::model));
}

void Replica::zero_grads() {
  // ZeRO 2 handed every bucket back after reducing it; what remains (none
  // after a whole step) is dropped the same way, without touching the pages.
  if (zero_ == 2) grads_.release_all();
  else grads_.zero();
}

float Replica::forward_backward(const int32_t* tokens, const int32_t* targets, int T, bool last_micro_batch) {
  if (!last_micro_batch) return model_->forward_backward(tokens, targets, micro_batch_, T, loss_scale_);
  reducer_->begin();
  model_->set_grad_ready_hook([this](int tensor) { reducer_->on_grad_ready(tensor); });
  float loss = model_->forward_backward(tokens, targets, micro_batch_, T, loss_scale_);
  model_->set_grad_ready_hook(nullptr);
  return loss;
}

double Replica::reduce() {
  reducer_->finish();
  reduce_sequence_partial_grads();
  return optimizer_->grad_norm(reducer_->reduced());
}

void Replica::update(float lr, float grad_scale) {
  optimizer_->step(model_->params(), reducer_->reduced(), lr, grad_scale);
}

// With sequence parallelism each tp rank's norm (and position-table)
// gradients cover its own rows only. The sum over tp commutes with the sum
// over dp, so it runs once per step on what this rank holds after the dp
// reduction (all of it, or its ZeRO shard: the same ranges on every tp rank,
// whose layouts have equal sizes).
void Replica::reduce_sequence_partial_grads() {
  const std::vector<int> partial = model_->sequence_partial_grads();
  if (partial.empty()) return;
  const FlatLayout flat = model_->layout().flat();
  std::vector<FlatRange> owned = zero_ > 0 ? plan_.shard_ranges(ctx_.dp().rank())
                                           : std::vector<FlatRange>{{0, plan_.padded_total()}};
  std::vector<FlatPiece> pieces;
  for (const FlatPiece& p : pieces_of(flat, owned))
    if (std::binary_search(partial.begin(), partial.end(), p.tensor)) pieces.push_back(p);
  std::vector<float> packed;
  float* reduced = reducer_->reduced();
  for (const FlatPiece& p : pieces) packed.insert(packed.end(), reduced + p.packed, reduced + p.packed + p.numel);
  ctx_.tp().all_reduce(packed.data(), packed.size(), DType::f32, ReduceOp::Sum);
  size_t at = 0;
  for (const FlatPiece& p : pieces) {
    std::copy(packed.begin() + at, packed.begin() + at + p.numel, reduced + p.packed);
    at += size_t(p.numel);
  }
}

std::vector<float> Replica::gather_grads() const {
  std::vector<float> full(size_t(plan_.padded_total()));
  reducer_->gather(full.data());
  full.resize(size_t(model_->layout().total));
  return full;
}

}  // namespace loom

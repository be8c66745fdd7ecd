#include "train/replica.h"

namespace loom {

Replica::Replica(const RunConfig& cfg, const ParallelContext& ctx, int micro_batch, int accumulation)
    : zero_(cfg.parallel.zero),
      micro_batch_(micro_batch),
      loss_scale_(1.0f / float(ctx.dp().size() * accumulation)),
      plan_(ParamLayout::gpt2(cfg.model).flat(), double(cfg.parallel.bucket_mb) * (1 << 20), ctx.dp().size()),
      grads_(plan_.padded_total()) {
  model_ = std::make_unique<GPT>(cfg.model, micro_batch, cfg.model.seq_len, grads_.data(), plan_.padded_total());
  const FlatLayout flat = model_->layout().flat();
  using Mode = GradReducer::Mode;
  reducer_ = std::make_unique<GradReducer>(plan_, ctx.dp(), grads_, zero_ == 0 ? Mode::AllReduce : Mode::ReduceScatter,
                                           zero_ == 2);
  optimizer_ = std::make_unique<ShardedOptimizer>(
      flat, plan_, ctx.dp(), zero_ > 0,
      AdamWConfig{cfg.train.beta1, cfg.train.beta2, cfg.train.eps, cfg.train.weight_decay});
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
  return optimizer_->grad_norm(reducer_->reduced());
}

void Replica::update(float lr, float grad_scale) {
  optimizer_->step(model_->params(), reducer_->reduced(), lr, grad_scale);
}

std::vector<float> Replica::gather_grads() const {
  std::vector<float> full(size_t(plan_.padded_total()));
  reducer_->gather(full.data());
  full.resize(size_t(model_->layout().total));
  return full;
}

}  // namespace loom

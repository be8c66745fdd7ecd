// DESIGN.md invariant 4: a tiny GPT's logits, loss, every gradient and ten
// AdamW steps match PyTorch (the file tools/make_reference.py writes at
// build time with Debian's python3-torch).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/backend.h"
#include "golden/reference_file.h"
#include "kernels/cpu/grad_norm.h"
#include "model/stage_module.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"

namespace {

using loom::test::ReferenceFile;
using loom::test::rel_frobenius;

const ReferenceFile& reference() {
  static const ReferenceFile ref = ReferenceFile::load(LOOM_BINARY_DIR "/reference/tiny_gpt.ref");
  return ref;
}

struct LoadedModel {
  loom::ModelConfig cfg;
  int B, T;
  std::unique_ptr<loom::StageModule> model;
};

LoadedModel make_model(const ReferenceFile& ref) {
  LoadedModel s;
  s.cfg = loom::ModelConfig{int(ref.ints.at("vocab_size")), int(ref.ints.at("n_layer")), int(ref.ints.at("n_head")),
                          int(ref.ints.at("d_model")), int(ref.ints.at("seq_len"))};
  s.B = int(ref.ints.at("batch_size"));
  s.T = s.cfg.seq_len;
  s.model = loom::make_model(s.cfg, s.B, s.T);
  // Load PyTorch's initial weights by global name; shapes must agree.
  for (size_t i = 0; i < s.model->layout().params.size(); i++) {
    const auto& spec = s.model->layout().params[i];
    const auto& t = ref.tensor("param/" + spec.name);
    EXPECT_EQ(t.shape, spec.shape) << spec.name;
    std::memcpy(s.model->param(int(i)), t.f32.data(), t.f32.size() * sizeof(float));
  }
  return s;
}

TEST(PyTorchAgreement, LogitsAndLoss) {
  const auto& ref = reference();
  LoadedModel s = make_model(ref);
  float loss = s.model->forward(ref.tensor("inputs").i32.data(), ref.tensor("targets").i32.data(), s.B, s.T);
  EXPECT_LT(rel_frobenius(s.model->logits(), ref.tensor("logits").f32), 1e-6);
  EXPECT_NEAR(loss, ref.tensor("loss").f32[0], 1e-6 * std::abs(ref.tensor("loss").f32[0]));
}

TEST(PyTorchAgreement, EveryGradient) {
  const auto& ref = reference();
  LoadedModel s = make_model(ref);
  s.model->zero_grads();
  float loss =
      s.model->forward_backward(ref.tensor("inputs").i32.data(), ref.tensor("targets").i32.data(), s.B, s.T);
  EXPECT_NEAR(loss, ref.tensor("loss").f32[0], 1e-6 * std::abs(ref.tensor("loss").f32[0]));
  for (size_t i = 0; i < s.model->layout().params.size(); i++) {
    const auto& name = s.model->layout().params[i].name;
    EXPECT_LT(rel_frobenius(s.model->grad(int(i)), ref.tensor("grad/" + name).f32), 1e-5) << name;
  }
}

TEST(PyTorchAgreement, TenAdamWStepsWithClipping) {
  const auto& ref = reference();
  LoadedModel s = make_model(ref);
  loom::AdamWConfig acfg{float(ref.floats.at("beta1")), float(ref.floats.at("beta2")), float(ref.floats.at("eps")),
                         float(ref.floats.at("weight_decay"))};
  loom::CpuBackend ops;
  loom::AdamW opt(ops, s.model->layout().flat(), acfg);
  const auto& losses = ref.tensor("adam/losses").f32;
  const auto& norms = ref.tensor("adam/grad_norms").f32;
  ASSERT_EQ(int64_t(losses.size()), ref.ints.at("adam_steps"));
  for (size_t step = 0; step < losses.size(); step++) {
    s.model->zero_grads();
    float loss =
        s.model->forward_backward(ref.tensor("inputs").i32.data(), ref.tensor("targets").i32.data(), s.B, s.T);
    double norm = loom::global_grad_norm(ops, s.model->layout().flat(), s.model->grads());
    EXPECT_NEAR(loss, losses[step], 1e-5 * std::abs(losses[step])) << "step " << step;
    EXPECT_NEAR(norm, norms[step], 1e-5 * std::abs(norms[step])) << "step " << step;
    float scale = loom::clip_scale(norm, float(ref.floats.at("grad_clip")));
    opt.step(s.model->params(), s.model->grads(), float(ref.floats.at("lr")), scale);
  }
  const int C = s.cfg.d_model;
  for (size_t i = 0; i < s.model->layout().params.size(); i++) {
    const auto& name = s.model->layout().params[i].name;
    std::vector<float> want = ref.tensor("final/" + name).f32;
    std::vector<float> got(s.model->param(int(i)), s.model->param(int(i)) + want.size());
    if (name.ends_with("attn.c_attn.bias")) {
      // The key bias has an exactly zero gradient (it adds the same q.b_k
      // to every score of a row; softmax ignores that), so both engines see
      // only rounding noise there, which Adam's normalisation blows up to
      // +-lr steps of arbitrary sign. Compare q and v biases only, and check
      // that the key bias stayed within the reach of those noise steps.
      for (int c = C; c < 2 * C; c++) {
        EXPECT_LE(std::abs(got[c]), 10 * ref.floats.at("lr") * 1.01) << name << "[" << c << "]";
        got[c] = want[c] = 0.f;
      }
    }
    EXPECT_LT(rel_frobenius(got.data(), want), 1e-5) << name;
  }
}

}  // namespace

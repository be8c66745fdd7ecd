// The MoE layer (src/model/moe/moe_layer.h) against a PyTorch reference
// written from Mixtral's sparse block (tools/moe_torch.py, made by
// tools/make_moe_reference.py): the output, the router's logits' routing,
// and the gradients of the input, the router and every expert within 1e-5
// relative in fp32; bf16 and fp16 within their own bound of it; top-k ties
// go to the lowest expert; an expert no token chose gets zero gradients.
#include <gtest/gtest.h>

#include <limits>

#include <cmath>
#include <fstream>

#include "config/run_config.h"
#include "core/check.h"
#include "golden/reference_file.h"
#include "model/moe/moe_layer.h"
#include "model/param_layout.h"

namespace {

using loom::test::ReferenceFile;
using loom::test::rel_frobenius;

const ReferenceFile& reference() { return loom::test::built_reference("moe_layer"); }

struct Layer {
  loom::moe::Shape s;
  std::vector<float> router, gate_up, down;  // [E, C], [E, 2F, C], [E, C, F]
};

Layer from_reference(const ReferenceFile& ref) {
  Layer l;
  l.s = {int(ref.ints.at("tokens")), int(ref.ints.at("d_model")), int(ref.ints.at("n_experts")),
         int(ref.ints.at("top_k")), int(ref.ints.at("ffn"))};
  l.router = ref.tensor("param/gate.weight").f32;
  for (int e = 0; e < l.s.E; e++) {
    const std::string p = "param/experts." + std::to_string(e) + ".";
    for (const char* part : {"gate_proj", "up_proj"}) {
      const auto& t = ref.tensor(p + part + ".weight").f32;
      l.gate_up.insert(l.gate_up.end(), t.begin(), t.end());
    }
    const auto& d = ref.tensor(p + "down_proj.weight").f32;
    l.down.insert(l.down.end(), d.begin(), d.end());
  }
  return l;
}

template <class A>
std::vector<A> as(const std::vector<float>& v) {
  std::vector<A> out(v.size());
  for (size_t i = 0; i < v.size(); i++) {
    if constexpr (std::is_same_v<A, float>) out[i] = v[i];
    else if constexpr (std::is_same_v<A, loom::bf16>) out[i] = loom::float_to_bf16(v[i]);
    else out[i] = loom::float_to_f16(v[i]);
  }
  return out;
}

struct Result {
  std::vector<float> y, dx, drouter, dgate_up, ddown;
  loom::moe::RoutingStorage r;
};

template <class A>
Result run(const Layer& l, const std::vector<float>& x32, const std::vector<float>& g, const float* bias = nullptr,
           const loom::moe::RouterLossGrad& losses = {}) {
  const loom::moe::Shape& s = l.s;
  const size_t NK = size_t(s.padded_rows()), C = size_t(s.C), F = size_t(s.F);
  const std::vector<A> x = as<A>(x32), gu = as<A>(l.gate_up), dn = as<A>(l.down);
  // Buffers full of NaN, as a reused arena may hold: the padding rows must
  // be written before anything reads them.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const A nan_a = as<A>(std::vector<float>{nan})[0];
  std::vector<A> xp(NK * C, nan_a), gate_up(NK * 2 * F, nan_a), hidden(NK * F, nan_a), dyp(NK * C, nan_a),
      dgu(NK * 2 * F, nan_a);
  std::vector<float> yp(NK * C, nan), xw(size_t(s.N) * C, nan), dxp(NK * C, nan), dh(NK * F, nan),
      dl(size_t(s.N) * s.E, nan);
  Result out;
  const loom::moe::Routing routing = out.r.view(s);
  out.y.resize(size_t(s.N) * C), out.dx.resize(out.y.size());
  out.drouter.assign(l.router.size(), 0.f), out.dgate_up.assign(l.gate_up.size(), 0.f);
  out.ddown.assign(l.down.size(), 0.f);
  loom::CpuBackend eng;
  const loom::moe::Buffers<A> b{xp.data(), gate_up.data(), hidden.data(), yp.data(), xw.data()};
  loom::moe::forward<A>(eng, out.y.data(), x.data(), l.router.data(), bias, gu.data(), dn.data(), s, routing, b);
  const loom::moe::BackwardWork<A> w{dxp.data(), dh.data(), dyp.data(), dgu.data(), dl.data()};
  loom::moe::backward<A>(eng, out.dx.data(), out.drouter.data(), out.dgate_up.data(), out.ddown.data(), g.data(),
                         x.data(), l.router.data(), gu.data(), dn.data(), s, routing, b, w, losses);
  return out;
}

// The reference's gradients in loom's stacked layouts (prefix: which run's).
std::vector<float> stacked(const ReferenceFile& ref, int E, std::initializer_list<const char*> parts,
                           const std::string& prefix = "grad/") {
  std::vector<float> out;
  for (int e = 0; e < E; e++)
    for (const char* part : parts) {
      const auto& t = ref.tensor(prefix + "experts." + std::to_string(e) + "." + part + ".weight").f32;
      out.insert(out.end(), t.begin(), t.end());
    }
  return out;
}

TEST(MoeLayer, MatchesPyTorchInFp32) {
  const ReferenceFile& ref = reference();
  const Layer l = from_reference(ref);
  const Result r = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  EXPECT_LT(rel_frobenius(r.y.data(), ref.tensor("y").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.dx.data(), ref.tensor("grad/x").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.drouter.data(), ref.tensor("grad/gate.weight").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.dgate_up.data(), stacked(ref, l.s.E, {"gate_proj", "up_proj"})), 1e-5);
  EXPECT_LT(rel_frobenius(r.ddown.data(), stacked(ref, l.s.E, {"down_proj"})), 1e-5);
  // Every pair has a row; the rows of an expert are contiguous, tokens in order.
  int total = 0;
  for (int e = 0; e < l.s.E; e++) total += r.r.count[size_t(e)];
  EXPECT_EQ(total, l.s.N * l.s.k);
  for (int64_t i = 1; i < l.s.pairs(); i++)
    if (r.r.expert[size_t(i)] == r.r.expert[size_t(i - 1)]) {
      EXPECT_GT(r.r.row[size_t(i)], r.r.row[size_t(i - 1)]);
    }
  // Each expert's rows start on a multiple of kRowAlign, inside its segment.
  for (int e = 0; e < l.s.E; e++) {
    EXPECT_EQ(r.r.first[size_t(e)] % loom::moe::Shape::kRowAlign, 0) << "expert " << e;
    EXPECT_LE(r.r.first[size_t(e)] + r.r.count[size_t(e)], r.r.first[size_t(e) + 1]) << "expert " << e;
  }
  for (int64_t i = 0; i < l.s.pairs(); i++) {
    const int e = r.r.expert[size_t(i)];
    EXPECT_GE(r.r.row[size_t(i)], r.r.first[size_t(e)]);
    EXPECT_LT(r.r.row[size_t(i)], r.r.first[size_t(e)] + r.r.count[size_t(e)]);
  }
}

// The per-sequence balancing loss's gradient on each token's scores, weight
// x f_e per sequence of T rows (f_e = E / (k T) x its pairs routed to e), from
// a run's routing.
std::vector<float> sequence_dprob(const Layer& l, const Result& routed, int T, float weight) {
  const int E = l.s.E, k = l.s.k;
  std::vector<float> seq(size_t(l.s.N / T) * E, 0.f);
  for (int n = 0; n < l.s.N; n++)
    for (int j = 0; j < k; j++) seq[size_t(n / T) * E + size_t(routed.r.expert[size_t(n) * k + j])] += 1.f;
  for (float& v : seq) v *= weight * float(E) / float(k * T);
  return seq;
}

// The router z-loss and the per-sequence balancing loss enter at the
// router: their gradients on the input and the router match autograd's.
TEST(MoeLayer, RouterLossesMatchPyTorch) {
  const ReferenceFile& ref = reference();
  const Layer l = from_reference(ref);
  const int T = int(ref.ints.at("seq_len"));
  const float z_weight = 1e-3f * float(ref.ints.at("z_weight_milli"));
  const float seq_weight = 1e-3f * float(ref.ints.at("seq_weight_milli"));
  // The routing first (without losses), for each sequence's counts.
  const Result plain = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  const std::vector<float> seq = sequence_dprob(l, plain, T, seq_weight);
  const Result r = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32, nullptr,
                              loom::moe::RouterLossGrad{z_weight, seq.data(), T});
  EXPECT_LT(rel_frobenius(r.dx.data(), ref.tensor("zgrad/x").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.drouter.data(), ref.tensor("zgrad/gate.weight").f32), 1e-5);
  // And they change the router's gradient well beyond that bound.
  EXPECT_GT(rel_frobenius(plain.drouter.data(), ref.tensor("zgrad/gate.weight").f32), 1e-2);
}

// DeepSeek-V3's router: sigmoid scores (top-k renormalised), with and
// without the per-sequence loss on the scores normalised to sum 1.
TEST(MoeLayer, SigmoidScoresMatchPyTorch) {
  const ReferenceFile& ref = reference();
  Layer l = from_reference(ref);
  l.s.sigmoid = true;
  const int T = int(ref.ints.at("seq_len"));
  const Result r = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  EXPECT_LT(rel_frobenius(r.y.data(), ref.tensor("sig/y").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.dx.data(), ref.tensor("sig/x").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.drouter.data(), ref.tensor("sig/grad/gate.weight").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.dgate_up.data(), stacked(ref, l.s.E, {"gate_proj", "up_proj"}, "sig/grad/")), 1e-5);
  EXPECT_LT(rel_frobenius(r.ddown.data(), stacked(ref, l.s.E, {"down_proj"}, "sig/grad/")), 1e-5);
  EXPECT_GT(rel_frobenius(r.y.data(), ref.tensor("y").f32), 1e-2) << "sigmoid scores routed as softmax";
  const std::vector<float> seq = sequence_dprob(l, r, T, 1e-3f * float(ref.ints.at("seq_weight_milli")));
  const Result z = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32, nullptr,
                              loom::moe::RouterLossGrad{0.f, seq.data(), T});
  EXPECT_LT(rel_frobenius(z.dx.data(), ref.tensor("sigzgrad/x").f32), 1e-5);
  EXPECT_LT(rel_frobenius(z.drouter.data(), ref.tensor("sigzgrad/gate.weight").f32), 1e-5);
}

// Qwen2-MoE's norm_topk_prob = false: the chosen probabilities as weights.
TEST(MoeLayer, WeightsWithoutRenormalisingMatchPyTorch) {
  const ReferenceFile& ref = reference();
  Layer l = from_reference(ref);
  l.s.renormalize = false;
  const Result r = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  EXPECT_LT(rel_frobenius(r.y.data(), ref.tensor("raw/y").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.dx.data(), ref.tensor("raw/x").f32), 1e-5);
  EXPECT_LT(rel_frobenius(r.drouter.data(), ref.tensor("raw/gate.weight").f32), 1e-5);
  EXPECT_GT(rel_frobenius(r.y.data(), ref.tensor("y").f32), 1e-2) << "renormalised anyway";
}

TEST(MoeLayer, SixteenBitComputeStaysNearFp32) {
  const ReferenceFile& ref = reference();
  const Layer l = from_reference(ref);
  const Result f = run<float>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  const Result b = run<loom::bf16>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  const Result h = run<loom::f16>(l, ref.tensor("x").f32, ref.tensor("g").f32);
  EXPECT_EQ(b.r.expert, f.r.expert);  // the references' margins keep the routing
  EXPECT_LT(rel_frobenius(b.y.data(), f.y), 2e-2);
  EXPECT_LT(rel_frobenius(b.dx.data(), f.dx), 3e-2);
  EXPECT_LT(rel_frobenius(b.dgate_up.data(), f.dgate_up), 3e-2);
  EXPECT_LT(rel_frobenius(h.y.data(), f.y), 5e-3);
  EXPECT_LT(rel_frobenius(h.ddown.data(), f.ddown), 5e-3);
}

TEST(MoeLayer, TiesGoToTheLowestExpertAndUnchosenExpertsGetNoGradient) {
  Layer l = from_reference(reference());
  std::fill(l.router.begin(), l.router.end(), 0.f);  // every expert equally likely
  std::vector<float> x(size_t(l.s.N) * l.s.C, 0.5f), g(x.size(), 1.f);
  const Result r = run<float>(l, x, g);
  for (int n = 0; n < l.s.N; n++)
    for (int j = 0; j < l.s.k; j++) EXPECT_EQ(r.r.expert[size_t(n * l.s.k + j)], j);
  const size_t per = size_t(2 * l.s.F) * l.s.C;
  for (size_t i = size_t(l.s.k) * per; i < r.dgate_up.size(); i++) ASSERT_EQ(r.dgate_up[i], 0.f) << i;
  // A selection bias moves the choice and not the weights' softmax.
  std::vector<float> bias(size_t(l.s.E), 0.f);
  bias[5] = bias[7] = 1.f;
  const Result moved = run<float>(l, x, g, bias.data());
  EXPECT_EQ(moved.r.expert[0], 5);
  EXPECT_EQ(moved.r.expert[1], 7);
  EXPECT_FLOAT_EQ(moved.r.weight[0], 0.5f);
}

}  // namespace

namespace {

// The mixtral family's config: its layout holds what num_parameters counts
// (every expert), the FLOPs count the top_k a token runs, and bad fields
// are named.
std::string write_back(const loom::RunConfig& c) {
  const std::string path = std::string(LOOM_BINARY_DIR) + "/mixtral_roundtrip.toml";
  std::ofstream(path) << c.to_toml();
  return path;
}

TEST(MixtralConfig, LayoutCountsFlopsAndBadFields) {
  loom::RunConfig c = loom::load_run_config(LOOM_SOURCE_DIR "/configs/llama-tiny.toml",
                                            {"model.family=\"mixtral\"", "model.moe_ffn_hidden=32", "model.moe_every=2"});
  const loom::ModelConfig& m = c.model;
  EXPECT_EQ(m.n_experts, 8);
  EXPECT_TRUE(m.moe_block(1));
  EXPECT_FALSE(m.moe_block(0));
  int64_t total = 0;
  for (const loom::ParamSpec& p : loom::ParamLayout::for_model(m).params) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, m.num_parameters());
  loom::ModelConfig dense = m;
  dense.n_experts = 0;
  // Per MoE block, the FLOPs swap the dense MLP for top_k experts and the router.
  const double moe_mlp = 6.0 * (m.top_k * 3.0 * 32 * m.d_model + m.n_experts * m.d_model);
  EXPECT_NEAR(m.train_flops_per_token(64) - dense.train_flops_per_token(64), moe_mlp - 6.0 * 3 * m.ffn() * m.d_model,
              1e-6 * m.train_flops_per_token(64));
  EXPECT_EQ(loom::load_run_config(write_back(c), {}).model.n_experts, 8);

  auto error_of = [](std::vector<std::string> sets) {
    try {
      loom::load_run_config(LOOM_SOURCE_DIR "/configs/llama-tiny.toml", sets);
    } catch (const loom::UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  const std::string mixtral = "model.family=\"mixtral\"";
  EXPECT_NE(error_of({mixtral, "model.top_k=9"}).find("'model.top_k'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.top_k=0"}).find("'model.top_k'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_every=0"}).find("'model.moe_every'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.n_experts=300"}).find("'model.n_experts'"), std::string::npos);
  EXPECT_NE(error_of({"model.n_experts=4"}).find("'model.n_experts'"), std::string::npos);  // llama, not mixtral
  EXPECT_NE(error_of({mixtral, "lora.rank=4", "lora.targets=[\"up_proj\"]"}).find("'lora.targets'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_balance=\"bogus\""}).find("'model.moe_balance'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_router=\"relu\""}).find("'model.moe_router'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_bias_rate=-1"}).find("'model.moe_bias_rate'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_aux_coef=-0.5"}).find("'model.moe_aux_coef'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_z_coef=-1"}).find("'model.moe_z_coef'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_shared_ffn=-8"}).find("'model.moe_shared_ffn'"), std::string::npos);
  EXPECT_NE(error_of({mixtral, "model.moe_router=\"sigmoid\"", "model.moe_balance=\"switch\""}).find("'model.moe_balance'"),
            std::string::npos);
}

// The balancing, router and shared-expert fields: parsed, written back by
// the run's config.toml, and a shared expert counted in the parameters.
TEST(MixtralConfig, RouterFieldsRoundTripAndTheSharedExpertCounts) {
  loom::RunConfig c = loom::load_run_config(
      LOOM_SOURCE_DIR "/configs/llama-tiny.toml",
      {"model.family=\"mixtral\"", "model.moe_ffn_hidden=32", "model.moe_shared_ffn=24", "model.moe_balance=\"sequence\"",
       "model.moe_aux_coef=0.02", "model.moe_z_coef=0.001", "model.moe_router=\"sigmoid\"",
       "model.moe_renormalize=false", "model.moe_bias_rate=0.005"});
  const loom::ModelConfig back = loom::load_run_config(write_back(c), {}).model;
  EXPECT_EQ(back.moe_shared_ffn, 24);
  EXPECT_EQ(back.moe_balance, loom::MoeBalance::sequence);
  EXPECT_DOUBLE_EQ(back.moe_aux_coef, 0.02);
  EXPECT_DOUBLE_EQ(back.moe_z_coef, 0.001);
  EXPECT_DOUBLE_EQ(back.moe_bias_rate, 0.005);
  EXPECT_TRUE(back.moe_sigmoid);
  EXPECT_FALSE(back.moe_renormalize);
  int64_t total = 0;
  for (const loom::ParamSpec& p : loom::ParamLayout::for_model(c.model).params) {
    int64_t n = 1;
    for (int64_t d : p.shape) n *= d;
    total += n;
  }
  EXPECT_EQ(total, c.model.num_parameters());
  loom::ModelConfig without = c.model;
  without.moe_shared_ffn = 0;
  EXPECT_EQ(c.model.num_parameters() - without.num_parameters(),
            int64_t(c.model.n_layer) * (3 * 24 * c.model.d_model + c.model.d_model));
}

}  // namespace

// `loom bench packed`: what packed rows (several documents a row, kept apart
// by the attention) cost against one sequence a row at the same shape.
//   attention: the tiled kernel's forward + backward at T (2048 by default),
//              12 heads of 64, one row: the whole causal triangle against
//              documents of --doc-len tokens, whose key tiles before the query
//              tile's document are skipped; the tiles visited and the time
//   step:      a whole training step (forward, backward) of a small GPT-2 at
//              the same T, unpacked against packed, with the tiled attention
//              and, at T 512, with the materialized one (no tile skipping:
//              the masked probabilities are computed and zeroed)
// Medians of --reps runs, ratios against the unpacked run of this invocation.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "cli/command_util.h"
#include "cli/commands.h"
#include "core/check.h"
#include "kernels/cpu/attention_tiled.h"
#include "kernels/cpu/isa.h"
#include "model/stage_module.h"

namespace loom::cli {
namespace {

struct Options {
  int T = 2048, doc_len = 256, reps = 3;
};

Options parse(const Args& args) {
  Options o;
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench packed: %s needs a value", args[i].c_str());
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--T") o.T = int_option(value(), "bench packed", "--T", 128, 1 << 16);
    else if (a == "--doc-len") o.doc_len = int_option(value(), "bench packed", "--doc-len", 1, 1 << 16);
    else if (a == "--reps") o.reps = int_option(value(), "bench packed", "--reps", 1, 100);
    else throw UserError(strprintf("bench packed: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  return o;
}

double median_ms(int reps, const std::function<void()>& f) {
  f();  // warm-up
  std::vector<double> ms;
  for (int r = 0; r < reps; r++) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Each position's document start (rows of B x T): documents of doc_len
// tokens, the last one shorter; positions within them.
std::vector<int32_t> doc_starts(int B, int T, int doc_len) {
  std::vector<int32_t> start(size_t(B) * T);
  for (int b = 0; b < B; b++)
    for (int t = 0; t < T; t++) start[size_t(b) * T + t] = t - t % doc_len;
  return start;
}

// Key tiles of 64 the tiled kernel visits for query tiles of 64 (doc: starts or null).
double tiles_visited(int T, const int32_t* doc) {
  double n = 0;
  for (int i0 = 0; i0 < T; i0 += 64) {
    const int kend = std::min(T, i0 + 64), kbegin = doc ? doc[i0] : 0;
    n += (kend - kbegin + 63) / 64;
  }
  return n;
}

void bench_attention(const Options& o) {
  const int B = 1, T = o.T, NH = 12, hs = 64, C = NH * hs, row = 3 * C;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> qkv(size_t(B) * T * row), dout(size_t(B) * T * C), out(dout.size()), dqkv(qkv.size());
  std::vector<float> lse(size_t(B) * NH * T), work(cpu::attention_tiled_work_floats(omp_get_max_threads()));
  for (float& x : qkv) x = normal(rng);
  for (float& x : dout) x = normal(rng);
  const std::vector<int32_t> doc = doc_starts(B, T, o.doc_len);
  std::printf("attention: tiled, forward + backward, 1 x %d tokens, %d heads of %d, fp32\n", T, NH, hs);
  std::printf("%-28s | %13s %6s | %9s %6s\n", "rows", "tiles visited", "share", "ms", "ratio");
  double base = 0, base_tiles = 0;
  for (const int32_t* d : {static_cast<const int32_t*>(nullptr), doc.data()}) {
    const double ms = median_ms(o.reps, [&] {
      cpu::attention_tiled_forward(out.data(), lse.data(), qkv.data(), work.data(), B, T, C, NH, NH, d);
      cpu::attention_tiled_backward(dqkv.data(), work.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T,
                                    C, NH, NH, d);
    });
    const double tiles = tiles_visited(T, d);
    if (!d) base = ms, base_tiles = tiles;
    const std::string name = d ? strprintf("packed, documents of %d", o.doc_len) : "one sequence";
    std::printf("%-28s | %13.0f %5.0f%% | %9.1f %5.2fx\n", name.c_str(), tiles, 100 * tiles / base_tiles, ms,
                ms / base);
  }
}

void bench_step(const Options& o, int T, AttentionKind kind) {
  ModelConfig cfg{256, 4, 4, 256, T};
  cfg.attention = kind;
  const int B = 1;
  auto model = make_model(cfg, B, T);
  model->init_parameters(1);
  std::mt19937 rng(2);
  std::uniform_int_distribution<int> token(0, cfg.vocab_size - 1);
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size()), positions(tokens.size());
  for (size_t i = 0; i < tokens.size(); i++) tokens[i] = token(rng), targets[i] = token(rng);
  const std::vector<int32_t> start = doc_starts(B, T, o.doc_len);
  for (size_t i = 0; i < positions.size(); i++) {
    positions[i] = int32_t(i % size_t(T)) - start[i];
    if (i + 1 < positions.size() && (i + 1) % size_t(T) != 0 && start[i + 1] != start[i]) targets[i] = -1;
  }
  double base = 0;
  for (bool packed : {false, true}) {
    const double ms = median_ms(o.reps, [&] {
      model->zero_grads();
      model->set_documents(0, packed ? positions.data() : nullptr, B, T);
      model->forward_backward(tokens.data(), targets.data(), B, T);
    });
    if (!packed) base = ms;
    const std::string name = strprintf("%s, T %d, %s", kind == AttentionKind::tiled ? "tiled" : "materialized", T,
                                       packed ? "packed" : "one sequence");
    std::printf("%-36s | %9.1f %5.2fx\n", name.c_str(), ms, ms / base);
  }
}

}  // namespace

int cmd_bench_packed(const Args& args) {
  const Options o = parse(args);
  std::printf("loom bench packed: documents of %d tokens packed into rows of %d; %d threads, median of %d\n%s\n\n",
              o.doc_len, o.T, omp_get_max_threads(), o.reps, cpu::describe_dispatch().line().c_str());
  bench_attention(o);
  std::printf("\nstep: GPT-2, 4 blocks, d_model 256, 4 heads, vocab 256, one row, forward + backward\n");
  std::printf("%-36s | %9s %6s\n", "rows", "ms", "ratio");
  bench_step(o, o.T, AttentionKind::tiled);
  bench_step(o, std::min(o.T, 512), AttentionKind::materialized);
  std::printf("\ntiles visited = key tiles of 64 the tiled kernel multiplies, for query tiles of 64 (the causal\n"
              "                triangle; packed, only those from the query tile's first document on)\n"
              "ratio         = against the one-sequence row of the same table, this invocation\n");
  return 0;
}

}  // namespace loom::cli

// `loom bench step`: tokens/s and peak RSS of a full training step, loom
// beside PyTorch eager, measured in the same invocation.
//
// Every (shape, threads, engine, precision) runs in its own process so that
// its peak RSS is its own: loom re-executes itself as `loom bench step-child`.
// --precision / --torch-autocast switch to the per-run table of
// bench_step_table.cpp; without them the output is the original one.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "bench/bench_freeze.h"
#include "bench/bench_step_profile.h"
#include "bench/bench_step_table.h"
#include "cli/command_util.h"
#include "cli/commands.h"
#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/grad_norm.h"
#include "kernels/cpu/isa.h"
#include "model/stage_module.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "precision/loss_scaler.h"
#include "kernels/backend.h"
#include "train/trainer.h"

namespace loom::cli {
namespace {

struct BenchShape {
  const char* name;
  ModelConfig model;
  int B;
  int default_steps;
  const char* torch_args;  // the same model in tools/bench_pytorch.py
};

// A LLaMA of GPT-2's sizes: grouped-query attention (kv heads), SwiGLU of
// width ffn, untied head.
ModelConfig llama(int vocab, int layers, int heads, int kv_heads, int d_model, int ffn, int seq_len) {
  ModelConfig c{vocab, layers, heads, d_model, seq_len};
  c.family = ModelFamily::llama, c.n_kv_head = kv_heads, c.ffn_hidden = ffn;
  return c;
}

const std::vector<BenchShape>& bench_shapes() {
  static const std::vector<BenchShape> shapes = {
      {"tiny", ModelConfig{512, 4, 4, 128, 128}, 8, 10, "--shape tiny"},
      {"small", ModelConfig{4096, 6, 6, 384, 256}, 4, 5, "--shape small"},
      {"gpt2-124M", ModelConfig{50304, 12, 12, 768, 256}, 4, 3, "--shape gpt2-124M"},
      {"llama-tiny", llama(512, 4, 4, 2, 128, 352, 128), 8, 10, "--model llama --shape tiny"},
      {"llama-small", llama(4096, 6, 6, 2, 384, 1024, 256), 4, 5, "--model llama --shape small"},
      {"llama-124M", llama(50304, 12, 12, 4, 768, 2048, 256), 4, 3, "--model llama --shape llama-124M"},
  };
  return shapes;
}

const BenchShape& find_shape(const std::string& name) {
  for (const auto& s : bench_shapes())
    if (name == s.name) return s;
  throw UserError(strprintf(
      "bench: unknown shape '%s' (tiny, small, gpt2-124M; llama-tiny, llama-small, llama-124M)", name.c_str()));
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int parse_int(const std::string& s, const char* what) {
  try {
    size_t used = 0;
    int v = std::stoi(s, &used);
    if (used == s.size() && v > 0) return v;
  } catch (...) {
  }
  throw UserError(strprintf("bench: %s must be a positive integer, got '%s'", what, s.c_str()));
}

// One configuration, in this process: prints a JSON line. The step is the
// trainer's (Replica::reduce/update): in bf16/fp16 the gradients are unscaled
// and checked for inf/NaN, an overflowing step skips AdamW, and AdamW writes
// the 16-bit weight copies as it updates.
// With `profile`: no JSON line, but where the timed steps' time went.
int run_child(const BenchShape& shape, int threads, int steps, ComputePrecision precision, Recompute recompute,
              bool profile) {
  set_threads(threads);
  const ModelConfig& cfg = shape.model;
  const int B = shape.B, T = cfg.seq_len;
  Backend ops;  // the process's: the model and the optimizer compute with it
  const StageBuffers buffers{{}, {precision, recompute, &ops}};
  auto model_owner = make_stage_module(cfg, ModelShard{}, TensorParallel{}, B, T, buffers);
  StageModule& model = *model_owner;
  model.init_parameters(1234);
  const bool mixed = precision != ComputePrecision::fp32;
  LossScalerOptions scaling;
  scaling.mode = default_loss_scale_mode(precision);  // dynamic for fp16, off otherwise
  LossScaler scaler(scaling);
  int skipped = 0;
  AdamW opt(ops, model.layout().flat(), AdamWConfig{});
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size());
  random_batch(cfg.vocab_size, &tokens, &targets);
  std::vector<double> times;
  KernelProfile kernels;
  for (int s = 0; s <= steps; s++) {  // step 0 is warm-up
    if (s == 1 && profile) ops.set_profile(&kernels);
    auto t0 = std::chrono::steady_clock::now();
    model.zero_grads();
    model.forward_backward(tokens.data(), targets.data(), B, T, scaler.scale());
    // As the trainer does: unscaled bf16 finds a non-finite gradient through
    // the norm's sum (one pass); a loss scale is divided out first.
    bool overflow = false;
    if (mixed && scaling.mode != LossScaleMode::off)
      overflow = ops.unscale_and_check(model.grads(), size_t(model.params_size()), scaler.inv_scale());
    const double norm = overflow ? NAN : global_grad_norm(ops, model.layout().flat(), model.grads());
    if (mixed) {
      overflow = overflow || !std::isfinite(norm);
      scaler.update(overflow);
      if (overflow && s > 0) skipped++;
    }
    if (!overflow) {
      // As the trainer does: the update also writes the 16-bit weights.
      const WeightCopy copy{model.compute_weights(), compute_dtype(precision)};
      opt.step(model.params(), model.grads(), 1e-4f, clip_scale(norm, 1.0f), copy);
    }
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  double median = times[times.size() / 2];
  double tok_s = double(B) * T / median;
  if (profile) {
    ops.set_profile(nullptr);
    double total = 0;
    for (double t : times) total += t;
    // Shares of the mean step (the profile sums every timed step).
    print_step_profile(kernels, steps, total / steps, double(B) * T, cfg.train_flops_per_token(T), precision,
                       measure_machine_limits(threads));
    return 0;
  }
  std::printf("{\"engine\": \"loom\", \"shape\": \"%s\", \"threads\": %d, \"precision\": \"%s\", "
              "\"steps\": %d, \"step_ms\": %.2f, \"tokens_per_s\": %.2f, \"gflops\": %.2f, \"peak_rss_mb\": %.1f, "
              "\"activation_mib\": %.1f, \"skipped_steps\": %d}\n",
              shape.name, threads, compute_precision_name(precision), steps, median * 1e3, tok_s,
              tok_s * cfg.train_flops_per_token(T) * 1e-9, peak_rss_mib(),
              double(model.activation_bytes()) / (1024.0 * 1024.0), skipped);
  return 0;
}

StepResult run_and_parse(const std::string& command) { return parse_step_result(run_for_json(command)); }

std::string fmt(const StepResult& m, const char* f, double v) { return m.ok ? strprintf(f, v) : std::string("-"); }

// --recompute none,selective,full: loom only, one process per mode; step
// time and activation memory against the first mode's, measured in this run.
void print_recompute_table(const std::string& exe, const std::string& shape, int threads, int steps,
                           ComputePrecision precision, const std::vector<Recompute>& modes) {
  std::printf("%-10s %3s %5s %-5s | %-9s | %10s %9s %8s | %9s %9s\n", "shape", "thr", "steps", "prec", "recompute",
              "step ms", "act MiB", "RSS MiB", "time x", "act x");
  StepResult first;
  const BenchShape& s = find_shape(shape);
  const double tokens = double(s.B) * s.model.seq_len;
  for (Recompute r : modes) {
    const StepResult m = run_and_parse(strprintf("'%s' bench step-child --shape %s --threads %d --steps %d "
                                                 "--precision %s --recompute %s 2>&1",
                                                 exe.c_str(), shape.c_str(), threads, steps,
                                                 compute_precision_name(precision), to_string(r)));
    if (r == modes.front()) first = m;
    const bool both = m.ok && first.ok;
    std::printf("%-10s %3d %5d %-5s | %-9s | %10s %9s %8s | %9s %9s\n", shape.c_str(), threads, steps,
                compute_precision_name(precision), to_string(r), fmt(m, "%.1f", 1e3 * tokens / m.tokens_per_s).c_str(),
                fmt(m, "%.1f", m.activation_mib).c_str(), fmt(m, "%.0f", m.peak_rss_mb).c_str(),
                both ? strprintf("%.2fx", first.tokens_per_s / m.tokens_per_s).c_str() : "-",
                both ? strprintf("%.2fx", m.activation_mib / first.activation_mib).c_str() : "-");
    std::fflush(stdout);
  }
}

// --precision fp32,bf16: each once, in the order given.
std::vector<ComputePrecision> parse_precisions(const std::string& list) {
  std::vector<ComputePrecision> out;
  for (auto& name : split(list)) {
    ComputePrecision p = parse_compute_precision(name, "bench: --precision");
    for (ComputePrecision q : out)
      LOOM_USER_CHECK(q != p, "bench: --precision lists %s twice", compute_precision_name(p));
    out.push_back(p);
  }
  LOOM_USER_CHECK(!out.empty(), "bench: --precision needs at least one of fp32, bf16, fp16");
  return out;
}

// The tuned PyTorch run's environment: OpenMP threads that sleep when idle,
// and OpenBLAS's SkylakeX kernels where the CPU has AVX-512 (forcing them
// elsewhere dies with an illegal instruction). A core type the environment
// already sets is kept: some machines set it on purpose.
// --torch PYTHON must import torch: said before anything runs (exit 2).
void check_torch(const std::string& python) {
  const CommandResult r = run_command(shell_quote(python) + " -c 'import torch; print(torch.__version__)' 2>&1");
  LOOM_USER_CHECK(r.status == 0, "bench: --torch '%s' cannot import torch (--no-pytorch runs loom alone): %s",
                  python.c_str(), r.output.c_str());
}

std::string tuned_torch_env(const cpu::Dispatch& d) {
  std::string env = "OMP_WAIT_POLICY=PASSIVE";
  if (!std::getenv("OPENBLAS_CORETYPE") && d.highest >= Isa::avx512) env = "OPENBLAS_CORETYPE=SkylakeX " + env;
  return env;
}

}  // namespace

int cmd_bench_step(const Args& args) {
  LOOM_USER_CHECK(!args.empty() && (args[0] == "step" || args[0] == "step-child"),
                  "bench: expected 'loom bench step|comm|scaling|tp|pp|cp|moe|packed|tokenizer|checkpoint|cluster|elastic|planner|calibrate [options]' "
                  "(try loom --help)");
  bool child = args[0] == "step-child";
  std::vector<std::string> shapes = {"tiny", "small", "gpt2-124M"};
  std::vector<int> threads = {1, 2};
  std::vector<ComputePrecision> precisions = {ComputePrecision::fp32};
  int steps = 0;
  bool pytorch = true, autocast = false, per_run_table = false, profile = false, compiled = false;
  std::string python = "/usr/bin/python3";  // --torch: the interpreter that runs the PyTorch side
  std::vector<Recompute> recompute;  // --recompute: the recomputation table instead
  std::vector<std::string> freeze;   // --freeze: the frozen-tensors table instead
  bool replica_child = false;        // step-child --replica: the trainer's Replica step
  int lora_rank = 0;                 // --lora RANK: full fine-tuning against LoRA instead
  for (size_t i = 1; i < args.size(); i++) {
    auto value = [&](const char* flag) {
      LOOM_USER_CHECK(i + 1 < args.size(), "bench: %s needs a value", flag);
      return args[++i];
    };
    const std::string& a = args[i];
    if (a == "--shapes" || a == "--shape") shapes = split(value("--shapes"));
    else if (a == "--model") {
      const std::string m = value("--model");
      LOOM_USER_CHECK(m == "gpt2" || m == "llama", "bench: --model must be gpt2 or llama, got '%s'", m.c_str());
      if (m == "llama") shapes = {"llama-tiny", "llama-small", "llama-124M"};
    }
    else if (a == "--threads") {
      threads.clear();
      for (auto& t : split(value("--threads"))) threads.push_back(parse_int(t, "--threads"));
    } else if (a == "--steps") steps = parse_int(value("--steps"), "--steps");
    else if (a == "--precision") precisions = parse_precisions(value("--precision")), per_run_table = true;
    else if (a == "--torch-autocast") autocast = per_run_table = true;
    else if (a == "--no-pytorch") pytorch = false;
    else if (a == "--profile") profile = true;
    else if (a == "--torch") python = value("--torch");
    else if (a == "--torch-compile") compiled = per_run_table = true;
    else if (a == "--freeze") {
      freeze = split(value("--freeze"));
      LOOM_USER_CHECK(!freeze.empty(), "bench: --freeze needs tensor name patterns, e.g. 'wte.weight,h.[0-5].*'");
    } else if (a == "--lora") {
      lora_rank = parse_int(value("--lora"), "--lora");
      LOOM_USER_CHECK(lora_rank >= 1, "bench: --lora needs a rank >= 1");
    } else if (a == "--replica" && child) replica_child = true;
    else if (a == "--recompute")
      for (auto& r : split(value("--recompute"))) recompute.push_back(parse_recompute(r, "bench: --recompute"));
    else throw UserError(strprintf("bench: unknown option '%s' (try loom bench --help)", a.c_str()));
  }
  for (auto& s : shapes) find_shape(s);  // reject unknown names before running anything
  LOOM_USER_CHECK(!threads.empty() && !shapes.empty(), "bench: nothing to run");
  LOOM_USER_CHECK(!(autocast && !pytorch), "bench: --torch-autocast runs PyTorch; it cannot go with --no-pytorch");
  LOOM_USER_CHECK(!(compiled && !pytorch), "bench: --torch-compile runs PyTorch; it cannot go with --no-pytorch");
  if (pytorch && !child && !profile && recompute.empty() && freeze.empty() && lora_rank == 0) check_torch(python);
  if (child && replica_child)
    return run_replica_step_child(find_shape(shapes.at(0)).model, find_shape(shapes.at(0)).B, threads.at(0),
                                  steps > 0 ? steps : find_shape(shapes.at(0)).default_steps, precisions.at(0), freeze,
                                  lora_rank);
  if (child) {
    const BenchShape& s = find_shape(shapes.at(0));
    return run_child(s, threads.at(0), steps > 0 ? steps : s.default_steps, precisions.at(0),
                     recompute.empty() ? Recompute::none : recompute.at(0), profile);
  }
  if (profile) {
    std::printf("loom bench step --profile: where the step's time goes, each run in its own process, the op "
                "limits measured in it\n%s\n",
                cpu::describe_dispatch().line().c_str());
    for (const auto& name : shapes)
      for (int t : threads)
        for (ComputePrecision p : precisions) {
          const int n = steps > 0 ? steps : find_shape(name).default_steps;
          std::printf("\n%s, %d thread%s, %s:\n", name.c_str(), t, t == 1 ? "" : "s", compute_precision_name(p));
          std::fflush(stdout);
          const int rc = std::system(strprintf("'%s' bench step-child --shape %s --threads %d --steps %d --precision %s "
                                               "--profile",
                                               self_exe().c_str(), name.c_str(), t, n, compute_precision_name(p))
                                         .c_str());
          LOOM_CHECK(rc == 0, "bench step --profile: the run of %s failed", name.c_str());
        }
    return 0;
  }
  if (lora_rank > 0) {
    std::printf("loom bench step --lora: the trainer's step (one process, parameter groups) training every tensor, "
                "then LoRA adapters on a frozen base; median step after 1 warm-up, each run in its own process; "
                "time x / state x / RSS x: LoRA against full fine-tuning, this run (state: parameters + gradients + "
                "AdamW moments)\n%s\n\n",
                cpu::describe_dispatch().line().c_str());
    for (const auto& name : shapes)
      for (int t : threads)
        for (ComputePrecision p : precisions) {
          const int n = steps > 0 ? steps : find_shape(name).default_steps;
          print_lora_table(name, find_shape(name).model,
                           strprintf("'%s' bench step-child --shape %s --threads %d --steps %d", self_exe().c_str(),
                                     name.c_str(), t, n),
                           t, n, p, lora_rank);
        }
    return 0;
  }
  if (!freeze.empty()) {
    std::printf("loom bench step --freeze: the trainer's step (one process, parameter groups) with every tensor "
                "trained, then with the patterns frozen; median step after 1 warm-up, each run in its own "
                "process; time x / RSS x: frozen against all trained, this run\n%s\n\n",
                cpu::describe_dispatch().line().c_str());
    for (const auto& name : shapes)
      for (int t : threads)
        for (ComputePrecision p : precisions) {
          const int n = steps > 0 ? steps : find_shape(name).default_steps;
          print_freeze_table(name, find_shape(name).model,
                             strprintf("'%s' bench step-child --shape %s --threads %d --steps %d", self_exe().c_str(),
                                       name.c_str(), t, n),
                             t, n, p, freeze);
        }
    return 0;
  }
  if (!recompute.empty()) {
    std::printf("loom bench step --recompute: median step after 1 warm-up, each mode in its own process; "
                "time x / act x: against the first mode, this run\n%s\n\n",
                cpu::describe_dispatch().line().c_str());
    for (const auto& name : shapes)
      for (int t : threads)
        for (ComputePrecision p : precisions)
          print_recompute_table(self_exe(), name, t, steps > 0 ? steps : find_shape(name).default_steps, p, recompute);
    return 0;
  }

  const std::string exe = self_exe(), tool = project_root() + "/tools/bench_pytorch.py";
  const cpu::Dispatch dispatch = cpu::describe_dispatch();
  const std::string torch_tuning = tuned_torch_env(dispatch);
  std::printf("loom bench step: median step over N timed steps after 1 warm-up; each run in its own process\n");
  std::printf("%s\n", dispatch.line().c_str());
  std::printf("torch = PyTorch eager as the environment is (OPENBLAS_CORETYPE=%s); torch* = %s\n%s",
              std::getenv("OPENBLAS_CORETYPE") ? std::getenv("OPENBLAS_CORETYPE") : "unset", torch_tuning.c_str(),
              per_run_table ? "" : "\n");
  if (per_run_table) print_precision_header(), print_precision_columns(compiled);
  else
    std::printf("%-10s %3s %5s | %10s %8s | %10s %8s | %10s %8s | %10s %10s\n", "shape", "thr", "steps", "loom tok/s",
                "RSS MiB", "torch tok/s", "RSS MiB", "torch* tok/s", "RSS MiB", "loom/torch", "loom/torch*");
  for (const auto& name : shapes) {
    const BenchShape& s = find_shape(name);
    int n = steps > 0 ? steps : s.default_steps;
    for (int t : threads) {
      const std::string run = strprintf("--threads %d --steps %d", t, n);
      const std::string common = "--shape " + name + " " + run;
      PrecisionGroup g{name, t, n, {}, pytorch, autocast, compiled, {}, {}, {}, {}, {}};
      for (ComputePrecision p : precisions)
        g.loom.emplace_back(p, run_and_parse("'" + exe + "' bench step-child " + common + " --precision " +
                                             compute_precision_name(p) + " 2>&1"));
      if (pytorch) {
        std::string py = shell_quote(python) + " '" + tool + "' " + s.torch_args + " " + run + " --warmup 1 --json";
        g.torch = run_and_parse(py + " 2>&1");
        g.torch_best = run_and_parse("env " + torch_tuning + " " + py + " 2>&1");
        if (autocast) g.torch_bf16 = run_and_parse(py + " --autocast bf16 2>&1");
        if (compiled) g.torch_compiled = run_and_parse(py + " --compile 2>&1");
        if (compiled && autocast) g.torch_compiled_bf16 = run_and_parse(py + " --compile --autocast bf16 2>&1");
      }
      if (per_run_table) {
        print_precision_group(g);
        continue;
      }
      const StepResult &loom = g.loom.at(0).second, &torch = g.torch, &best = g.torch_best;
      std::printf("%-10s %3d %5d | %10s %8s | %10s %8s | %10s %8s | %10s %10s\n", name.c_str(), t, n,
                  fmt(loom, "%.0f", loom.tokens_per_s).c_str(), fmt(loom, "%.0f", loom.peak_rss_mb).c_str(),
                  fmt(torch, "%.0f", torch.tokens_per_s).c_str(), fmt(torch, "%.0f", torch.peak_rss_mb).c_str(),
                  fmt(best, "%.0f", best.tokens_per_s).c_str(), fmt(best, "%.0f", best.peak_rss_mb).c_str(),
                  fmt(torch, "%.2fx", loom.tokens_per_s / torch.tokens_per_s).c_str(),
                  fmt(best, "%.2fx", loom.tokens_per_s / best.tokens_per_s).c_str());
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace loom::cli

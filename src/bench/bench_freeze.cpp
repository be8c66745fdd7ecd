#include "bench/bench_freeze.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "cli/command_util.h"
#include "core/check.h"
#include "core/rng.h"
#include "kernels/cpu/grad_norm.h"
#include "optim/grad_clip.h"
#include "model/param_groups.h"
#include "parallel/grid/parallel_context.h"
#include "train/replica.h"
#include "train/trainer.h"

namespace loom::cli {

int run_replica_step_child(const ModelConfig& model, int B, int threads, int steps, ComputePrecision precision,
                           const std::vector<std::string>& freeze, int lora_rank) {
  set_threads(threads);
  RunConfig cfg;
  cfg.model = model;
  if (lora_rank > 0) {
    cfg.model.lora.rank = lora_rank, cfg.model.lora.alpha = 2.0 * lora_rank;
    cfg.model.lora.targets = lora_target_names(model.is_llama());
    if (!model.is_llama()) cfg.model.lora.targets = {"c_attn", "c_proj", "c_fc"};
    cfg.model.validate();
  }
  cfg.train.batch_size = B, cfg.train.micro_batch_size = B;
  cfg.precision.compute = compute_precision_name(precision);
  cfg.train.freeze = freeze;
  const std::string problem = freeze.empty() ? "" : freeze_problem(model, freeze);
  LOOM_USER_CHECK(problem.empty(), "bench: --freeze: %s", problem.c_str());
  auto ctx = ParallelContext::create_single();
  Replica replica(cfg, *ctx, B, 1);
  replica.init_parameters(1234);
  const int T = model.seq_len;
  std::vector<int32_t> tokens(size_t(B) * T), targets(tokens.size());
  random_batch(model.vocab_size, &tokens, &targets);
  std::vector<double> times;
  for (int s = 0; s <= steps; s++) {  // step 0 is warm-up
    const auto t0 = std::chrono::steady_clock::now();
    replica.forward_backward(tokens, targets, T);
    const double norm = replica.reduce();
    if (!replica.overflowed()) replica.update(1e-4f, clip_scale(norm, 1.0f));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s > 0) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  const double median = times[times.size() / 2], mib = 1 << 20;
  std::printf("{\"engine\": \"loom\", \"tokens_per_s\": %.2f, \"peak_rss_mb\": %.1f, \"param_mib\": %.2f, "
              "\"grad_mib\": %.2f, \"adam_mib\": %.2f, \"activation_mib\": %.1f}\n",
              double(B) * T / median, peak_rss_mib(),
              double(replica.param_bytes() + replica.compute_weight_bytes()) / mib,
              double(replica.grad_bytes_resident()) / mib, double(replica.optimizer_state_bytes()) / mib,
              double(replica.activation_bytes()) / mib);
  return 0;
}

void print_freeze_table(const std::string& shape, const ModelConfig& model, const std::string& child_command,
                        int threads, int steps, ComputePrecision precision, const std::vector<std::string>& freeze) {
  std::string list;
  for (const std::string& f : freeze) {
    LOOM_USER_CHECK(f.find('\'') == std::string::npos, "bench: --freeze: a pattern may not contain a quote");
    list += (list.empty() ? "" : ",") + f;
  }
  const std::string problem = freeze_problem(model, freeze);
  LOOM_USER_CHECK(problem.empty(), "bench: --freeze: %s", problem.c_str());
  const FrozenShare share = frozen_share(model, freeze);
  std::printf("%-10s %3s %5s %-5s | %-22s | %10s %8s | %9s %9s %9s | %8s %8s\n", "shape", "thr", "steps", "prec",
              "tensors", "tok/s", "RSS MiB", "param MiB", "grad MiB", "AdamW MiB", "time x", "RSS x");
  struct Row {
    std::string line;
    double tok_s = 0, rss = 0;
  } rows[2];
  for (int frozen = 0; frozen < 2; frozen++) {
    const std::string cmd = child_command + " --precision " + compute_precision_name(precision) + " --replica" +
                            (frozen ? " --freeze '" + list + "'" : std::string()) + " 2>&1";
    const std::string json = run_for_json(cmd);
    Row& r = rows[frozen];
    r.tok_s = json_number(json, "tokens_per_s"), r.rss = json_number(json, "peak_rss_mb");
    const std::string label =
        frozen ? strprintf("%.0f%% frozen", 100.0 * double(share.frozen) / double(share.total)) : "all trained";
    const bool ok = r.tok_s > 0 && rows[0].tok_s > 0;
    std::printf("%-10s %3d %5d %-5s | %-22s | %10.0f %8.0f | %9.1f %9.1f %9.1f | %8s %8s\n", shape.c_str(), threads,
                steps, compute_precision_name(precision), label.c_str(), r.tok_s, r.rss,
                json_number(json, "param_mib"), json_number(json, "grad_mib"), json_number(json, "adam_mib"),
                ok ? strprintf("%.2fx", rows[0].tok_s / r.tok_s).c_str() : "-",
                ok ? strprintf("%.2fx", r.rss / rows[0].rss).c_str() : "-");
    std::fflush(stdout);
  }
  std::printf("  frozen: %s (%d tensors, %.1fM of %.1fM parameters)\n", list.c_str(), share.tensors,
              double(share.frozen) / 1e6, double(share.total) / 1e6);
}

void print_lora_table(const std::string& shape, const ModelConfig& model, const std::string& child_command,
                      int threads, int steps, ComputePrecision precision, int rank) {
  std::printf("%-10s %3s %5s %-5s | %-16s | %10s %8s | %9s %9s %9s %9s | %7s %8s %7s\n", "shape", "thr", "steps",
              "prec", "trained", "tok/s", "RSS MiB", "param MiB", "grad MiB", "AdamW MiB", "state MiB", "time x",
              "state x", "RSS x");
  struct Row {
    double tok_s = 0, rss = 0, state = 0;
  } rows[2];
  for (int lora = 0; lora < 2; lora++) {
    const std::string cmd = child_command + " --precision " + compute_precision_name(precision) + " --replica" +
                            (lora ? " --lora " + std::to_string(rank) : std::string()) + " 2>&1";
    const std::string json = run_for_json(cmd);
    Row& r = rows[lora];
    const double param = json_number(json, "param_mib"), grad = json_number(json, "grad_mib"),
                 adam = json_number(json, "adam_mib");
    r.tok_s = json_number(json, "tokens_per_s"), r.rss = json_number(json, "peak_rss_mb"), r.state = param + grad + adam;
    const bool ok = r.tok_s > 0 && rows[0].tok_s > 0;
    std::printf("%-10s %3d %5d %-5s | %-16s | %10.0f %8.0f | %9.1f %9.1f %9.1f %9.1f | %7s %8s %7s\n", shape.c_str(),
                threads, steps, compute_precision_name(precision),
                lora ? strprintf("LoRA rank %d", rank).c_str() : "every tensor", r.tok_s, r.rss, param, grad, adam,
                r.state, ok ? strprintf("%.2fx", rows[0].tok_s / r.tok_s).c_str() : "-",
                ok ? strprintf("%.2fx", r.state / rows[0].state).c_str() : "-",
                ok ? strprintf("%.2fx", r.rss / rows[0].rss).c_str() : "-");
    std::fflush(stdout);
  }
  ModelConfig with = model;
  with.lora.rank = rank, with.lora.targets = lora_target_names(model.is_llama());
  if (!model.is_llama()) with.lora.targets = {"c_attn", "c_proj", "c_fc"};
  std::printf("  LoRA: rank %d, alpha %d on every linear layer of the blocks: %.2fM trained of %.1fM parameters\n", rank,
              2 * rank, double(lora_parameters(with)) / 1e6, double(model.num_parameters()) / 1e6);
}

}  // namespace loom::cli

// `loom plan`: which layout of a model on a cluster fits and runs fastest,
// with a ranked table and a memo for the best (see docs/planner.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>

#include <filesystem>

#include "checkpoint/hf_checkpoint.h"
#include "cli/commands.h"
#include "config/run_config.h"
#include "core/atomic_file.h"
#include "core/check.h"
#include "planner/cluster.h"
#include "planner/layout.h"
#include "model/lora/lora_config.h"
#include "planner/memo.h"
#include "planner/model_presets.h"
#include "planner/plan_table.h"
#include "planner/predict.h"
#include "planner/search.h"

namespace loom::cli {
namespace {

using namespace loom::planner;

struct PlanOptions {
  std::string model = "", config, cluster = "a100-80gb", layout, emit_config;
  std::vector<std::string> sets;
  int devices = 0, batch = 0, seq = 0, top = 5, ranks = 1;
  int layers = 0, d_model = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  std::optional<AttentionKind> attention;  // --attention: the attention kernel planned (model.attention)
  double inter_node_gbit = 0, tokens = 0, deadline_days = 0;
  bool cluster_given = false;
  // --lora RANK: plan LoRA fine-tuning (adapters on every linear layer of
  // the blocks, alpha 2 RANK); 0: full training only, never LoRA; -1 (not
  // given): LoRA at rank 16 when full training fits nowhere.
  int lora = -1;
  SearchSpace space;
};

double parse_number(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  LOOM_USER_CHECK(!s.empty() && *end == 0 && std::isfinite(v) && v > 0, "plan: %s takes a positive number, got '%s'",
                  flag.c_str(), s.c_str());
  return v;
}

int parse_int(const std::string& flag, const std::string& s, int min = 1) {
  char* end = nullptr;
  long v = std::strtol(s.c_str(), &end, 10);
  LOOM_USER_CHECK(!s.empty() && *end == 0 && v >= min && v <= (1 << 24), "plan: %s takes an integer >= %d, got '%s'",
                  flag.c_str(), min, s.c_str());
  return int(v);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

std::vector<int> parse_ints(const std::string& flag, const std::string& s, int min) {
  std::vector<int> out;
  for (const auto& item : split(s)) out.push_back(parse_int(flag, item, min));
  LOOM_USER_CHECK(!out.empty(), "plan: %s needs a value", flag.c_str());
  return out;
}

PlanOptions parse(const Args& args) {
  PlanOptions o;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    auto value = [&]() {
      LOOM_USER_CHECK(i + 1 < args.size(), "plan: %s needs a value", a.c_str());
      return args[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--config") o.config = value();
    else if (a == "--set") o.sets.push_back(value());
    else if (a == "--cluster") o.cluster = value(), o.cluster_given = true;
    else if (a == "--devices") o.devices = parse_int(a, value());
    else if (a == "--batch") o.batch = parse_int(a, value());
    else if (a == "--lora") o.lora = parse_int(a, value(), 0);
    else if (a == "--seq") o.seq = parse_int(a, value());
    else if (a == "--layers") o.layers = parse_int(a, value());
    else if (a == "--d-model") o.d_model = parse_int(a, value());
    else if (a == "--heads") o.heads = parse_int(a, value());
    else if (a == "--kv-heads") o.kv_heads = parse_int(a, value());
    else if (a == "--ffn") o.ffn = parse_int(a, value());
    else if (a == "--vocab") o.vocab = parse_int(a, value());
    else if (a == "--ignore-memory") o.space.ignore_memory = true;
    else if (a == "--pp-layers") o.space.pp_layers = parse_ints(a, value(), 1);
    else if (a == "--grads") {
      const std::string g = value();
      LOOM_USER_CHECK(g == "fp32" || g == "compute", "plan: --grads takes fp32 or compute, got '%s'", g.c_str());
      o.space.fp32_grads = g == "fp32";
    }
    else if (a == "--attention") {
      const std::string kind = value();
      const auto k = parse_attention_kind(kind);
      LOOM_USER_CHECK(k.has_value(), "plan: --attention takes auto, tiled or materialized, got '%s'", kind.c_str());
      o.attention = *k;
    }
    else if (a == "--top") o.top = parse_int(a, value());
    else if (a == "--inter-node-gbit") o.inter_node_gbit = parse_number(a, value());
    else if (a == "--tokens") {
      o.tokens = parse_number(a, value());
      // 1e15 tokens is far beyond any training run (GPT-4-class runs are ~1e13).
      LOOM_USER_CHECK(o.tokens <= 1e15, "plan: --tokens %g is absurd (at most 1e15)", o.tokens);
    }
    else if (a == "--deadline-days") o.deadline_days = parse_number(a, value());
    else if (a == "--layout") o.layout = value();
    else if (a == "--ranks") o.ranks = parse_int(a, value());
    else if (a == "--emit-config") o.emit_config = value();
    else if (a == "--dp") o.space.dp = parse_ints(a, value(), 1);
    else if (a == "--tp") o.space.tp = parse_ints(a, value(), 1);
    else if (a == "--pp") o.space.pp = parse_ints(a, value(), 1);
    else if (a == "--cp") o.space.cp = parse_ints(a, value(), 1);
    else if (a == "--ep") o.space.ep = parse_ints(a, value(), 1);
    else if (a == "--v") o.space.v = parse_ints(a, value(), 1);
    else if (a == "--micro-batch") o.space.micro_batch = parse_ints(a, value(), 1);
    else if (a == "--zero") {
      o.space.zero = parse_ints(a, value(), 0);
      for (int z : o.space.zero) LOOM_USER_CHECK(z <= 3, "plan: --zero takes 0, 1, 2 or 3, got %d", z);
    } else if (a == "--sp") {
      o.space.seq_parallel = parse_ints(a, value(), 0);
      for (int s : o.space.seq_parallel) LOOM_USER_CHECK(s <= 1, "plan: --sp takes 0 or 1, got %d", s);
    } else if (a == "--precision") {
      for (const auto& p : split(value())) o.space.precision.push_back(parse_compute_precision(p, "--precision"));
    } else if (a == "--recompute") {
      for (const auto& r : split(value())) o.space.recompute.push_back(parse_recompute(r, "--recompute"));
    } else if (a == "--schedule") {
      // 1f1b (interleaved with --v > 1) or zero-bubble (ZB-H1 at v 1, ZB-V at v 2).
      for (const auto& name : split(value())) {
        LOOM_USER_CHECK(name == "1f1b" || name == "zero-bubble",
                        "plan: --schedule takes 1f1b and/or zero-bubble, got '%s'", name.c_str());
        o.space.zero_bubble.push_back(name == "zero-bubble");
      }
    } else throw UserError(strprintf("plan: unknown option '%s' (try loom plan --help)", a.c_str()));
  }
  LOOM_USER_CHECK(o.model.empty() || o.config.empty(), "plan: give --model or --config, not both");
  LOOM_USER_CHECK(o.layout.empty() || o.layout == "auto", "plan: --layout takes 'auto', got '%s'", o.layout.c_str());
  LOOM_USER_CHECK(o.deadline_days == 0 || o.tokens > 0, "plan: --deadline-days needs --tokens (how much to train)");
  // A layout timed whatever its memory: one the user fixed, not the search's pick among impossible ones.
  LOOM_USER_CHECK(!o.space.ignore_memory || (o.space.dp.size() == 1 && o.space.tp.size() == 1 &&
                                             o.space.pp.size() == 1 && o.space.micro_batch.size() == 1),
                  "plan: --ignore-memory times a fixed layout: give one value each of --dp, --tp, --pp and "
                  "--micro-batch");
  LOOM_USER_CHECK(!o.space.ignore_memory || o.layout.empty(), "plan: --ignore-memory does not go with --layout auto");
  return o;
}

// LoRA as the planner proposes it: rank r, alpha 2 r, every linear layer of the blocks.
LoraConfig default_lora(const ModelConfig& m, int rank) {
  LoraConfig l;
  l.rank = rank, l.alpha = 2.0 * rank;
  l.targets = m.is_llama() ? lora_target_names(true) : std::vector<std::string>{"c_attn", "c_proj", "c_fc"};
  if (m.is_moe()) l.targets = {"q_proj", "k_proj", "v_proj", "o_proj"};  // the experts have no adapters yet
  return l;
}

Workload workload(const PlanOptions& o) {
  Workload w;
  if (!o.config.empty()) {
    RunConfig cfg = load_run_config(resolve_path(o.config), o.sets);
    w.model = cfg.model;
    w.global_batch = cfg.train.batch_size;
  } else if (!o.model.empty() && std::filesystem::is_directory(o.model)) {
    // A Hugging Face checkpoint folder: its config.json, planned like a
    // preset; its position limit is the context (--seq to plan another) and
    // 512 sequences the batch (--batch).
    w.model = read_hf_config(o.model).model;
    w.global_batch = 512;
  } else {
    const ModelPreset& p = model_preset(o.model.empty() ? "gpt3-6.7b" : o.model);
    w.model = p.model;
    w.global_batch = p.global_batch;
  }
  if (o.layers) w.model.n_layer = o.layers;
  if (o.d_model) w.model.d_model = o.d_model;
  if (o.heads) w.model.n_head = o.heads;
  if (o.kv_heads) w.model.n_kv_head = o.kv_heads;  // LLaMA only: validate() refuses it for GPT-2
  if (o.ffn) w.model.ffn_hidden = o.ffn;
  if (o.vocab) w.model.vocab_size = o.vocab;
  if (o.seq) w.model.seq_len = o.seq;
  if (o.batch) w.global_batch = o.batch;
  if (o.attention) w.model.attention = *o.attention;
  if (o.lora > 0) w.model.lora = default_lora(w.model, o.lora);
  w.model.validate();
  if (!o.space.pp_layers.empty()) {
    int sum = 0;
    for (int n : o.space.pp_layers) sum += n;
    LOOM_USER_CHECK(sum == w.model.n_layer,
                    "plan: --pp-layers gives %d layers in all, the model has %d (one entry per virtual stage: pp x v "
                    "of them)",
                    sum, w.model.n_layer);
  }
  return w;
}

// --emit-config FILE: plan #1 as a loom config (the model, its batch and
// the layout; the rest from --config or the defaults), checked as
// `loom train` checks it, so that what the planner proposes is what runs.
void emit_config(const PlanOptions& o, const Workload& w, const Layout& l) {
  RunConfig cfg = load_run_config(o.config.empty() ? "" : resolve_path(o.config), o.sets);
  cfg.model = w.model;
  if (l.pp > 1 && l.v == 1) cfg.parallel.schedule = "1f1b";  // the schedule the planner simulated
  cfg = with_layout(cfg, l);
  cfg.validate();
  write_file_atomically(o.emit_config, cfg.to_toml());
  std::printf("\nwrote %s: plan #1 as a loom config; run it with\n  mpirun -np %d loom train --config %s\n",
              o.emit_config.c_str(), l.devices(), o.emit_config.c_str());
}

// `--layout auto` with a loom config: the layout `loom train` should use on
// --ranks processes of this machine, under loom's own constraints.
int plan_loom_layout(const PlanOptions& o) {
  LOOM_USER_CHECK(!o.config.empty() || o.model.empty(), "plan: --layout auto plans a loom run: give --config FILE");
  RunConfig cfg = load_run_config(o.config.empty() ? "" : resolve_path(o.config), o.sets);
  ClusterSpec cluster = o.cluster_given && o.cluster != "local" ? load_cluster(o.cluster, default_root())
                                                                : local_cluster_or_default();
  const Layout p = choose_layout(cfg, o.ranks, cluster);
  const int micro = p.micro_batch;
  const std::string recompute = to_string(p.recompute);
  RunPrediction pred = predict_loom_run(with_layout(cfg, p), o.ranks, cluster);
  std::printf("loom plan --layout auto: %d ranks on %s (%s)\n", o.ranks, cluster.name.c_str(),
              cluster.description.c_str());
  std::printf("chosen: dp %d tp %d pp %d cp %d zero %d, micro-batch %d, recompute %s\n", p.dp, p.tp, p.pp, p.cp,
              p.zero, micro, recompute.c_str());
  std::printf("predicted: %s\n", pred.describe().c_str());
  std::printf("run it:  mpirun -np %d loom train%s%s --set parallel.dp=%d --set parallel.tp=%d --set parallel.pp=%d "
              "%s--set parallel.zero=%d --set train.micro_batch_size=%d --set train.recompute=%s\n",
              o.ranks, o.config.empty() ? "" : " --config ", o.config.c_str(), p.dp, p.tp, p.pp,
              p.cp > 1 ? strprintf("--set parallel.cp=%d ", p.cp).c_str() : "", p.zero, micro, recompute.c_str());
  return 0;
}

}  // namespace

int cmd_plan(const Args& args) {
  const PlanOptions o = parse(args);
  if (o.layout == "auto") return plan_loom_layout(o);
  const auto t0 = std::chrono::steady_clock::now();
  const Workload w = workload(o);
  ClusterSpec nodes = load_cluster(o.cluster, default_root());  // whole nodes, as the file describes them
  if (o.inter_node_gbit > 0) nodes.inter_bandwidth = o.inter_node_gbit * 1e9 / 8;
  ClusterSpec cluster = o.devices > 0 ? with_devices(nodes, o.devices) : nodes;
  cluster.validate(cluster.name);

  const double gib = 1024.0 * 1024.0 * 1024.0;
  std::printf("loom plan: %s, %.2fB parameters (%s), global batch %d x %d tokens\n",
              o.config.empty() ? (o.model.empty() ? "gpt3-6.7b" : o.model.c_str()) : o.config.c_str(),
              double(w.model.num_parameters()) / 1e9, model_summary(w.model).c_str(), w.global_batch, w.seq_len());
  std::printf("cluster: %s: %d node%s x %d devices, %.0f GiB each (%s)\n", cluster.name.c_str(), cluster.nodes,
              cluster.nodes > 1 ? "s" : "", cluster.devices_per_node, cluster.memory_bytes / gib,
              cluster.description.c_str());

  const SearchResult r = search_layouts(w, cluster, o.space, o.top);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (r.top.empty()) {
    LOOM_USER_CHECK(r.have_closest || o.space.pp_layers.empty(),
                    "plan: --pp-layers gives %zu virtual stages: no layout of %d devices has pp x v = %zu (with "
                    "--pp dividing the devices and --v at most 8)",
                    o.space.pp_layers.size(), cluster.devices(), o.space.pp_layers.size());
    LOOM_USER_CHECK(r.have_closest, "no layout of %d devices divides the global batch %d and the model "
                                    "(dp must divide the batch, tp the heads, key/value heads and MLP width, "
                                    "pp at most the layers)",
                    cluster.devices(), w.global_batch);
    // Why, with figures, and the fewest devices of this kind that would do.
    std::printf("\n%s", write_no_fit_memo(w, cluster, r).c_str());
    SearchResult larger;
    const int enough = smallest_fitting_devices(w, nodes, o.space, o.top, cluster.devices(),
                                                64 * std::max(cluster.devices(), nodes.devices_per_node), &larger);
    if (enough > 0) {
      const ClusterSpec bigger = with_devices(nodes, enough);
      std::printf("\nThe fewest %s devices on which it fits: %d (%d node%s). Plans there:\n\n%s\n%s\n",
                  cluster.name.c_str(), enough, bigger.nodes, bigger.nodes > 1 ? "s" : "",
                  format_plan_table(larger.top).c_str(), write_memo(w, bigger, larger.top[0]).c_str());
    }
    if (o.lora < 0 && !w.model.lora.enabled()) {
      // Full training fits nowhere: LoRA on a frozen base, as the engine runs it.
      Workload lora = w;
      lora.model.lora = default_lora(w.model, 16);
      const SearchResult lr = search_layouts(lora, cluster, o.space, o.top);
      if (!lr.top.empty()) {
        std::string targets;
        for (const std::string& t : lora.model.lora.targets) targets += (targets.empty() ? "" : ", ") + t;
        std::printf("\nWith LoRA (rank 16, alpha 32, on %s; the base frozen) it fits on these %d devices (--lora RANK "
                    "plans another rank, --lora 0 never): searched %lld layouts, %lld fit.\n\n%s\n%s",
                    targets.c_str(), cluster.devices(),
                    (long long)lr.considered, (long long)lr.fitting, format_plan_table(lr.top).c_str(),
                    write_memo(lora, cluster, lr.top[0]).c_str());
        if (!o.emit_config.empty()) emit_config(o, lora, lr.top[0].layout);
        return 0;
      }
    }
    const Candidate& c = r.closest;
    throw UserError(strprintf(
        "no layout fits in %d x %.1f GiB: the closest (%s) needs %.1f GiB on pipeline stage %d, %.1f GiB more per "
        "device than there is (parameters %.1f, gradients %.1f, optimizer %.1f, activations %.1f, buffers %.1f, "
        "overhead %.1f GiB); use more or larger devices, a smaller micro-batch or global batch",
        cluster.devices(), cluster.memory_bytes / gib, c.layout.describe().c_str(), c.memory.total() / gib,
        c.memory.stage, (c.memory.total() - cluster.memory_bytes) / gib, c.memory.params / gib, c.memory.grads / gib,
        c.memory.optimizer / gib, c.memory.activations / gib, c.memory.comm_buffers / gib, c.memory.overhead / gib));
  }
  std::printf("searched %lld layouts: %lld fit, %lld timed by simulating their schedule, in %.2f s\n\n",
              (long long)r.considered, (long long)r.fitting, (long long)r.timed, seconds);
  std::printf("%s\n%s", format_plan_table(r.top).c_str(), write_memo(w, cluster, r.top[0]).c_str());
  if (!o.emit_config.empty()) emit_config(o, w, r.top[0].layout);

  if (o.tokens > 0) {
    const double days = o.tokens / r.top[0].time.tokens_per_s / 86400;
    std::printf("Training %.3g tokens takes %.1f days at %.0f tokens/s.\n", o.tokens, days,
                r.top[0].time.tokens_per_s);
    if (o.deadline_days > 0) {
      LOOM_USER_CHECK(days <= o.deadline_days,
                      "the deadline of %.1f days is missed by %.1f days: it needs %.2fx the throughput of the best "
                      "plan, e.g. about %d devices if it scaled linearly",
                      o.deadline_days, days - o.deadline_days, days / o.deadline_days,
                      int(std::ceil(cluster.devices() * days / o.deadline_days)));
      std::printf("Meets the deadline of %.1f days with %.1f days to spare.\n", o.deadline_days,
                  o.deadline_days - days);
    }
  }
  return 0;
}

}  // namespace loom::cli

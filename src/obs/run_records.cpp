#include "obs/run_records.h"

#include <nlohmann/json.hpp>

namespace loom::obs {
namespace {

using nlohmann::json;

// NaN and infinities become null; null (or a missing key) reads back as NaN.
json number(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

double get_number(const json& j, const char* key, double fallback = kUnknown) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return fallback;
  return it->get<double>();
}

template <typename T>
void get_if(const json& j, const char* key, T& out) {
  auto it = j.find(key);
  if (it != j.end() && !it->is_null()) out = it->get<T>();
}

json numbers(const std::vector<double>& v) {
  json a = json::array();
  for (double x : v) a.push_back(number(x));
  return a;
}

std::vector<double> get_numbers(const json& j, const char* key) {
  std::vector<double> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) return out;
  for (const json& x : *it) out.push_back(x.is_number() ? x.get<double>() : kUnknown);
  return out;
}

json number_map(const std::map<std::string, double>& m) {
  json o = json::object();
  for (const auto& [k, v] : m) o[k] = number(v);
  return o;
}

std::map<std::string, double> get_number_map(const json& j, const char* key) {
  std::map<std::string, double> out;
  auto it = j.find(key);
  if (it == j.end() || !it->is_object()) return out;
  for (auto& [k, v] : it->items()) out[k] = v.is_number() ? v.get<double>() : kUnknown;
  return out;
}

}  // namespace

void to_json(json& j, const TimeSplit& t) {
  j = json{{"compute", number(t.compute)},
           {"comm_exposed", number(t.comm_exposed)},
           {"bubble", number(t.bubble)},
           {"optimizer", number(t.optimizer)},
           {"data", number(t.data)}};
}

void from_json(const json& j, TimeSplit& t) {
  t.compute = get_number(j, "compute", 0);
  t.comm_exposed = get_number(j, "comm_exposed", 0);
  t.bubble = get_number(j, "bubble", 0);
  t.optimizer = get_number(j, "optimizer", 0);
  t.data = get_number(j, "data", 0);
}

void to_json(json& j, const StepMetrics& m) {
  j = json{{"step", m.step},
           {"loss", number(m.loss)},
           {"lr", number(m.lr)},
           {"grad_norm", number(m.grad_norm)},
           {"loss_scale", number(m.loss_scale)},
           {"skipped", m.skipped},
           {"step_time_s", number(m.step_time_s)},
           {"tokens_per_s", number(m.tokens_per_s)},
           {"mfu", number(m.mfu)},
           {"peak_mem_bytes", m.peak_mem_bytes},
           {"time_s", m.time}};
  if (m.checkpoint_stall_s > 0) j["checkpoint_stall_s"] = m.checkpoint_stall_s;
  if (m.target_tokens >= 0) j["target_tokens"] = m.target_tokens;
  if (std::isfinite(m.val_loss)) j["val_loss"] = m.val_loss;
  if (!m.busy_s.empty()) j["busy_s"] = m.busy_s;
  if (m.moe.experts > 0)
    j["moe"] = json{{"experts", m.moe.experts}, {"top_k", m.moe.top_k},           {"load_max", number(m.moe.load_max)},
                    {"load_min", number(m.moe.load_min)}, {"aux_loss", m.moe.aux_loss}, {"z_loss", m.moe.z_loss},
                    {"bias_max", m.moe.bias_max}};
  if (m.moe.ep > 1)
    j["moe"].update(json{{"ep", m.moe.ep},
                         {"a2a_ms", m.moe.a2a_ms},
                         {"a2a_hidden_ms", m.moe.a2a_hidden_ms},
                         {"rank_load_max", number(m.moe.rank_load_max)}});
  if (!m.stragglers.empty()) {
    json list = json::array();
    for (const Straggler& s : m.stragglers)
      list.push_back({{"rank", s.rank}, {"ratio", s.ratio}, {"busy_s", s.busy_s}, {"median_s", s.median_s}});
    j["stragglers"] = list;
  }
}

void from_json(const json& j, StepMetrics& m) {
  m = StepMetrics{};
  m.step = j.at("step").get<int64_t>();  // the one field a line cannot do without
  m.loss = get_number(j, "loss");
  m.val_loss = get_number(j, "val_loss");
  m.lr = get_number(j, "lr");
  m.grad_norm = get_number(j, "grad_norm");
  m.loss_scale = get_number(j, "loss_scale", 1);
  get_if(j, "skipped", m.skipped);
  m.step_time_s = get_number(j, "step_time_s");
  m.tokens_per_s = get_number(j, "tokens_per_s");
  m.mfu = get_number(j, "mfu");
  m.checkpoint_stall_s = get_number(j, "checkpoint_stall_s", 0);
  get_if(j, "target_tokens", m.target_tokens);
  get_if(j, "peak_mem_bytes", m.peak_mem_bytes);
  if (auto it = j.find("time_s"); it != j.end() && it->is_object()) m.time = it->get<TimeSplit>();
  get_if(j, "busy_s", m.busy_s);
  if (auto it = j.find("moe"); it != j.end() && it->is_object()) {
    get_if(*it, "experts", m.moe.experts), get_if(*it, "top_k", m.moe.top_k);
    m.moe.load_max = get_number(*it, "load_max"), m.moe.load_min = get_number(*it, "load_min");
    m.moe.aux_loss = get_number(*it, "aux_loss", 0), m.moe.z_loss = get_number(*it, "z_loss", 0);
    m.moe.bias_max = get_number(*it, "bias_max", 0);
    get_if(*it, "ep", m.moe.ep);
    m.moe.a2a_ms = get_number(*it, "a2a_ms", 0), m.moe.rank_load_max = get_number(*it, "rank_load_max");
    m.moe.a2a_hidden_ms = get_number(*it, "a2a_hidden_ms", 0);
  }
  if (auto it = j.find("stragglers"); it != j.end() && it->is_array())
    for (const json& s : *it)
      if (s.is_object())
        m.stragglers.push_back(Straggler{s.value("rank", 0), get_number(s, "ratio"), get_number(s, "busy_s"),
                                         get_number(s, "median_s")});
}

void to_json(json& j, const RunLayout& l) {
  j = json{{"world_size", l.world_size},   {"dp", l.dp},
           {"tp", l.tp},                   {"pp", l.pp},
           {"cp", l.cp},                   {"zero", l.zero},               {"order", l.order},
           {"schedule", l.schedule},       {"micro_batches", l.micro_batches},
           {"virtual_stages", l.virtual_stages}, {"micro_batch_size", l.micro_batch_size},
           {"seq_len", l.seq_len},         {"batch_size", l.batch_size},
           {"dtype", l.dtype},             {"loss_scaling", l.loss_scaling},
           {"ranks_per_node", l.ranks_per_node}, {"nodes", l.nodes}};
  if (l.ep > 1) j["ep"] = l.ep, j["ep_groups"] = l.ep_groups;
  j["dp_reduce"] = l.dp_reduce;
  if (!l.dp_reduce_why.empty()) j["dp_reduce_why"] = l.dp_reduce_why;
}

void from_json(const json& j, RunLayout& l) {
  l = RunLayout{};
  get_if(j, "world_size", l.world_size);
  get_if(j, "dp", l.dp);
  get_if(j, "tp", l.tp);
  get_if(j, "pp", l.pp);
  get_if(j, "cp", l.cp);
  get_if(j, "ep", l.ep);
  get_if(j, "ep_groups", l.ep_groups);
  get_if(j, "zero", l.zero);
  get_if(j, "order", l.order);
  get_if(j, "schedule", l.schedule);
  get_if(j, "micro_batches", l.micro_batches);
  get_if(j, "virtual_stages", l.virtual_stages);
  get_if(j, "micro_batch_size", l.micro_batch_size);
  get_if(j, "seq_len", l.seq_len);
  get_if(j, "batch_size", l.batch_size);
  get_if(j, "dtype", l.dtype);
  get_if(j, "loss_scaling", l.loss_scaling);
  get_if(j, "nodes", l.nodes);
  get_if(j, "ranks_per_node", l.ranks_per_node);
  get_if(j, "dp_reduce", l.dp_reduce);
  get_if(j, "dp_reduce_why", l.dp_reduce_why);
}

void to_json(json& j, const RunSummary& s) {
  j = json{{"finished", s.finished},
           {"steps", s.steps},
           {"wall_s", number(s.wall_s)},
           {"tokens_per_s", number(s.tokens_per_s)},
           {"mfu", number(s.mfu)},
           {"step_s", {{"predicted", number(s.predicted_step_s)}, {"measured", number(s.measured_step_s)}}},
           {"mem_bytes", {{"predicted", number(s.predicted_mem_bytes)}, {"measured", number(s.measured_mem_bytes)}}},
           {"bubble_fraction_per_stage", numbers(s.bubble_fraction_per_stage)},
           {"compute_s_per_stage", numbers(s.compute_s_per_stage)},
           {"exposed_comm_s", number_map(s.exposed_comm_s)},
           {"waited_for_slower_s", number_map(s.waited_for_slower_s)},
           {"overlap", number_map(s.overlap)}};
  if (!s.cpu.empty()) j["cpu"] = s.cpu;
}

void from_json(const json& j, RunSummary& s) {
  s = RunSummary{};
  get_if(j, "finished", s.finished);
  get_if(j, "steps", s.steps);
  s.wall_s = get_number(j, "wall_s");
  s.tokens_per_s = get_number(j, "tokens_per_s");
  s.mfu = get_number(j, "mfu");
  if (auto it = j.find("step_s"); it != j.end() && it->is_object()) {
    s.predicted_step_s = get_number(*it, "predicted");
    s.measured_step_s = get_number(*it, "measured");
  }
  if (auto it = j.find("mem_bytes"); it != j.end() && it->is_object()) {
    s.predicted_mem_bytes = get_number(*it, "predicted");
    s.measured_mem_bytes = get_number(*it, "measured");
  }
  s.bubble_fraction_per_stage = get_numbers(j, "bubble_fraction_per_stage");
  s.compute_s_per_stage = get_numbers(j, "compute_s_per_stage");
  s.exposed_comm_s = get_number_map(j, "exposed_comm_s");
  s.waited_for_slower_s = get_number_map(j, "waited_for_slower_s");
  s.overlap = get_number_map(j, "overlap");
  if (auto it = j.find("cpu"); it != j.end() && it->is_object())
    for (const auto& [k, v] : it->items())
      if (v.is_string()) s.cpu[k] = v.get<std::string>();
}

void to_json(json& j, const RestartRecord& r) {
  j = json{{"attempt", r.attempt},         {"outcome", r.outcome},
           {"reason", r.reason},           {"failed_ranks", r.failed_ranks},
           {"failed_at_step", r.failed_at_step}, {"resumed_step", r.resumed_step},
           {"steps_lost", r.steps_lost},   {"detect_s", number(r.detect_s)},
           {"restart_s", number(r.restart_s)}, {"old_world", r.old_world},
           {"new_world", r.new_world},     {"old_layout", r.old_layout},
           {"new_layout", r.new_layout}};
}

void from_json(const json& j, RestartRecord& r) {
  get_if(j, "attempt", r.attempt);
  get_if(j, "outcome", r.outcome);
  get_if(j, "reason", r.reason);
  get_if(j, "failed_ranks", r.failed_ranks);
  get_if(j, "failed_at_step", r.failed_at_step);
  get_if(j, "resumed_step", r.resumed_step);
  get_if(j, "steps_lost", r.steps_lost);
  r.detect_s = get_number(j, "detect_s");
  r.restart_s = get_number(j, "restart_s");
  get_if(j, "old_world", r.old_world);
  get_if(j, "new_world", r.new_world);
  get_if(j, "old_layout", r.old_layout);
  get_if(j, "new_layout", r.new_layout);
}

}  // namespace loom::obs

// What a run directory holds, as types: the layout (layout.json), one record
// per step (a line of metrics.jsonl) and the end-of-run summary
// (summary.json). Writers (RunDir) and readers (read_run_dir) share these,
// so the files and the code cannot drift apart.
//
// Unknown numbers are NaN in memory and null in JSON (JSON has no NaN), so a
// NaN loss survives the round trip and diagnose can see it.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace loom::obs {

inline constexpr double kUnknown = NAN;

// Where one step's wall time went, in seconds (rank 0's view unless the
// trainer says otherwise). The parts add up to at most the step time.
struct TimeSplit {
  double compute = 0;       // forward + backward + other math on the critical path
  double comm_exposed = 0;  // communication nothing overlapped with
  double bubble = 0;        // pipeline idle time (waiting for a neighbour stage)
  double optimizer = 0;     // clipping, AdamW, parameter all-gather
  double data = 0;          // reading the batch
  double total() const { return compute + comm_exposed + bubble + optimizer + data; }
};

// A rank that computes persistently slower than the others
// (StragglerMonitor).
struct Straggler {
  int rank = 0;
  double ratio = 0;     // its busy time / the median rank's, median over the window
  double busy_s = 0;    // its mean busy time per step over the window
  double median_s = 0;  // the median rank's, same window
};

// One line of metrics.jsonl.
// A mixture of experts' routing in one step, over the whole global batch.
struct MoeStepMetrics {
  int experts = 0, top_k = 0;   // 0 experts: a dense model (nothing recorded)
  double load_max = kUnknown;   // the busiest expert's (token, expert) pairs over the mean, worst layer
  double load_min = kUnknown;   // the idlest expert's over the mean, worst layer (0: an expert got nothing)
  double aux_loss = 0;          // the balancing loss (model.moe_balance = "sequence"), weighted
  double z_loss = 0;            // the router z-loss, weighted
  double bias_max = 0;          // aux_free: the largest |bias|
  // Expert parallelism (ep > 1; else 0 and unknown): the slowest rank's
  // time waiting on the token all-to-alls (the part not hidden), and the
  // busiest rank's received (token, expert) rows over the mean: the ep
  // group's load per rank.
  int ep = 0;
  double a2a_ms = 0;
  double a2a_hidden_ms = 0;  // the exchanges' flight beside the shared expert's work (the most on any rank)
  double rank_load_max = kUnknown;
};

struct StepMetrics {
  int64_t step = 0;              // 1-based, as logged
  double loss = kUnknown;        // training loss of the step (mean over the global batch)
  double val_loss = kUnknown;    // validation loss when evaluated at this step
  double lr = kUnknown;
  double grad_norm = kUnknown;   // global norm before clipping
  double loss_scale = 1;         // 1 when no scaling (fp32, bf16)
  bool skipped = false;          // optimizer step skipped (inf/NaN gradients)
  double step_time_s = kUnknown;  // wall time of the step
  double tokens_per_s = kUnknown;
  int64_t target_tokens = -1;    // targets learned from in the global batch (-1: not recorded)
  double mfu = kUnknown;         // model FLOPs / (step time x peak FLOP/s of the ranks used), in [0, 1]
  double checkpoint_stall_s = 0;  // seconds a checkpoint save held up training this step (0 = no save)
  std::vector<int64_t> peak_mem_bytes;  // per world rank (index = rank)
  TimeSplit time;
  std::vector<double> busy_s;        // per world rank: its own compute in the step (not waits); empty on 1 rank
  std::vector<Straggler> stragglers;  // ranks straggling as of this step
  MoeStepMetrics moe;
};

// layout.json: how the ranks were arranged and how a step was scheduled.
struct RunLayout {
  int world_size = 1;
  int dp = 1, tp = 1, pp = 1;
  int cp = 1;                        // context parallelism: ranks per sequence
  int ep = 1;                        // expert parallelism: ranks the experts are spread over
  std::vector<std::vector<int>> ep_groups;  // ep > 1: each ep group's world ranks (the all-to-all's)
  int zero = 0;                      // ZeRO stage 0, 1, 2
  std::string order = "tp-dp-pp";    // axes innermost first
  std::string schedule = "none";     // "gpipe", "1f1b", "interleaved", or "none" when pp = 1
  int micro_batches = 1;             // per step per pipeline (m)
  int virtual_stages = 1;            // chunks per stage (interleaved)
  int micro_batch_size = 0;          // sequences per micro-batch per replica (0 = unknown)
  int seq_len = 0;                   // tokens per sequence (0 = unknown)
  int batch_size = 0;                // global batch in sequences (0 = unknown)
  std::string dtype = "fp32";        // compute dtype: fp32, bf16, fp16
  bool loss_scaling = false;         // dynamic loss scaling on
  int ranks_per_node = 0;            // 0 = unknown
  int nodes = 0;                     // machines the ranks ran on (0 = unknown)
  // The data group's sums across nodes: "flat" or "hierarchical", and why
  // (parallel.dp_reduce; what "auto" measured at start-up).
  std::string dp_reduce = "flat";
  std::string dp_reduce_why;
};

// summary.json, written once when a run ends.
struct RunSummary {
  bool finished = false;
  int64_t steps = 0;
  double wall_s = kUnknown;
  double tokens_per_s = kUnknown;    // mean over the measured steps
  double mfu = kUnknown;
  double predicted_step_s = kUnknown, measured_step_s = kUnknown;
  double predicted_mem_bytes = kUnknown, measured_mem_bytes = kUnknown;  // peak per rank (max over ranks)
  std::vector<double> bubble_fraction_per_stage;  // index = pipeline stage, share of step time
  std::vector<double> compute_s_per_stage;        // forward+backward seconds per step, per stage
  std::map<std::string, double> exposed_comm_s;   // group ("tp", "dp", "pp") -> seconds per step
  // group -> seconds per step of exposed_comm_s spent waiting for a rank
  // whose compute ended later (a straggler or a noisy core, not the link):
  // "dp" is the wait after backward less its least over the data ranks.
  std::map<std::string, double> waited_for_slower_s;
  std::map<std::string, double> overlap;          // group -> share of its communication hidden, [0, 1]
  // The CPU and the kernels chosen for it (kernels/cpu/isa.h): "model",
  // "flags", "isa", "fp32_gemm", "bf16_gemm", "fp16_gemm", "line".
  std::map<std::string, std::string> cpu;
};

// One line of elastic.jsonl: what `loom elastic` did when a job failed.
struct RestartRecord {
  int attempt = 0;                 // the attempt that failed (1 = the first launch)
  std::string outcome;             // "restarted" or "stopped" (why: reason)
  std::string reason;              // "rank 1 exited on signal 9 (Killed)", "rank 2 hung: ...", ...
  std::vector<int> failed_ranks;   // world ranks of the failed attempt
  int64_t failed_at_step = 0;      // the last step the failed attempt finished
  int64_t resumed_step = -1;       // the checkpoint step the next attempt resumed from (-1: none / stopped)
  int64_t steps_lost = -1;         // failed_at_step - resumed_step
  double detect_s = kUnknown;      // failure to the end of the failed job
  double restart_s = kUnknown;     // end of the failed job to the next attempt resuming
  int old_world = 0, new_world = 0;
  std::string old_layout, new_layout;  // "dp 4 x tp 1 x pp 1, ZeRO-0, micro-batch 2"
};

void to_json(nlohmann::json& j, const TimeSplit& t);
void from_json(const nlohmann::json& j, TimeSplit& t);
void to_json(nlohmann::json& j, const StepMetrics& m);
void from_json(const nlohmann::json& j, StepMetrics& m);
void to_json(nlohmann::json& j, const RunLayout& l);
void from_json(const nlohmann::json& j, RunLayout& l);
void to_json(nlohmann::json& j, const RunSummary& s);
void from_json(const nlohmann::json& j, RunSummary& s);
void to_json(nlohmann::json& j, const RestartRecord& r);
void from_json(const nlohmann::json& j, RestartRecord& r);

}  // namespace loom::obs

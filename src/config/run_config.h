// The typed configuration of a run, read from TOML with --set overrides.
//
// Every field has a default (the default training job); a TOML file and
// `--set section.key=value` overrides replace them. Unknown fields, wrong
// types and out-of-range values raise UserError naming the field and file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "precision/loss_scaler.h"
#include "precision/policy.h"

namespace loom {

// The [train] table, by concern (one TOML table; the parts only group the
// fields for the code that reads them).

// What is trained, on how much data, and how the optimizer steps.
struct OptimizationSettings {
  int batch_size = 8;     // sequences per step (the global batch, over every replica)
  int micro_batch_size = 0;  // sequences per forward/backward on one replica; 0 = batch_size / dp
                             // (gradient accumulation steps = batch_size / (dp x micro_batch_size))
  int steps = 300;
  float lr = 1.5e-3f;     // peak learning rate
  float min_lr = 1.5e-4f; // end of the cosine decay
  int warmup_steps = 20;
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;  // global-norm clip; 0 disables
  int64_t seed = 1337;
  // Activation recomputation (model/recompute.h): "none", "selective" (the
  // attention core) or "full" (each block from its input).
  std::string recompute = "none";
  // Shell-style patterns of global tensor names (e.g. "wte.weight",
  // "h.[0-5].*"): those tensors are frozen (model/param_groups.h): no
  // gradients, no optimizer state, their values never change.
  std::vector<std::string> freeze;
  // "hf:DIR": start from a Hugging Face checkpoint folder (config.json +
  // safetensors): the model is the checkpoint's, its weights are read into
  // the run's layout, the optimizer and the data order start fresh. ""
  // none. A resumed run takes its weights from its own checkpoint.
  std::string init_from;
  // A LoRA run's adapters from a PEFT adapter folder (adapter_config.json +
  // adapter_model.safetensors, written by PEFT or `loom export --format
  // peft`) instead of fresh ones; its r, lora_alpha, target_modules and bias
  // must be the run's [lora]. "" none.
  std::string init_adapter;
  Recompute recompute_mode() const { return parse_recompute(recompute); }
};

// What the run prints and measures along the way.
struct ProgressSettings {
  int eval_every = 100;    // validation loss every N steps (and at the end); 0 disables
  int eval_batches = 8;
  int log_every = 20;
  int sample_tokens = 48;              // at the end, rank 0 prints this many sampled tokens (0 = none;
  std::string sample_prompt = "The";   // needs tp = pp = 1: the whole model on one rank) after this prompt
};

// What the run leaves on disk: its run directory and its checkpoints.
struct RecordSettings {
  std::string run_dir = "runs";  // `loom train` writes runs/<run_name> here (metrics, trace); "" = none
  std::string run_name;          // "" = the start time, YYYYmmdd-HHMMSS
  // TensorBoard event files in the run directory beside metrics.jsonl.
  bool tensorboard = true;
  // Every rank appends its finished trace spans to <run dir>/trace/rank-R.jsonl
  // every N steps (0 = only trace.json at the end), so a killed run keeps them.
  int trace_flush_every = 10;
  int checkpoint_every = 0;      // save every N steps (and at the end); 0 = never
  std::string checkpoint_dir = "checkpoints";  // step_N/ folders and `latest` (what --resume auto reads)
  int keep_checkpoints = 3;      // the newest N are kept
  // Saves copy the state at the step boundary and write it on a thread per
  // rank while training goes on; false: every rank waits until it is on disk.
  bool async_checkpoint = true;
};

// The run's health: bad losses and slow ranks.
struct HealthSettings {
  // Loss guard: a non-finite loss, or one guard_z standard deviations above
  // the mean of the last guard_window accepted ones, skips the step;
  // guard_max_skips in a row roll back to the last checkpoint past that data.
  int guard_window = 50;
  float guard_z = 6;             // 0 = spikes are not judged (non-finite losses still are)
  int guard_warmup = 20;
  int guard_max_skips = 3;
  // A rank whose compute per step, over the last straggler_window steps, is
  // above straggler_factor x the median rank's is named (log, metrics,
  // diagnose). 0 = off.
  float straggler_factor = 1.2f;
  int straggler_window = 10;
};

struct TrainConfig : OptimizationSettings, ProgressSettings, RecordSettings, HealthSettings {};

struct DataConfig {
  std::string path = ".cache/data";  // shards: a `loom prepare` output folder; bytes: a text file
  std::string format = "shards";     // "shards" (SentencePiece tokens) or "bytes" (one token per byte)
  float val_fraction = 0.1f;         // bytes only: the held-out tail (shards are split by prepare)
  // How rows are cut: "windows" (seq_len + 1 tokens tiling the stream) or,
  // for instruction data, "padded" (one sample a row, from its start,
  // the rest of the row ignored) or "packed" (samples end to end, as many
  // as fit; attention keeps them apart): samples never see each other.
  std::string rows = "windows";
  // padded / packed: a sample longer than seq_len + 1 is "truncate"d or "skip"ped.
  std::string long_samples = "truncate";
};

struct ParallelConfig {
  int dp = 0;  // data-parallel replicas; 0 = world size / (tp * pp)
  int tp = 1;  // tensor-parallel ranks per layer
  int pp = 1;  // pipeline stages
  int cp = 1;  // context parallelism: ranks each sequence is split over (ring attention, parallel/cp/)
  // Expert parallelism: ranks of the data group (dp x cp) the experts are
  // spread over, E / ep each, tokens exchanged by all-to-all (model/moe/).
  int ep = 1;
  bool sequence_parallel = false;  // tp > 1: norms and residuals hold 1/tp of the tokens
  std::string schedule = "1f1b";   // pipeline schedule: "1f1b", "gpipe" or "interleaved"
  int virtual_stages = 1;          // model chunks per pipeline stage (interleaved schedule)
  std::vector<int> pp_layers;      // blocks per (virtual) stage; empty = balanced by cost
  std::string order = "tp-dp-pp";  // rank order, innermost axis first
  int zero = 0;          // ZeRO stage: 0 replicated optimizer, 1 sharded optimizer state and master weights,
                         // 2 also sharded gradients, 3 also sharded parameters (gathered per block)
  float bucket_mb = 4;   // MiB of gradients per reduction bucket (reductions overlap backward)
  // The data group's sums across nodes: "flat" (one all-reduce), "hierarchical"
  // (in each node, between nodes, back in each node) or "auto" (timed at
  // start-up where it applies; parallel/grid/dp_hierarchy.h).
  std::string dp_reduce = "auto";
};

// Mixed precision (docs/precision.md): matrix products and stored
// activations in `compute`; master weights, AdamW moments, gradients,
// layernorm statistics, softmax, the loss and norms stay fp32.
struct PrecisionConfig {
  std::string compute = "fp32";  // "fp32", "bf16" or "fp16"
  std::string loss_scale;        // "off", "fixed" or "dynamic"; "" = dynamic for fp16, off otherwise
  float initial_scale = 65536;   // 2^16; the constant scale when fixed
  float growth_factor = 2;
  float backoff_factor = 0.5f;
  int growth_interval = 1000;    // clean steps in a row before the scale grows
  int hysteresis = 2;            // overflowing steps tolerated before it backs off
  float min_scale = 1;
  bool allow_unscaled_fp16 = false;  // fp16 with loss_scale = "off" is refused unless this is true
  std::string grad_reduce = "fp32";  // "fp32" or "bf16": the dtype of the data-parallel gradient reduction

  ComputePrecision compute_precision() const { return parse_compute_precision(compute); }
  LossScaleMode loss_scale_mode() const;
  LossScalerOptions scaler_options() const;
};

struct RuntimeConfig {
  int threads = 0;             // OpenMP / oneDNN threads per rank; 0 = all cores / ranks per node
  std::string isa = "auto";    // highest instruction set the kernels may use (kernels/cpu/isa.h)
  float comm_timeout_s = 300;  // a communication not done by then aborts the job, naming what waited; 0 = never
  // A communication thread per rank completes the non-blocking operations
  // (gradient buckets, ZeRO gathers, pipeline transfers, the ring, the
  // expert all-to-all) while compute runs (comm/progress_engine.h), polling
  // every progress_poll_us; false: the training thread drives them between
  // kernels. Off by default: where ranks x threads fill the cores it takes
  // their time (`loom bench scaling --progress on,off` measures it).
  bool progress_thread = false;
  int progress_poll_us = 50;
  // A rank whose flight-record heartbeat (stamped every 0.5 s by a thread of
  // its own) is older than this when a deadline expires is frozen (stopped,
  // not dead: SIGSTOP, a cgroup freeze, a debugger) and is the one named; a
  // rank busy in a long kernel or an fsync keeps stamping. At most half of
  // comm_timeout_s is used (a frozen rank must look stale when the deadline
  // of the rank waiting on it expires).
  float heartbeat_stale_s = 3;
};

struct RunConfig {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  ParallelConfig parallel;
  PrecisionConfig precision;
  RuntimeConfig runtime;

  // Checks ranges and cross-field rules; throws UserError naming the field.
  void validate() const;
  std::string to_toml() const;
};

// Reads `path` (empty: defaults only), then applies "key=value" overrides.
// `origin` in messages is the file name or "--set".
RunConfig load_run_config(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace loom

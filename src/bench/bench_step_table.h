// `loom bench step` with --precision / --torch-autocast: the measured runs of
// one (shape, threads) and the table that shows them, one row per run, with
// each loom precision against loom fp32 and against PyTorch at the same
// precision. (Without those flags bench_cmd.cpp prints its original table.)
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "precision/policy.h"

namespace loom::cli {

// One child's JSON line, parsed; ok is false if it failed or printed none.
struct StepResult {
  bool ok = false;
  double tokens_per_s = 0, peak_rss_mb = 0;
  double activation_mib = -1;  // loom only: StageModule::activation_bytes()
  int skipped = 0;             // loom fp16: steps whose gradients overflowed
  std::string torch_version;   // PyTorch rows: the version that ran them
};
StepResult parse_step_result(const std::string& json_line);

struct PrecisionGroup {
  std::string shape;
  int threads = 0, steps = 0;
  std::vector<std::pair<ComputePrecision, StepResult>> loom;  // in --precision order
  bool pytorch = false, autocast = false, compiled = false;   // which torch rows were run
  StepResult torch, torch_best, torch_bf16;  // as the environment is; torch*; bf16 autocast
  StepResult torch_compiled, torch_compiled_bf16;  // torch.compile: fp32; bf16 autocast (with autocast)
};

void print_precision_header();
void print_precision_columns(bool compiled);  // the column names, with "vs torch.c" under --torch-compile
void print_precision_group(const PrecisionGroup& g);

}  // namespace loom::cli

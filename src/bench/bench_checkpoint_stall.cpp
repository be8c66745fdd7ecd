// `loom bench checkpoint`, second part: how long a save holds up training,
// synchronous against asynchronous (train.async_checkpoint), for one rank
// holding a whole model's fp32 parameters and AdamW moments (the shape of
// a planner preset, gpt2-124m by default, or of a run config's [model]),
// written to the same disk.
//
// Synchronous: the rank file (sha256 while writing, fsync) and the commit,
// all while training waits. Asynchronous: what TrainCheckpoints does at the
// step boundary, a copy into buffers kept from save to save, then a thread
// writes and commits (timed apart, as "background write").
#include "bench/bench_checkpoint_stall.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/layout_pieces.h"
#include "config/run_config.h"
#include "core/check.h"
#include "model/param_layout.h"
#include "planner/model_presets.h"
#include "train/background_save.h"

namespace loom::cli {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

ModelConfig stall_bench_model(const std::string& name) {
  if (name.size() > 5 && name.compare(name.size() - 5, 5, ".toml") == 0) return load_run_config(name, {}).model;
  for (const planner::ModelPreset& p : planner::model_presets())
    if (p.name == name) return p.model;
  throw UserError(strprintf("bench checkpoint: --stall-model '%s' is not a model preset (%s), a run config "
                            "(NAME.toml) or none",
                            name.c_str(), planner::model_preset_names().c_str()));
}

void bench_checkpoint_stall(const std::string& model_name, const std::string& dir, int repeat) {
  const ModelConfig model = stall_bench_model(model_name);
  const ParamLayout layout = ParamLayout::for_model(model);
  const size_t n = size_t(layout.total);
  // Parameters and both moments, with values that are not all alike.
  std::vector<float> params(n), m(n), v(n);
  for (size_t i = 0; i < n; i++)
    params[i] = float(int64_t(i * 2654435761u) % 1000) * 1e-3f, m[i] = params[i] * 1e-2f, v[i] = params[i] * 1e-4f;
  std::vector<CheckpointPiece> pieces = layout_pieces(layout, params.data());
  for (auto [prefix, data] : {std::pair{"adam.m.", m.data()}, std::pair{"adam.v.", v.data()}}) {
    auto p = layout_pieces(layout, data, prefix);
    pieces.insert(pieces.end(), p.begin(), p.end());
  }
  const double bytes = 3.0 * double(n) * 4;
  std::printf("\nstall of a save, one rank holding %s (%.1fM parameters, fp32 parameters + AdamW moments: %.0f MB), "
              "in %s; median of %d:\n",
              model_name.c_str(), double(n) / 1e6, bytes / 1e6, dir.c_str(), repeat);
  CheckpointManifest manifest;
  manifest.config_toml = "# bench\n";

  std::vector<double> sync_s, async_stall_s, background_s;
  const std::string root = dir + "/stall";
  int64_t step = 1;
  BackgroundSave background;  // its buffers are kept from save to save, as in training
  double first_stall = 0;
  // Saves alternate (the disk's state drifts as it fills); the first
  // asynchronous one allocates its buffers and is shown apart.
  for (int r = -1; r < repeat; r++) {
    if (r >= 0) {
      manifest.step = step;
      auto t0 = std::chrono::steady_clock::now();
      CheckpointWriter writer(root, step++);
      writer.write_rank_file(0, pieces);
      writer.commit(manifest, {0}, 1);
      sync_s.push_back(seconds_since(t0));
    }
    SaveJob job;
    job.root = root, job.step = step, job.writes = true, job.writer_ranks = {0}, job.keep_last = 1;
    manifest.step = step++;
    auto t0 = std::chrono::steady_clock::now();
    background.snapshot(pieces);
    job.manifest = manifest;
    background.start(std::move(job));
    const double stall = seconds_since(t0);
    const SaveOutcome outcome = background.finish();
    LOOM_USER_CHECK(outcome.write_error.empty() && outcome.commit_error.empty(), "bench checkpoint: %s%s",
                    outcome.write_error.c_str(), outcome.commit_error.c_str());
    if (r < 0) first_stall = stall;
    else async_stall_s.push_back(stall), background_s.push_back(outcome.seconds);
  }
  remove_tree(root);

  const double sync = median(sync_s), stall = median(async_stall_s);
  std::printf("  %-28s %8.3f s %9.1f MB/s   training waits for all of it\n", "sync save (stall)", sync,
              bytes / 1e6 / sync);
  std::printf("  %-28s %8.3f s %9.1f MB/s   copy into kept buffers at the step boundary\n", "async save (stall)", stall,
              bytes / 1e6 / stall);
  std::printf("  %-28s %8.3f s                  first save: the buffers are allocated too\n", "async first save (stall)",
              first_stall);
  std::printf("  %-28s %8.3f s %9.1f MB/s   write + sha256 + commit on its own thread\n", "async background write",
              median(background_s), bytes / 1e6 / median(background_s));
  std::printf("  async stall / sync save: %.3f (target <= 0.10)\n", stall / sync);
}

}  // namespace loom::cli

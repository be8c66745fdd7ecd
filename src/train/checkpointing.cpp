#include "train/checkpointing.h"

#include <chrono>
#include <cstring>
#include <functional>

#include "checkpoint/base_fingerprint.h"
#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/model_fields.h"
#include "comm/broadcast_text.h"
#include "core/check.h"

namespace loom {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The ranks that write a file: the same rule every rank evaluates (and
// Replica::writes_checkpoint: the data group's first rank, dp 0 and cp 0,
// each expert-data group's first rank (expert parallelism: the first ep
// ranks of the data group), or every rank under ZeRO).
std::vector<int> writer_ranks(const ParallelContext& ctx, int zero) {
  std::vector<int> ranks;
  for (int r = 0; r < ctx.grid().world_size(); r++) {
    const GridCoord c = ctx.grid().coord(r);
    if (ctx.grid().data_index(c) < ctx.grid().ep() || zero > 0) ranks.push_back(r);
  }
  return ranks;
}

}  // namespace

TrainCheckpoints::TrainCheckpoints(const RunConfig& cfg, const ParallelContext& ctx) : cfg_(cfg), ctx_(ctx) {}

TrainPosition TrainCheckpoints::resume(const std::string& spec, Replica& replica, FILE* log) {
  settle(log);  // a rollback reads the checkpoint that may still be being written
  if (spec.empty() || spec == "none") return {};
  // Rank 0 chooses (hashing every candidate file once) and tells the others;
  // a bad explicit checkpoint fails every rank with rank 0's message.
  std::string dir, error;
  if (ctx_.is_logging_rank()) {
    try {
      ResumeChoice choice = resolve_resume(spec, cfg_.train.checkpoint_dir);
      for (const std::string& w : choice.warnings)
        if (log) std::fprintf(log, "resume: skipped %s\n", w.c_str());
      dir = choice.dir;
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  error = broadcast_text(ctx_.world(), error, 0);
  LOOM_USER_CHECK(error.empty(), "%s", error.c_str());
  dir = broadcast_text(ctx_.world(), dir, 0);
  if (dir.empty()) {
    if (log) std::fprintf(log, "resume: no checkpoint under %s, starting fresh\n", cfg_.train.checkpoint_dir.c_str());
    return {};
  }
  Checkpoint checkpoint = Checkpoint::open(dir);
  last_ = dir;
  checkpoint.check_model(model_fields(cfg_.model));
  const CheckpointManifest& m = checkpoint.manifest();
  LOOM_USER_CHECK(m.seed == cfg_.train.seed,
                  "checkpoint %s was trained with train.seed = %lld; this run has %lld (the data order would differ)",
                  dir.c_str(), (long long)m.seed, (long long)cfg_.train.seed);
  // LoRA: the checkpoint holds the adapters only; they go on the base they
  // were trained on (rank 0 judges, every rank gets its verdict).
  std::string base_error;
  if (cfg_.model.lora.enabled() && ctx_.is_logging_rank()) {
    const std::string there = m.extra.value("lora_base", std::string("(none recorded)"));
    if (there != base_identity())
      base_error = strprintf("checkpoint %s holds LoRA adapters trained on the base '%s'; this run's base is '%s' "
                             "(train.init_from = \"%s\"): resume on the base the adapters were trained on",
                             dir.c_str(), there.c_str(), base_identity().c_str(), cfg_.train.init_from.c_str());
  }
  base_error = broadcast_text(ctx_.world(), base_error, 0);
  LOOM_USER_CHECK(base_error.empty(), "%s", base_error.c_str());
  TrainPosition position{m.data.step, m.extra.value("data_skip", int64_t(0)),
                         m.extra.value("loss_guard", nlohmann::json::object())};
  replica.load(checkpoint, m.extra.value("adam_steps", 0));
  // The loss scaler's state (mixed precision); a checkpoint from a run
  // without one leaves the configured initial state.
  if (!m.loss_scaler.empty()) replica.scaler().load_state(m.loss_scaler);
  if (log)
    std::fprintf(log, "resume: %s (step %lld, written by dp %d x tp %d x pp %d, ZeRO-%d)\n", dir.c_str(),
                 (long long)position.next_step, m.layout.dp, m.layout.tp, m.layout.pp, m.layout.zero),
        std::fflush(log);  // a supervisor times the restart by this line
  return position;
}

CheckpointManifest TrainCheckpoints::manifest(const TrainPosition& position, Replica& replica) const {
  CheckpointManifest m;
  m.step = position.next_step;
  m.config_toml = cfg_.to_toml();
  m.model = model_fields(cfg_.model);
  m.model_real = model_real_fields(cfg_.model);
  const ParallelGrid& g = ctx_.grid();
  // dp: the data group (dp x cp ranks share a replica and its ZeRO shards).
  m.layout = {g.dp() * g.cp(), g.tp(), g.pp(), cfg_.parallel.zero, cfg_.parallel.order, g.world_size()};
  m.data = {position.next_step, position.next_step * cfg_.train.batch_size};
  m.seed = cfg_.train.seed;
  m.loss_scaler = replica.scaler().state();
  m.extra = {{"adam_steps", replica.adam_steps()}, {"data_skip", position.data_skip}, {"loss_guard", position.guard}};
  // LoRA: the adapters alone are written; their base is named.
  if (cfg_.model.lora.enabled()) m.extra["lora_base"] = base_identity();
  return m;
}

const std::string& TrainCheckpoints::base_identity() const {
  if (base_identity_.empty()) base_identity_ = lora_base_identity(cfg_.train.init_from, cfg_.train.seed);
  return base_identity_;
}

void TrainCheckpoints::save(const TrainPosition& position, Replica& replica, const FaultPlan& faults, FILE* log) {
  const auto t0 = Clock::now();
  if (cfg_.train.async_checkpoint) save_in_background(position, replica, faults, log);
  else save_now(position, replica, faults, log);
  stall_step_ = position.next_step;
  stall_s_ = seconds_since(t0);
  if (cfg_.train.async_checkpoint) in_flight_stall_s_ = stall_s_;
  else if (log) std::fprintf(log, "checkpoint: %s (training stalled %.3f s)\n", last_.c_str(), stall_s_), std::fflush(log);
}

void TrainCheckpoints::save_now(const TrainPosition& position, Replica& replica, const FaultPlan& faults, FILE* log) {
  const std::string& root = cfg_.train.checkpoint_dir;
  CheckpointWriter writer(root, position.next_step);
  if (replica.writes_checkpoint()) {
    std::function<void()> half_written;
    if (faults.kill_in_save(position.next_step, ctx_.rank()))
      half_written = [&] { FaultPlan::die_in_save(position.next_step, ctx_.rank()); };
    writer.write_rank_file(ctx_.rank(), replica.checkpoint_pieces(), half_written);
  }
  ctx_.world().barrier();
  std::string error;
  if (ctx_.is_logging_rank()) {
    try {
      writer.commit(manifest(position, replica), writer_ranks(ctx_, cfg_.parallel.zero), cfg_.train.keep_checkpoints);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  error = broadcast_text(ctx_.world(), error, 0);
  LOOM_USER_CHECK(error.empty(), "saving a checkpoint: %s", error.c_str());
  last_ = writer.final_dir();
}

void TrainCheckpoints::save_in_background(const TrainPosition& position, Replica& replica, const FaultPlan& faults,
                                          FILE* log) {
  settle(log);  // the last save: finished on every rank (and committed), or a UserError on every rank
  const int64_t step = position.next_step;
  CheckpointWriter writer(cfg_.train.checkpoint_dir, step);
  // The lead commits when every rank's note is there, without a barrier: a
  // crashed earlier attempt at this step must not leave notes behind.
  if (ctx_.is_logging_rank()) remove_tree(writer.staging_dir());
  ctx_.world().barrier();
  SaveJob job;
  job.root = cfg_.train.checkpoint_dir;
  job.step = step;
  job.rank = ctx_.rank();
  job.writes = replica.writes_checkpoint();
  job.kill_half_way = job.writes && faults.kill_in_save(step, ctx_.rank());
  if (job.writes) background_.snapshot(replica.checkpoint_pieces());  // the state as of this step boundary
  if (ctx_.is_logging_rank()) {
    job.manifest = manifest(position, replica);
    job.writer_ranks = writer_ranks(ctx_, cfg_.parallel.zero);
    job.keep_last = cfg_.train.keep_checkpoints;
    // No deadline for the other writers: a large shard on a slow file system
    // may take longer than any communication timeout; a dead rank ends the
    // job, and the next save's (or the end's) agreement cancels the wait
    // when another rank's file failed.
    job.notes_timeout_s = 0;
  }
  background_.start(std::move(job));
  in_flight_ = true;
  in_flight_step_ = step;
  last_ = writer.final_dir();
}

void TrainCheckpoints::settle(FILE* log) {
  if (!in_flight_) return;
  in_flight_ = false;
  Communicator& world = ctx_.world();
  const std::string dir = CheckpointWriter(cfg_.train.checkpoint_dir, in_flight_step_).final_dir();
  const std::string write_error = background_.wait_written();
  // The lowest rank whose file failed (0: none), to every rank; then the
  // lead stops waiting for the files that will not come.
  const int world_size = ctx_.grid().world_size();
  float failed = write_error.empty() ? 0.f : float(world_size - ctx_.rank());
  world.all_reduce(&failed, 1, DType::f32, ReduceOp::Max);
  if (failed > 0) background_.cancel_commit();
  const SaveOutcome outcome = background_.finish();
  if (failed > 0) {
    const int from = world_size - int(failed);
    const std::string message = broadcast_text(world, write_error, from);
    throw UserError(strprintf("checkpoint %s, saved in the background, failed on rank %d: %s", dir.c_str(), from,
                              message.c_str()));
  }
  const std::string commit_error = broadcast_text(world, outcome.commit_error, 0);
  LOOM_USER_CHECK(commit_error.empty(), "checkpoint %s, saved in the background, failed: %s", dir.c_str(),
                  commit_error.c_str());
  if (log)
    std::fprintf(log, "checkpoint: %s (training stalled %.3f s; written in the background in %.2f s)\n",
                 outcome.dir.c_str(), in_flight_stall_s_, outcome.seconds),
        std::fflush(log);
}

void TrainCheckpoints::finish(FILE* log) { settle(log); }

}  // namespace loom

#include "train/checkpointing.h"

#include <cstring>

#include "checkpoint/checkpoint_reader.h"
#include "checkpoint/checkpoint_writer.h"
#include "checkpoint/model_fields.h"
#include "core/check.h"

namespace loom {

namespace {

// Rank 0's string to every rank (as 16-bit words: a broadcast copies them).
std::string broadcast_string(Communicator& world, const std::string& s) {
  float length = float(s.size());
  world.broadcast(&length, 1, DType::f32, 0);
  std::vector<uint16_t> words((size_t(length) + 1) / 2, 0);
  if (world.rank() == 0) std::memcpy(words.data(), s.data(), s.size());
  if (!words.empty()) world.broadcast(words.data(), words.size(), DType::bf16, 0);
  return std::string(reinterpret_cast<const char*>(words.data()), size_t(length));
}

// The ranks that write a file: the same rule every rank evaluates.
std::vector<int> writer_ranks(const ParallelContext& ctx, int zero) {
  std::vector<int> ranks;
  for (int r = 0; r < ctx.grid().world_size(); r++)
    if (ctx.grid().coord(r).dp == 0 || zero > 0) ranks.push_back(r);
  return ranks;
}

}  // namespace

TrainCheckpoints::TrainCheckpoints(const RunConfig& cfg, const ParallelContext& ctx) : cfg_(cfg), ctx_(ctx) {}

TrainPosition TrainCheckpoints::resume(const std::string& spec, Replica& replica, FILE* log) {
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
  error = broadcast_string(ctx_.world(), error);
  LOOM_USER_CHECK(error.empty(), "%s", error.c_str());
  dir = broadcast_string(ctx_.world(), dir);
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
  TrainPosition position{m.data.step, m.extra.value("data_skip", int64_t(0)),
                         m.extra.value("loss_guard", nlohmann::json::object())};
  replica.load(checkpoint, m.extra.value("adam_steps", 0));
  // The loss scaler's state (mixed precision); a checkpoint from a run
  // without one leaves the configured initial state.
  if (!m.loss_scaler.empty()) replica.scaler().load_state(m.loss_scaler);
  if (log)
    std::fprintf(log, "resume: %s (step %lld, written by dp %d x tp %d x pp %d, ZeRO-%d)\n", dir.c_str(),
                 (long long)position.next_step, m.layout.dp, m.layout.tp, m.layout.pp, m.layout.zero);
  return position;
}

void TrainCheckpoints::save(const TrainPosition& position, Replica& replica, FILE* log) {
  const std::string& root = cfg_.train.checkpoint_dir;
  CheckpointWriter writer(root, position.next_step);
  if (replica.writes_checkpoint()) writer.write_rank_file(ctx_.rank(), replica.checkpoint_pieces());
  ctx_.world().barrier();
  std::string error;
  if (ctx_.is_logging_rank()) {
    CheckpointManifest m;
    m.step = position.next_step;
    m.config_toml = cfg_.to_toml();
    m.model = model_fields(cfg_.model);
    m.model_real = model_real_fields(cfg_.model);
    const ParallelGrid& g = ctx_.grid();
    m.layout = {g.dp(), g.tp(), g.pp(), cfg_.parallel.zero, cfg_.parallel.order, g.world_size()};
    m.data = {position.next_step, position.next_step * cfg_.train.batch_size};
    m.seed = cfg_.train.seed;
    m.loss_scaler = replica.scaler().state();
    m.extra = {{"adam_steps", replica.adam_steps()}, {"data_skip", position.data_skip}, {"loss_guard", position.guard}};
    try {
      CommitResult r = writer.commit(m, writer_ranks(ctx_, cfg_.parallel.zero), cfg_.train.keep_checkpoints);
      if (log) std::fprintf(log, "checkpoint: %s\n", r.dir.c_str()), std::fflush(log);
    } catch (const UserError& e) {
      error = e.what();
    }
  }
  error = broadcast_string(ctx_.world(), error);
  LOOM_USER_CHECK(error.empty(), "saving a checkpoint: %s", error.c_str());
  last_ = writer.final_dir();
}

}  // namespace loom

// A pipeline stage's chunks sharing their activation sets (issue 20, ZB-V
// and interleaved): slot k is the same memory in every chunk (but for the
// message buffers), the pool is
// what the planner's planned_shared_activation_bytes says, and it is
// smaller than the chunks' own allocations of the same slots.
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "config/run_config.h"
#include "kernels/cpu/host_memory.h"
#include "model/stage_module.h"

namespace loom {
namespace {

TEST(SharedActivations, ChunksShareEverySlotAndTheWorkSpace) {
  for (const char* family : {"gpt2", "llama"}) {
    SCOPED_TRACE(family);
    const RunConfig cfg = load_run_config(
        std::string(family) == "llama" ? LOOM_SOURCE_DIR "/configs/llama-tiny.toml" : LOOM_SOURCE_DIR "/configs/tiny.toml",
        {"model.n_layer=4", "model.vocab_size=300", "model.seq_len=16", "runtime.threads=1"});
    // ZB-V's stage 0 at pp 2: blocks 0-1 with the embedding, 2-3 with the head.
    ModelShard first, last;
    first.end_layer = 2, first.head = false;
    last.first_layer = 2, last.embedding = false;
    const std::vector<ModelShard> chunks = {first, last};
    const int slots = 3, B = 2, T = cfg.model.seq_len;
    cpu::HostMemory host;  // the pool's memory
    SharedActivations pool;
    std::vector<std::unique_ptr<StageModule>> modules;
    size_t separate = 0;
    for (const ModelShard& shard : chunks) {
      StageBuffers buffers;
      buffers.slots = slots, buffers.shared_activations = &pool;
      modules.push_back(make_stage_module(cfg.model, shard, TensorParallel{}, B, T, buffers));
      separate += planned_activation_bytes(cfg.model, shard, B, T, slots, ComputePrecision::fp32, Recompute::none);
    }
    pool.allocate(host);
    size_t total = pool.bytes();
    for (const auto& m : modules) total += m->activation_bytes();
    EXPECT_EQ(total, planned_shared_activation_bytes(cfg.model, chunks, B, T, slots, ComputePrecision::fp32,
                                                     Recompute::none));
    EXPECT_LT(double(total), 0.7 * double(separate));
    // Message buffers stay each chunk's own (a gradient send may be in
    // flight when another chunk takes the slot).
    for (int k = 0; k < slots; k++) {
      EXPECT_NE(modules[0]->stage_input(k), modules[1]->stage_input(k)) << "slot " << k;
      EXPECT_NE(modules[0]->stage_grad(k), modules[1]->stage_grad(k)) << "slot " << k;
    }
  }
}

}  // namespace
}  // namespace loom

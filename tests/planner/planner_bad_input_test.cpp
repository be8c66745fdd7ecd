// Impossible requests: a clear message saying what would be needed, exit code 2.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "cli/run_loom.h"
#include "core/check.h"
#include "planner/cluster.h"
#include "planner/model_presets.h"
#include "planner/search.h"

namespace loom::planner {
namespace {

const char* kGoodCluster = R"(
name = "t"
nodes = 2
devices_per_node = 4
[device]
memory_gib = 16
peak_tflops_fp32 = 10
peak_tflops_bf16 = 100
memory_gbps = 900
overhead_gib = 1
[intra_node]
bandwidth_gbps = 100
latency_us = 5
[inter_node]
bandwidth_gbit = 100
latency_us = 10
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

void expect_user_error(const std::string& text, const std::string& words) {
  try {
    parse_cluster_toml(text, "test.toml");
    ADD_FAILURE() << "accepted: " << words;
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(PlannerBadInput, ClusterFilesThatCannotTrain) {
  ClusterSpec c = parse_cluster_toml(kGoodCluster, "test.toml");
  EXPECT_EQ(c.devices(), 8);
  EXPECT_DOUBLE_EQ(c.inter_bandwidth, 100e9 / 8);
  expect_user_error(replaced(kGoodCluster, "devices_per_node = 4", "devices_per_node = 0"), "devices_per_node");
  expect_user_error(replaced(kGoodCluster, "nodes = 2", "nodes = 0"), "no devices");
  expect_user_error(replaced(kGoodCluster, "bandwidth_gbps = 100", "bandwidth_gbps = 0"), "intra_node.bandwidth_gbps");
  expect_user_error(replaced(kGoodCluster, "bandwidth_gbit = 100", "bandwidth_gbit = 0"), "inter_node.bandwidth_gbit");
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 0"), "device.memory_gib");
  expect_user_error(replaced(kGoodCluster, "latency_us = 5", "latncy_us = 5"), "intra_node.latncy_us");
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = \"lots\""), "device.memory_gib");
  expect_user_error("nodes = [", "test.toml");
  // Finite in the file, but not once scaled; products that overflow.
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 1e300"), "device.memory_gib");
  expect_user_error(replaced(kGoodCluster, "bandwidth_gbit = 100", "bandwidth_gbit = 1e299"),
                    "inter_node.bandwidth_gbit");
  expect_user_error(replaced(replaced(kGoodCluster, "nodes = 2", "nodes = 16777216"), "devices_per_node = 4",
                             "devices_per_node = 16777216"),
                    "nodes x devices_per_node");
  expect_user_error(replaced(kGoodCluster, "bandwidth_gbit = 100", "bandwidth_gbit = 1e-300"),
                    "inter_node.bandwidth_gbit");
  // The GEMM model and the achieved shares of bandwidth (issue 38).
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 16\nmemory_efficiency = 1.5"),
                    "device.memory_efficiency");
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 16\ngemm_tile_m = 0"), "device.gemm_tile_m");
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 16\ngemm_k_half = -1"),
                    "device.gemm_k_half");
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 16\ntiled_attention_efficiency = 2"),
                    "device.tiled_attention_efficiency");
  expect_user_error(replaced(kGoodCluster, "latency_us = 5", "latency_us = 5\nefficiency = 0"), "intra_node.efficiency");
  expect_user_error(replaced(kGoodCluster, "memory_gib = 16", "memory_gib = 16\ngemm_unit = 108"), "device.gemm_unit");
  // A name with quotes and a newline survives the round trip.
  ClusterSpec odd = parse_cluster_toml(replaced(kGoodCluster, "name = \"t\"", "name = \"a\\\"b\\nc\""), "odd");
  EXPECT_EQ(odd.name, "a\"b\nc");
  EXPECT_EQ(parse_cluster_toml(odd.to_toml(), "odd again").name, odd.name);
  // The round trip through to_toml keeps every figure.
  ClusterSpec again = parse_cluster_toml(c.to_toml(), "again");
  EXPECT_DOUBLE_EQ(again.memory_bytes, c.memory_bytes);
  EXPECT_DOUBLE_EQ(again.inter_latency, c.inter_latency);
}

TEST(PlannerBadInput, UnknownPresetsNameTheKnownOnes) {
  try {
    model_preset("gpt5");
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("gpt3-175b"), std::string::npos) << e.what();
  }
  try {
    load_cluster("tpu-v9", LOOM_SOURCE_DIR);
    ADD_FAILURE();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("a100-80gb"), std::string::npos) << e.what();
  }
  EXPECT_THROW(with_devices(load_cluster("a100-80gb", LOOM_SOURCE_DIR), 12), UserError);  // 1.5 nodes
}

TEST(PlannerBadInput, NoLayoutFitsKeepsTheClosest) {
  const ModelPreset& p = model_preset("gpt3-175b");
  const ClusterSpec c = with_devices(load_cluster("pcie-24gb", LOOM_SOURCE_DIR), 8);
  const SearchResult r = search_layouts(Workload{p.model, p.global_batch}, c, SearchSpace{}, 5);
  EXPECT_TRUE(r.top.empty());
  ASSERT_TRUE(r.have_closest);
  EXPECT_GT(r.closest.memory.total(), c.memory_bytes);
  // 175B x 16 B over 8 devices: at least 349 GB each.
  EXPECT_GT(r.closest.memory.total(), 16 * 174e9 / 8);
}

using loom::test::CliResult;
using loom::test::run_loom;

TEST(PlannerBadInput, CliExitsWithCode2AndSaysWhatIsMissing) {
  CliResult r = run_loom("plan --model gpt3-175b --cluster pcie-24gb --devices 8");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("GiB more per device"), std::string::npos) << r.output;

  const std::string path = std::string(LOOM_BINARY_DIR) + "/planner_zero_devices.toml";
  std::ofstream(path) << replaced(kGoodCluster, "devices_per_node = 4", "devices_per_node = 0");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"plan --model gpt5", "gpt5"},
      {"plan --cluster nowhere", "nowhere"},
      {"plan --cluster " + path, "devices_per_node"},
      {"plan --model gpt2-124m --devices 0", "--devices"},
      {"plan --model gpt2-124m --zero 4", "--zero"},
      {"plan --model gpt2-124m --precision fp8", "fp8"},
      {"plan --model gpt2-124m --frobnicate", "--frobnicate"},
      {"plan --model gpt3-6.7b --cluster a100-80gb --devices 8 --tokens 1e12 --deadline-days 1", "deadline"},
      {"plan --config /no/such.toml", "/no/such.toml"},
      {"bench calibrate --bogus", "--bogus"},
  };
  for (const auto& c : cases) {
    CliResult res = run_loom(c.args);
    EXPECT_EQ(res.code, 2) << c.args << "\n" << res.output;
    EXPECT_NE(res.output.find(c.expect), std::string::npos) << c.args << "\n" << res.output;
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace loom::planner

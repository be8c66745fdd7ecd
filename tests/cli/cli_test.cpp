// The `loom` executable as a user runs it: exit codes and messages.
#include <gtest/gtest.h>

#include "cli/run_loom.h"
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/cpu_info.h"
#include "kernels/cpu/isa.h"

namespace {

using loom::test::CliResult;
CliResult run(const std::string& args) { return loom::test::run_loom(args); }

TEST(Cli, HelpNamesTheCommands) {
  CliResult r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* word : {"train", "bench", "--config", "--set"}) EXPECT_NE(r.output.find(word), std::string::npos);
}

// `loom CMD --help`: that command's section alone (its usage lines and an
// example), exit 0; an unknown option points at it.
TEST(Cli, EachCommandHasItsOwnHelp) {
  const char* commands[] = {"prepare", "train", "elastic", "bench", "report", "diagnose",
                            "export",  "generate", "info", "plan"};
  for (const char* cmd : commands) {
    CliResult r = run(std::string(cmd) + " --help");
    EXPECT_EQ(r.code, 0) << cmd << "\n" << r.output;
    EXPECT_EQ(r.output.rfind(std::string("usage: loom ") + cmd, 0), 0u) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find(std::string("loom ") + cmd + " "), std::string::npos) << cmd;  // an invocation
    EXPECT_NE(r.output.find("exit codes:"), std::string::npos) << cmd;
    for (const char* other : commands) {  // no other command's section
      if (std::string(other) == cmd) continue;
      EXPECT_EQ(r.output.find(std::string("\n  ") + other + " "), std::string::npos) << cmd << " shows " << other;
    }
    // Also after other options, and as -h.
    EXPECT_EQ(run(std::string(cmd) + " --threads 2 -h").output, r.output) << cmd;
  }
  // An unknown option names itself and the command's help.
  for (const char* args : {"train --bogus", "export --bogus", "generate --bogus", "plan --bogus", "prepare --bogus",
                           "elastic --np 2 --bogus", "bench cp --bogus", "diagnose --bogus", "report --bogus"}) {
    CliResult r = run(args);
    const std::string cmd = std::string(args).substr(0, std::string(args).find(' '));
    EXPECT_EQ(r.code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("'--bogus'"), std::string::npos) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("loom " + cmd + " --help"), std::string::npos) << args << "\n" << r.output;
  }
  // --help as the text of a prompt is the prompt (generate then wants its
  // checkpoint), and after elastic's -- it is the launcher's.
  CliResult prompt = run("generate --prompt --help");
  EXPECT_EQ(prompt.code, 2) << prompt.output;
  EXPECT_NE(prompt.output.rfind("usage:", 0), 0u) << prompt.output;
  CliResult launcher = run("elastic --np 2 -- --help");
  EXPECT_EQ(launcher.code, 2) << launcher.output;  // no checkpoints set: refused before launching
  EXPECT_NE(launcher.output.rfind("usage:", 0), 0u) << launcher.output;
  // bench calibrate's usage is in bench's help.
  EXPECT_NE(run("bench --help").output.find("loom bench calibrate"), std::string::npos);
  EXPECT_EQ(run("plan --help").output.find("loom bench calibrate ["), std::string::npos);
}

TEST(Cli, BadInputExitsWithCode2AndNamesTheProblem) {
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"train --set model.d_model=100 --set model.n_head=3", "model.d_model"},
      {"train --set train.lrr=1", "train.lrr"},
      {"train --set model.n_layer=-1", "model.n_layer"},
      {"train --set data.path=/no/such/file.txt", "/no/such/file.txt"},
      {"train --config /no/such/config.toml", "/no/such/config.toml"},
      {"train --bogus", "--bogus"},
      {"frobnicate", "frobnicate"},
      {"bench step --shapes huge", "huge"},
      {"bench step --precision fp8", "--precision"},
      {"bench step --precision bf16,bf16", "--precision"},
      {"bench step --torch-autocast --no-pytorch", "--torch-autocast"},
      {"train --set runtime.comm_timeout_s=inf", "runtime.comm_timeout_s"},
      {"train --set train.weight_decay=inf", "train.weight_decay"},
      {"train --set runtime.threads=100000", "runtime.threads"},
      {"train --set parallel.bucket_mb=1e30", "parallel.bucket_mb"},
      {"train --set model.n_layer=100000000", "model.n_layer"},
      {"bench comm --min-bytes 0.5", "--min-bytes"},
      {"bench comm --ranks 2x", "--ranks"},
      {"bench scaling --bucket-mb 4abc", "--bucket-mb"},
      {"train --set runtime.isa=avx9", "runtime.isa"},
      // Expert parallelism: a model without experts, experts that do not split.
      {"train --set parallel.ep=2", "parallel.ep"},
      {"train --config " LOOM_SOURCE_DIR "/configs/mixtral-tiny.toml --set parallel.ep=3", "parallel.ep"},
      {"train --config " LOOM_SOURCE_DIR "/configs/mixtral-tiny.toml --set parallel.ep=2", "parallel.ep (2) must divide the data group"},
      {"info --isa avx9", "--isa"},
      {"info --bogus", "--bogus"},
      {"info --threads -1", "--threads"},
      // Not regular files where one is expected, and names that leave their folder.
      {"train --config /tmp", "is not a regular file"},
      {"train --config /dev/null", "/dev/null"},
      {"train --set data.format=\"bytes\" --set data.path=\"/tmp\"", "data.path"},
      {"train --set data.format=\"bytes\" --set data.path=\"/dev/zero\"", "data.path"},
      {"train --set train.run_name=\"../elsewhere\"", "train.run_name"},
      {"train --set train.run_name=\"..\"", "train.run_name"},
      {"plan --tokens 1e30", "--tokens"},
      {"plan --config /tmp", "is not a regular file"},
      // Every command's files: missing, a folder, a device.
      {"prepare --input /dev/zero --out build/test-data/never", "input '/dev/zero' is not a regular file"},
      {"prepare --input /no/such/corpus --out build/test-data/never", "/no/such/corpus"},
      {"prepare --input " LOOM_SOURCE_DIR "/data/sample/kjv.txt --tokenizer /tmp --out build/test-data/never",
       "tokenizer folder '/tmp' holds no tokenizer.json or tokenizer.model"},
      {"plan --cluster /dev/zero", "cluster file '/dev/zero'"},
      {"plan --cluster /no/such/cluster.toml", "/no/such/cluster.toml"},
      {"plan --cluster " + std::string(300, 'x'), "unknown cluster preset"},  // a name too long for the file system
      {"train --cluster /dev/null", "cluster file '/dev/null'"},
      {"train --resume /no/such/checkpoint --set data.format=\"bytes\" --set model.vocab_size=256 --set data.path="
       "\"data/sample/kjv.txt\"", "/no/such/checkpoint"},
      {"train --resume /tmp --set data.format=\"bytes\" --set model.vocab_size=256 --set data.path="
       "\"data/sample/kjv.txt\"", "checkpoint '/tmp' has no readable manifest.json"},
      {"train --set data.path=\"/tmp\"", "dataset.toml"},
      {"generate --checkpoint /no/such/checkpoint --prompt x", "/no/such/checkpoint"},
      {"generate --checkpoint /tmp --prompt x", "checkpoint '/tmp' has no readable manifest.json"},
      {"export --checkpoint /no/such/checkpoint --out build/test-data/never", "/no/such/checkpoint"},
      {"diagnose /no/such/run", "/no/such/run"},
      {"report /no/such/run", "/no/such/run"},
      {"diagnose /dev/null", "/dev/null"},
      // A model that cannot fit this machine: refused before allocating, with the figures.
      {"train --set model.d_model=8192 --set model.n_head=64 --set model.n_layer=64 --set data.format=\"bytes\""
       " --set model.vocab_size=256 --set data.path=\"data/sample/kjv.txt\"", "GiB per rank"},
  };
  // Nothing written: a train run that is refused leaves no run directory.
  const std::string runs = std::string(LOOM_BINARY_DIR) + "/test-data/bad-input-runs";
  std::filesystem::remove_all(runs);
  for (const auto& c : cases) {
    const bool train = c.args.rfind("train ", 0) == 0 && c.args.find("--bogus") == std::string::npos;
    CliResult r = run(train ? c.args + " --set train.run_dir=\"" + runs + "\"" : c.args);
    EXPECT_FALSE(std::filesystem::exists(runs)) << "a run directory was written for: " << c.args;
    std::filesystem::remove_all(runs);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("\nstep "), std::string::npos) << "training started for: " << c.args;
    EXPECT_EQ(r.output.find("internal error"), std::string::npos) << c.args << "\n" << r.output;
  }
}

TEST(Cli, TrainRunsAndLogsEveryField) {
  CliResult r = run("train --config configs/tiny.toml --set train.steps=3 --set train.log_every=1");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* field : {"step     3/3", "loss", "lr", "grad norm", "tok/s", "GFLOP/s", "% of peak", "val loss",
                            "cpu: ", "| isa ", "fp32 GEMM: oneDNN", "bf16 GEMM: "})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << "\n" << r.output;
  // The sample after training: the prompt, then sampled text.
  const size_t sample = r.output.find("sample (48 tokens, temperature 0.8, top-k 40):\n  | The");
  ASSERT_NE(sample, std::string::npos) << r.output;
  EXPECT_GT(r.output.size(), sample + 60) << r.output;
}

TEST(Cli, TrainWithoutSampleOrAtACappedIsa) {
  CliResult r = run("train --config configs/tiny.toml --set train.steps=2 --set train.sample_tokens=0 "
                    "--set runtime.isa=avx2 --set precision.compute=bf16");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.find("sample ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| isa avx2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("bf16 GEMM: widened to fp32"), std::string::npos) << r.output;
}

// An instruction set above what this CPU has is refused, naming the field and
// what the CPU supports (only checkable where the CPU lacks something).
TEST(Cli, AnIsaAboveTheCpusIsRefused) {
  const loom::Isa highest = loom::highest_isa(loom::read_cpu_info());
  if (highest == loom::Isa::amx) GTEST_SKIP() << "this CPU has every level loom knows (amx)";
  const char* above = loom::isa_name(loom::Isa(int(highest) + 1));
  CliResult r = run(std::string("train --config configs/tiny.toml --set runtime.isa=") + above);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("runtime.isa"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(std::string("up to ") + loom::isa_name(highest)), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << r.output;
}

// `loom info` names the CPU and the kernels, and measures positive rates;
// capped at avx2 it widens bf16 products to fp32.
TEST(Cli, InfoNamesTheCpuTheKernelsAndTheirRates) {
  CliResult r = run("info --threads 1 --json");
  ASSERT_EQ(r.code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j.at("model").get<std::string>(), loom::read_cpu_info().model);
  EXPECT_NE(j.at("flags").get<std::string>().find("avx2"), std::string::npos);
  EXPECT_EQ(j.at("fp32_gemm").get<std::string>().rfind("oneDNN ", 0), 0u) << r.output;
  EXPECT_GT(j.at("fp32_peak_gflops").get<double>(), 0);
  // The bf16 dot-product peak where the CPU has vdpbf16ps, else null.
  if (loom::cpu::native_bf16_products()) EXPECT_GT(j.at("bf16_peak_gflops").get<double>(), 0);
  else EXPECT_TRUE(j.at("bf16_peak_gflops").is_null());
  for (const char* p : {"fp32", "bf16", "fp16"}) EXPECT_GT(j.at("layer_gflops").at(p).get<double>(), 0) << p;

  // The environment's cap: a bad name is refused, naming the variable.
  CliResult env = loom::test::run_loom("info", "LOOM_MAX_CPU_ISA=avx9");
  EXPECT_EQ(env.code, 2) << env.output;
  EXPECT_NE(env.output.find("LOOM_MAX_CPU_ISA"), std::string::npos) << env.output;

  CliResult capped = run("info --threads 1 --isa avx2");
  ASSERT_EQ(capped.code, 0) << capped.output;
  EXPECT_NE(capped.output.find("| isa avx2"), std::string::npos) << capped.output;
  EXPECT_NE(capped.output.find("bf16 GEMM: widened to fp32"), std::string::npos) << capped.output;
}

// Where a step's time goes: every op kind of the step with its share, and
// the GEMMs judged against the FLOP peak.
TEST(Cli, BenchStepProfileListsTheStepsOps) {
  CliResult r = run("bench step --profile --shapes tiny --threads 1 --steps 2 --precision fp32");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* op : {"matmul fwd", "matmul bwd", "attention fwd", "attention bwd", "layernorm fwd", "gelu bwd",
                         "cross-entropy", "adamw", "clipping", "outside the backend's ops", "GFLOP/s", "GB/s",
                         "matmul fwd fp32 1024x128 -> 384"})
    EXPECT_NE(r.output.find(op), std::string::npos) << op << "\n" << r.output;
  // A PyTorch interpreter that cannot import torch is refused before anything runs.
  CliResult bad = run("bench step --shapes tiny --torch /bin/false");
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--torch"), std::string::npos) << bad.output;
}

}  // namespace

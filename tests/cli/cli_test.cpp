// The `loom` executable as a user runs it: exit codes and messages.
#include <gtest/gtest.h>

#include "cli/run_loom.h"
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace {

using loom::test::CliResult;
CliResult run(const std::string& args) { return loom::test::run_loom(args); }

TEST(Cli, HelpNamesTheCommands) {
  CliResult r = run("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* word : {"train", "bench", "--config", "--set"}) EXPECT_NE(r.output.find(word), std::string::npos);
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
  };
  for (const auto& c : cases) {
    CliResult r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
    EXPECT_EQ(r.output.find("step "), std::string::npos) << "training started for: " << c.args;
  }
}

TEST(Cli, TrainRunsAndLogsEveryField) {
  CliResult r = run("train --config configs/tiny.toml --set train.steps=3 --set train.log_every=1");
  ASSERT_EQ(r.code, 0) << r.output;
  for (const char* field : {"step     3/3", "loss", "lr", "grad norm", "tok/s", "GFLOP/s", "% of peak", "val loss"})
    EXPECT_NE(r.output.find(field), std::string::npos) << field << "\n" << r.output;
}

}  // namespace

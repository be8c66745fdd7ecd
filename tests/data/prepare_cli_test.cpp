// `loom prepare` and `loom train` on prepared data, as a user runs them.
#include <gtest/gtest.h>

#include "cli/run_loom.h"
#include <sys/wait.h>

#include <filesystem>

#include "data_test_util.h"

namespace {

using loom::test::CliResult;
CliResult run(const std::string& args) { return loom::test::run_loom(args); }

TEST(PrepareCli, BadInputExitsWithCode2AndNamesTheProblem) {
  std::string out = loom::test::fresh_dir("cli_prep_out"), empty = loom::test::fresh_dir("cli_prep_empty");
  struct Case {
    std::string args, expect;
  } cases[] = {
      {"prepare --input /no/such/corpus --out " + out, "/no/such/corpus"},
      {"prepare --input " + empty + " --out " + out, empty},
      {"prepare --input " + empty + " --vocab-size lots", "lots"},
      {"prepare --input " + empty + " --val-fraction 2", "--val-fraction"},
      {"prepare --tokenizer /no/such.model --vocab-size 512", "--vocab-size"},
      {"prepare --bogus", "--bogus"},
  };
  for (const auto& c : cases) {
    CliResult r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << "\n" << r.output;
  }
  EXPECT_TRUE(std::filesystem::is_empty(out));
}

TEST(PrepareCli, PrepareThenTrainOnShards) {
  std::string in = loom::test::fresh_dir("cli_prep_in"), out = loom::test::fresh_dir("cli_prep_data");
  loom::test::write_sample_docs(in, 8, 20000);
  std::string prepare = "prepare --input " + in + " --out " + out + " --vocab-size 400 --val-fraction 0.2";
  CliResult r = run(prepare);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("training the tokenizer"), std::string::npos) << r.output;
  r = run(prepare);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("up to date"), std::string::npos) << r.output;

  std::string train = "train --config configs/tiny.toml --set data.format=shards --set data.path=" + out +
                      " --set train.steps=3 --set train.log_every=1";
  r = run(train + " --set model.vocab_size=400");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("step     3/3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("400-token SentencePiece vocabulary"), std::string::npos) << r.output;

  r = run(train + " --set model.vocab_size=400 --set data.rows=padded");  // plain text has no samples
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("config field 'data.rows' = \"padded\" needs instruction data"), std::string::npos)
      << r.output;
  r = run(train + " --set model.vocab_size=400 --set data.rows=stacked");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("data.rows"), std::string::npos) << r.output;

  r = run(train + " --set model.vocab_size=300");  // smaller than the tokenizer's
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("model.vocab_size"), std::string::npos) << r.output;

  std::filesystem::resize_file(out + "/val_000000.bin", 70);  // a truncated shard
  r = run(train + " --set model.vocab_size=400");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(out + "/val_000000.bin"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("step "), std::string::npos) << "training started:\n" << r.output;
}

}  // namespace

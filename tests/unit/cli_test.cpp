// The kvserve binary as a user runs it: exit codes, messages, and generate end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "run_kvserve.h"
#include "unit/model_test_util.h"

namespace kvserve {
namespace {

using testing_util::CommandResult;
using testing_util::run_kvserve;

TEST(Cli, VersionListsPlatforms) {
  const CommandResult r = run_kvserve("version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kvserve 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu"), std::string::npos) << r.output;
}

TEST(Cli, SelfCheckPasses) {
  const CommandResult r = run_kvserve("self-check --steps 300 --page-size 1 16 --seed 5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("seed 5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("page size  16: ok"), std::string::npos) << r.output;
}

TEST(Cli, BadArgumentsNameTheFlagAndFail) {
  CommandResult r = run_kvserve("self-check --page-size 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--page-size"), std::string::npos) << r.output;
  r = run_kvserve("self-check --radix-eviction-policy mru");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--radix-eviction-policy"), std::string::npos) << r.output;
  r = run_kvserve("self-check --steps -4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  r = run_kvserve("--no-such-flag");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no-such-flag"), std::string::npos) << r.output;
  r = run_kvserve("--log-level loud version");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--log-level"), std::string::npos) << r.output;
}

class CliGenerate : public testing::Test {
 protected:
  void SetUp() override {
    const CommandResult r = run_kvserve("make-model --preset tiny --quiet --output " + model_);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  model::testing::TempDir dir_;
  std::string model_ = (dir_.path() / "tiny").string();
};

TEST_F(CliGenerate, PromptsAsOneBatchWithJson) {
  const CommandResult r = run_kvserve(
      "generate --model-path " + model_ +
      " --prompt 'Hello there' --prompt 'The sky is' --max-new-tokens 5 --ignore-eos --json "
      "--top-logprobs 2 --page-size 16 --max-total-tokens 2048 --log-level warn");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t start = r.output.find("[{");
  ASSERT_NE(start, std::string::npos) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(start, r.output.find('\n', start) - start));
  ASSERT_EQ(j.size(), 2u);
  for (const auto& req : j) {
    EXPECT_EQ(req["output_ids"].size(), 5u);
    EXPECT_EQ(req["output_logprobs"].size(), 5u);
    EXPECT_EQ(req["top_logprobs"][0].size(), 2u);
    EXPECT_EQ(req["finish_reason"], "length");
    for (const auto& lp : req["output_logprobs"])
      EXPECT_LE(lp.get<double>(), 0.0);
  }
}

TEST_F(CliGenerate, SameSeedSameTokensWhateverTheBatch) {
  const std::string common = "generate --model-path " + model_ +
                             " --max-new-tokens 8 --temperature 1.0 --top-k 50 --seed 7 "
                             "--ignore-eos --max-total-tokens 2048 --input-ids 5,6,7";
  const CommandResult one = run_kvserve(common);
  const CommandResult two = run_kvserve(common + " --input-ids 9,10,11,12");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  // The first line of the output is request 0's text.
  EXPECT_EQ(one.output.substr(0, one.output.find('\n')),
            two.output.substr(0, two.output.find('\n')));
}

TEST_F(CliGenerate, ErrorsAreClearAndNonzero) {
  CommandResult r = run_kvserve("generate --model-path /no/such/dir --prompt hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/no/such/dir"), std::string::npos) << r.output;
  r = run_kvserve("generate --model-path " + model_ + " --input-ids 1,x,3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--input-ids"), std::string::npos) << r.output;
  r = run_kvserve("generate --model-path " + model_ + " --input-ids 999999");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("vocabulary"), std::string::npos) << r.output;
  r = run_kvserve("generate --model-path " + model_ + " --input-ids 1 --max-new-tokens 5000");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("context length"), std::string::npos) << r.output;
  r = run_kvserve("generate --model-path " + model_ + " --input-ids 1 --attention-backend fa9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("fa9"), std::string::npos) << r.output;
  r = run_kvserve("generate --model-path " + model_ + " --input-ids 1 --top-p 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("top_p"), std::string::npos) << r.output;
  r = run_kvserve("generate --model-path " + model_);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--prompt"), std::string::npos) << r.output;
}

// bench-attention needs a CUDA device; on the CPU it explains itself instead of crashing.
TEST(Cli, BenchAttentionNeedsCuda) {
  CommandResult r = run_kvserve("bench-attention --device cpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << r.output;
  r = run_kvserve("bench-attention --device cpu --backend flash9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("flash9"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvserve

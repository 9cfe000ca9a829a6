// The kvserve binary as a user runs it: exit codes, messages, and generate end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "kvserve/model/whisper_generate.h"
#include "run_kvserve.h"
#include "support/whisper_test_util.h"
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
  // --kv-dtype is parsed before the device is touched: a bad name is a usage error naming it.
  r = run_kvserve("bench-attention --device cpu --kv-dtype fp9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--kv-dtype fp9"), std::string::npos) << r.output;
  r = run_kvserve("bench-attention --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("fp8_e4m3"), std::string::npos) << r.output;
}

// transcribe: a whisper-test checkpoint (random weights: the text is gibberish, but deterministic)
// on the committed clips of tests/fixtures/audio/.
class CliTranscribe : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<model::testing::TempDir>();
    const CommandResult r = run_kvserve("make-model --preset whisper-test --quiet --output " +
                                        (dir_->path() / "whisper").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::string model() { return (dir_->path() / "whisper").string(); }
  static std::string clip(const std::string& name) {
    return (model::testing::fixtures_dir() / "audio" / name).string();
  }
  // `kvserve transcribe` with --log-level warn, so that a success prints only the transcripts.
  static CommandResult transcribe(const std::string& args) {
    return run_kvserve("transcribe --model-path " + model() + " --log-level warn " + args);
  }
  static std::vector<std::string> lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      out.push_back(line);
    return out;
  }

  static std::unique_ptr<model::testing::TempDir> dir_;
};

std::unique_ptr<model::testing::TempDir> CliTranscribe::dir_;

TEST_F(CliTranscribe, OneLinePerFileInEveryFormat) {
  const std::string hello = clip("hello_16k.wav");
  const std::string testing = clip("testing_22050.wav");
  const std::string files = hello + " " + testing + " --max-new-tokens 6";
  CommandResult r = transcribe(files);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> out = lines(r.output);
  ASSERT_EQ(out.size(), 2u) << r.output;
  EXPECT_EQ(out[0].rfind(hello + ": ", 0), 0u) << out[0];
  EXPECT_EQ(out[1].rfind(testing + ": ", 0), 0u) << out[1];

  r = transcribe(files + " --response-format json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  out = lines(r.output);
  ASSERT_EQ(out.size(), 2u) << r.output;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto j = nlohmann::json::parse(out[i]);
    EXPECT_EQ(j["file"], i == 0 ? hello : testing);
    EXPECT_TRUE(j["text"].is_string());
    EXPECT_FALSE(j.contains("tokens"));
  }

  r = transcribe(files + " --response-format verbose_json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  out = lines(r.output);
  ASSERT_EQ(out.size(), 2u) << r.output;
  for (size_t i = 0; i < out.size(); ++i) {
    const auto j = nlohmann::json::parse(out[i]);
    EXPECT_EQ(j["file"], i == 0 ? hello : testing);
    EXPECT_EQ(j["language"], "en");
    // The clips are 1.3-1.5 s of speech (tests/fixtures/audio/README.md), at their own rates.
    EXPECT_GT(j["duration"].get<double>(), 1.0);
    EXPECT_LT(j["duration"].get<double>(), 2.0);
    EXPECT_GE(j["tokens"].size(), 1u);
    EXPECT_LE(j["tokens"].size(), 6u);
  }
}

// The command line against the library called directly: decode, resample, log-mel with the
// checkpoint's preprocessor_config.json, greedy decoding, decode with special tokens skipped.
TEST_F(CliTranscribe, SameTokensAndTextAsTheLibrary) {
  const std::string file = clip("testing_22050.wav");
  const CommandResult r =
      transcribe(file + " --max-new-tokens 12 --response-format verbose_json --page-size 16");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> out = lines(r.output);
  ASSERT_EQ(out.size(), 1u) << r.output;
  const auto j = nlohmann::json::parse(out[0]);

  model::WhisperGenerateOptions options;
  options.max_new_tokens = 12;
  const auto want = model::testing::transcribe_with_library(model(), file, options);
  ASSERT_TRUE(want.is_ok()) << want.status().to_string();
  EXPECT_DOUBLE_EQ(j["duration"].get<double>(), want->seconds);
  EXPECT_EQ(j["tokens"].get<std::vector<int32_t>>(), want->tokens);
  EXPECT_EQ(j["text"], want->text);
}

// Batching, the encoder KV layout and the page size change where the KV cache lives, not what
// is transcribed.
TEST_F(CliTranscribe, BatchLayoutAndPageSizeDoNotChangeTheOutput) {
  const std::string hello = clip("hello_16k.wav");
  const std::string testing = clip("testing_22050.wav");
  const std::string common = " --max-new-tokens 8 --response-format verbose_json";
  const CommandResult alone_hello = transcribe(hello + common);
  const CommandResult alone_testing = transcribe(testing + common);
  ASSERT_EQ(alone_hello.exit_code, 0) << alone_hello.output;
  ASSERT_EQ(alone_testing.exit_code, 0) << alone_testing.output;
  const std::string expected = alone_hello.output + alone_testing.output;
  for (const std::string flags :
       {"--max-running-requests 2", "--max-running-requests 1",
        "--page-size 16 --encoder-kv-layout aligned", "--page-size 16 --encoder-kv-layout ragged",
        "--page-size 7 --encoder-kv-layout ragged --attention-backend native"}) {
    const CommandResult both = transcribe(hello + " " + testing + common + " " + flags);
    ASSERT_EQ(both.exit_code, 0) << flags << "\n" << both.output;
    EXPECT_EQ(both.output, expected) << flags;
  }
}

// --temperature samples: file i draws with --seed + i, the library's tokens for that temperature
// and seed; the same command gives the same output.
TEST_F(CliTranscribe, TemperatureSamplesWithTheLibrarysDraws) {
  const std::string hello = clip("hello_16k.wav");
  const std::string testing = clip("testing_22050.wav");
  const std::string args = hello + " " + testing +
                           " --max-new-tokens 10 --response-format verbose_json"
                           " --temperature 0.8 --seed 40";
  const CommandResult r = transcribe(args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(transcribe(args).output, r.output);
  const std::vector<std::string> out = lines(r.output);
  ASSERT_EQ(out.size(), 2u) << r.output;
  model::WhisperGenerateOptions options;
  options.max_new_tokens = 10;
  for (size_t i = 0; i < 2; ++i) {
    const auto want = model::testing::transcribe_with_library(model(), i == 0 ? hello : testing,
                                                              options, 0.8f, 40 + i);
    ASSERT_TRUE(want.is_ok()) << want.status().to_string();
    EXPECT_EQ(nlohmann::json::parse(out[i])["tokens"].get<std::vector<int32_t>>(), want->tokens)
        << i;
  }
}

TEST_F(CliTranscribe, ErrorsNameTheProblemAndFail) {
  const std::string hello = clip("hello_16k.wav");
  CommandResult r = transcribe("/no/such/clip.wav");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("/no/such/clip.wav"), std::string::npos) << r.output;

  // Text renamed .wav, and an empty file: each named; the good file is still transcribed.
  const std::string fake = (dir_->path() / "notes.wav").string();
  const std::string empty = (dir_->path() / "empty.wav").string();
  model::testing::write_file(fake, "these are not samples\n");
  model::testing::write_file(empty, "");
  r = transcribe(fake + " " + hello + " " + empty + " --max-new-tokens 2");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find(fake + ": not a supported audio file"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(empty + ": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(hello + ": "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2 of 3 files failed"), std::string::npos) << r.output;

  r = transcribe(hello + " --page-size 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--page-size"), std::string::npos) << r.output;
  r = transcribe(hello + " --device tpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--device: unknown device 'tpu'"), std::string::npos) << r.output;
  r = transcribe(hello + " --encoder-kv-layout diagonal");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--encoder-kv-layout"), std::string::npos) << r.output;
  r = transcribe(hello + " --language xx");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--language"), std::string::npos) << r.output;
  r = transcribe(hello + " --temperature -1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--temperature"), std::string::npos) << r.output;
  r = transcribe(hello + " --response-format srt");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--response-format"), std::string::npos) << r.output;
  r = transcribe("");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("FILE"), std::string::npos) << r.output;
  // Without --model-path the shipped demo model transcribes (tests/unit/demo_whisper_test.cpp);
  // a --model-path that is not there is named.
  r = run_kvserve("transcribe " + hello + " --model-path /no/such/model");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/no/such/model"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvserve

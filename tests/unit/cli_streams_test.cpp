// Results on stdout, logs on stderr (issue 22): `kvserve generate ... > out.txt` must hold only
// the results. Each command runs as a user runs it, with its two streams captured apart.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "unit/model_test_util.h"
#include "unit/server_test_util.h"

namespace kvserve {
namespace {

struct Streams {
  int exit_code = -1;
  std::string out;
  std::string err;
};

Streams run_split(const std::string& args) {
  model::testing::TempDir dir;
  const std::string err_path = (dir.path() / "stderr").string();
  const std::string cmd = std::string(KVSERVE_BINARY) + " " + args + " 2>" + err_path;
  Streams r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0)
    r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream f(err_path);
  std::stringstream ss;
  ss << f.rdbuf();
  r.err = ss.str();
  return r;
}

// A spdlog line ("[2026-12-02 11:00:00.000] [info] ...") at any level.
bool has_log_line(const std::string& text) {
  for (const char* level :
       {"] [trace] ", "] [debug] ", "] [info] ", "] [warning] ", "] [warn] ", "] [error] "}) {
    if (text.find(level) != std::string::npos) return true;
  }
  return false;
}

class CliStreams : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<model::testing::TempDir>();
    for (const char* preset : {"tiny", "whisper-test"}) {
      const Streams r = run_split(fmt::format("make-model --preset {} --quiet --output {}", preset,
                                              (dir_->path() / preset).string()));
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::string model(const char* preset) { return (dir_->path() / preset).string(); }

  static std::unique_ptr<model::testing::TempDir> dir_;
};
std::unique_ptr<model::testing::TempDir> CliStreams::dir_;

TEST_F(CliStreams, Generate) {
  const Streams r = run_split("generate --model-path " + model("tiny") +
                              " --prompt 'Hello there' --max-new-tokens 4 --ignore-eos --json "
                              "--max-total-tokens 2048 --log-level info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // stdout is the result and nothing else: one JSON document.
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << "stdout is not only the JSON result:\n" << r.out;
  EXPECT_EQ(j[0]["output_ids"].size(), 4u);
  EXPECT_FALSE(has_log_line(r.out)) << r.out;
  // The run's own report is a log line: stderr.
  EXPECT_NE(r.err.find("tokens generated"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("tokens generated"), std::string::npos) << r.out;
}

TEST_F(CliStreams, Transcribe) {
  const std::string clip = (model::testing::fixtures_dir() / "audio" / "hello_16k.wav").string();
  const Streams r = run_split("transcribe --model-path " + model("whisper-test") + " " + clip +
                              " " + clip + " --max-new-tokens 6 --log-level info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has_log_line(r.out)) << r.out;
  // One line per file, and nothing else.
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  EXPECT_TRUE(has_log_line(r.err)) << r.err;
  EXPECT_NE(r.err.find("transcribed 2 files"), std::string::npos) << r.err;
}

TEST_F(CliStreams, BenchOneBatch) {
  const Streams r = run_split("bench-one-batch --model-path " + model("tiny") +
                              " --batch-size 1 --input-len 8 --output-len 2 "
                              "--max-total-tokens 1024 --log-level info");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(has_log_line(r.out)) << r.out;
  EXPECT_NE(r.out.find("Prefill. latency:"), std::string::npos) << r.out;
}

TEST_F(CliStreams, BenchServing) {
  engine::EngineOptions eo = testing_util::tiny_engine_options();
  eo.model_path = model("tiny");
  testing_util::TestServer s(eo);
  const Streams r = run_split(fmt::format(
      "bench-serving --base-url http://127.0.0.1:{} --dataset-name random-ids --num-prompts 2 "
      "--random-input-len 4 --random-output-len 3 --log-level info",
      s.port()));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("Serving Benchmark Result"), std::string::npos) << r.out;
  EXPECT_FALSE(has_log_line(r.out)) << r.out;
  EXPECT_EQ(r.out.find("bench-serving:"), std::string::npos) << r.out;  // progress is a log
  EXPECT_NE(r.err.find("bench-serving:"), std::string::npos) << r.err;
}

TEST_F(CliStreams, BenchAttentionErrorsGoToStderr) {
  const Streams r = run_split("bench-attention --device cpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("--device cuda"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace kvserve

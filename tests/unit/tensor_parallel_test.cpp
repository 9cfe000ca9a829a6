// Tensor parallelism on the CPU: a ModelRunner of --tp-size N (this process rank 0, the other
// ranks `kvserve tp-worker` processes, collectives over the cpu communicator) against the same
// checkpoint at tp 1, batch by batch: f32 logits within 1e-5 relative L2 and greedy tokens
// identical, for transformers' checkpoints (tests/fixtures/oracle) of several families, including
// fewer KV heads than ranks (replicated). Refusals name --tp-size; a worker that dies fails the
// forward (and every later one) instead of hanging.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "kvserve/dist/cpu_communicator.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/model_runner.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"
#include "unit/model_test_util.h"
#include "unit/run_kvserve.h"

namespace kvserve::model {
namespace {

std::filesystem::path oracle(const std::string& name) {
  return testing::fixtures_dir() / "oracle" / name;
}

ModelRunnerOptions options(int32_t tp) {
  ModelRunnerOptions o;
  o.max_total_tokens = 2048;
  o.max_running_requests = 8;
  o.tp_size = tp;
  o.tp_worker_executable = KVSERVE_BINARY;
  return o;
}

double rel_l2(const std::vector<float>& ref, const std::vector<float>& got) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += (double{got[i]} - ref[i]) * (double{got[i]} - ref[i]);
    den += double{ref[i]} * ref[i];
  }
  return std::sqrt(num / den);
}

struct Case {
  std::string fixture;
  int32_t tp;
};

class TensorParallelEqualsOneRank : public ::testing::TestWithParam<Case> {};

// Two requests prefilled (different lengths), then six decode steps fed with tp 1's greedy
// tokens; every step's logits compared.
TEST_P(TensorParallelEqualsOneRank, LogitsAndGreedyTokens) {
  const Case& c = GetParam();
  auto one = ModelRunner::create(oracle(c.fixture), options(1));
  ASSERT_TRUE(one.is_ok()) << one.status().to_string();
  auto many = ModelRunner::create(oracle(c.fixture), options(c.tp));
  ASSERT_TRUE(many.is_ok()) << many.status().to_string();
  ASSERT_NE((*many)->tp_group(), nullptr);
  EXPECT_EQ((*many)->max_total_tokens(), (*one)->max_total_tokens());
  EXPECT_EQ((*many)->kv_pool().config().num_kv_heads,
            std::max(1, (*one)->config().num_key_value_heads / c.tp));
  const int64_t vocab = (*one)->config().vocab_size;
  test_support::ModelSession a(**one, 2);
  test_support::ModelSession b(**many, 2);
  std::vector<std::vector<int32_t>> add = {{5, 17, 42, 99, 3, 250, 8}, {1, 2, 3, 4}};
  bool decode = false;
  for (int step = 0; step < 7; ++step) {
    const std::vector<float> ref = a.logits(add, decode);
    const std::vector<float> got = b.logits(add, decode);
    ASSERT_EQ(ref.size(), got.size());
    EXPECT_LT(rel_l2(ref, got), 1e-5) << c.fixture << " tp " << c.tp << " step " << step;
    const std::vector<int32_t> tokens = test_support::argmax_rows(ref, vocab);
    EXPECT_EQ(test_support::argmax_rows(got, vocab), tokens)
        << c.fixture << " tp " << c.tp << " step " << step;
    add = {{tokens[0]}, {tokens[1]}};
    decode = true;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Oracle, TensorParallelEqualsOneRank,
    ::testing::Values(Case{"qwen2_bias", 2},               // q/k/v biases, tied embeddings
                      Case{"qwen2_bias", 4},               // 2 KV heads on 4 ranks
                      Case{"llama_gqa8_hd64", 2},          // 1 KV head on 2 ranks, untied
                      Case{"llama_gqa4_hd128_llama3", 2},  // llama3 rope, 1 KV head
                      Case{"qwen3", 2},                    // q/k norms
                      Case{"gemma2", 2}),                  // sandwich norms, soft-capping
    [](const ::testing::TestParamInfo<Case>& i) {
      return i.param.fixture + "_tp" + std::to_string(i.param.tp);
    });

// forward_greedy and forward_sample (the scheduler's calls) through the group: the same tokens as
// the argmax of tp 1's logits.
TEST(TensorParallel, GreedyAndSampledForwardsAnnounceTheBatch) {
  auto one = ModelRunner::create(oracle("qwen2_bias"), options(1));
  auto two = ModelRunner::create(oracle("qwen2_bias"), options(2));
  ASSERT_TRUE(one.is_ok() && two.is_ok());
  const int64_t vocab = (*one)->config().vocab_size;
  test_support::ModelSession a(**one, 1);
  test_support::ModelSession b(**two, 1);
  std::vector<int32_t> prompt = {9, 8, 7, 6, 5};
  const std::vector<float> ref = a.logits({prompt}, false);
  mem::ForwardBatch batch = b.batch({prompt}, false);
  std::vector<int32_t> tokens;
  ASSERT_TRUE((*two)->forward_greedy(batch, tokens).is_ok());
  EXPECT_EQ(tokens, test_support::argmax_rows(ref, vocab));
  // A greedy row of forward_sample (temperature 0).
  const std::vector<float> ref2 = a.logits({{tokens[0]}}, true);
  mem::ForwardBatch next = b.batch({{tokens[0]}}, true);
  ops::SampleRowParams row{};
  row.greedy = 1;
  std::vector<ops::SampleRowParams> rows = {row};
  SamplingInputs sampling;
  sampling.rows = rows;
  std::vector<int32_t> sampled;
  ASSERT_TRUE((*two)->forward_sample(next, sampling, sampled).is_ok());
  EXPECT_EQ(sampled, test_support::argmax_rows(ref2, vocab));
}

// One rank through the communicator path (every collective on a one-rank cpu communicator: the
// masked lookup, the zero-filled logits) equals the plain runner bit for bit.
TEST(TensorParallel, OneRankThroughTheCommunicatorEqualsThePlainRunner) {
  dist::CpuCommunicatorOptions co;
  co.name = dist::unique_shm_name();
  auto comm = dist::CpuCommunicator::create(co);
  ASSERT_TRUE(comm.is_ok()) << comm.status().to_string();
  ModelRunnerOptions o = options(1);
  o.tp.comm = comm->get();
  auto plain = ModelRunner::create(oracle("qwen2_bias"), options(1));
  auto through = ModelRunner::create(oracle("qwen2_bias"), o);
  ASSERT_TRUE(plain.is_ok() && through.is_ok());
  test_support::ModelSession a(**plain, 2);
  test_support::ModelSession b(**through, 2);
  const std::vector<std::vector<int32_t>> add = {{3, 1, 4, 1, 5}, {9, 2, 6}};
  EXPECT_EQ(a.logits(add, false), b.logits(add, false));
  EXPECT_EQ(a.logits({{7}, {8}}, true), b.logits({{7}, {8}}, true));
}

TEST(TensorParallel, RefusesWhatItCannotShard) {
  auto three = ModelRunner::create(oracle("qwen2_bias"), options(3));
  ASSERT_FALSE(three.is_ok());
  EXPECT_NE(three.status().message().find("--tp-size 3 does not divide the model's 4 attention"),
            std::string::npos)
      << three.status().to_string();
  // More ranks than CUDA devices (this build or machine has fewer than two).
  ModelRunnerOptions cuda = options(2);
  cuda.device = Device{DeviceKind::kCuda, 0};
  auto gpu = ModelRunner::create(oracle("qwen2_bias"), cuda);
  ASSERT_FALSE(gpu.is_ok());
  EXPECT_NE(gpu.status().message().find("--tp-size 2"), std::string::npos)
      << gpu.status().to_string();
  // Whisper is not sharded.
  testing::TempDir dir;
  makemodel::MakeModelOptions mo;
  mo.preset = "whisper-test";
  mo.output = dir / "whisper";
  ASSERT_TRUE(makemodel::make_model(mo).is_ok());
  auto whisper = ModelRunner::create(dir / "whisper", options(2));
  ASSERT_FALSE(whisper.is_ok());
  EXPECT_EQ(whisper.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(whisper.status().message().find("--tp-size 2"), std::string::npos);
}

// The command line: generate at --tp-size 2 prints what --tp-size 1 prints (greedy), and
// bench-one-batch runs; a size that does not divide the heads is an error naming the flag.
TEST(TensorParallel, GenerateAndBenchOneBatchTakeTpSize) {
  using testing_util::run_kvserve;
  testing::TempDir dir;
  makemodel::MakeModelOptions mo;
  mo.preset = "tiny";
  mo.output = dir / "tiny";
  mo.seed = 11;
  ASSERT_TRUE(makemodel::make_model(mo).is_ok());
  const std::string model = (dir / "tiny").string();
  const std::string common = "--log-level error generate --model-path " + model +
                             " --prompt 'hello world' --prompt 'the cat sat' --max-new-tokens 8 "
                             "--temperature 0 --max-total-tokens 2048";
  const auto one = run_kvserve(common);
  const auto two = run_kvserve(common + " --tp-size 2");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  ASSERT_EQ(two.exit_code, 0) << two.output;
  // The generated texts: without the runner's summary and the timing line (stderr), which
  // differ between the runs.
  auto texts = [](const std::string& out) {
    std::string kept, line;
    std::istringstream in(out);
    while (std::getline(in, line)) {
      if (line.find(" on cpu: ") == std::string::npos &&
          line.find(" tokens generated in ") == std::string::npos) {
        kept += line + "\n";
      }
    }
    return kept;
  };
  EXPECT_GT(texts(one.output).size(), 10u) << one.output;
  EXPECT_EQ(texts(two.output), texts(one.output));
  const auto three = run_kvserve(common + " --tp-size 3");
  EXPECT_NE(three.exit_code, 0);
  EXPECT_NE(three.output.find("--tp-size 3"), std::string::npos) << three.output;
  const auto bench = run_kvserve("--log-level error bench-one-batch --model-path " + model +
                                 " --batch-size 2 --input-len 16 --output-len 4 "
                                 "--max-total-tokens 2048 --tp-size 2 --result-filename " +
                                 (dir / "result.jsonl").string());
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("Decode"), std::string::npos) << bench.output;
  EXPECT_NE(testing::read_file(dir / "result.jsonl").find("\"batch_size\""), std::string::npos);
}

TEST(TensorParallel, AWorkerThatDiesFailsTheForwardNotHangs) {
  int failures = 0;
  ModelRunnerOptions o = options(2);
  o.on_tp_failure = [&](const Status&) { ++failures; };
  auto two = ModelRunner::create(oracle("qwen2_bias"), o);
  ASSERT_TRUE(two.is_ok()) << two.status().to_string();
  test_support::ModelSession session(**two, 1);
  std::vector<float> logits;
  mem::ForwardBatch ok = session.batch({{1, 2, 3}}, false);
  ASSERT_TRUE((*two)->forward(ok, logits).is_ok());
  const pid_t worker = (*two)->tp_group()->workers().at(0);
  ASSERT_EQ(kill(worker, SIGKILL), 0);
  const auto start = std::chrono::steady_clock::now();
  mem::ForwardBatch doomed = session.batch({{4}}, true);
  const Status s = (*two)->forward(doomed, logits);
  EXPECT_FALSE(s.is_ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable) << s.to_string();
  EXPECT_NE(s.message().find("rank 1"), std::string::npos) << s.to_string();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
  EXPECT_EQ(failures, 1);
  // Every later forward fails at once; the failure callback is not called again.
  mem::ForwardBatch later = session.batch({{5}}, true);
  EXPECT_FALSE((*two)->forward(later, logits).is_ok());
  EXPECT_EQ(failures, 1);
}

}  // namespace
}  // namespace kvserve::model

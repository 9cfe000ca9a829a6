// kvserve bench-one-batch on the tiny preset: the sweep, the reported fields and their
// arithmetic, skipped combinations, pools left free, and the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "kvserve/bench/one_batch.h"
#include "kvserve/makemodel/make_model.h"
#include "run_kvserve.h"
#include "support/typed_options.h"
#include "unit/model_test_util.h"

namespace kvserve::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

class BenchOneBatch : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new model::testing::TempDir();
    makemodel::MakeModelOptions o;
    o.preset = "tiny";
    o.output = dir_->path() / "tiny";
    ASSERT_TRUE(makemodel::make_model(o).is_ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string model_dir() { return (dir_->path() / "tiny").string(); }

  static std::unique_ptr<model::ModelRunner> runner(int64_t max_total_tokens, int32_t page_size,
                                                    int32_t rows = 8,
                                                    const std::string& backend = "") {
    model::ModelRunnerOptions o;
    o.max_total_tokens = max_total_tokens;
    o.page_size = page_size;
    o.max_running_requests = rows;
    o.attention_backend = test_support::backend_of(backend);
    auto r = model::ModelRunner::create(model_dir(), o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? std::move(r).value() : nullptr;
  }

  std::vector<std::string> log_;
  std::function<void(std::string_view)> log() {
    return [this](std::string_view l) { log_.emplace_back(l); };
  }
  bool logged(std::string_view needle) const {
    return std::any_of(log_.begin(), log_.end(),
                       [&](const std::string& l) { return l.find(needle) != std::string::npos; });
  }

  static model::testing::TempDir* dir_;
};
model::testing::TempDir* BenchOneBatch::dir_ = nullptr;

void expect_consistent(const OneBatchResult& r) {
  EXPECT_GT(r.prefill_latency, 0.0);
  EXPECT_LT(r.prefill_latency, 60.0);
  EXPECT_NEAR(r.prefill_throughput, double(r.input_len) * r.batch_size / r.prefill_latency,
              1e-6 * r.prefill_throughput);
  ASSERT_EQ(r.decode_latencies.size(), static_cast<size_t>(r.output_len - 1));
  const double decode_sum =
      std::accumulate(r.decode_latencies.begin(), r.decode_latencies.end(), 0.0);
  EXPECT_NEAR(r.total_latency, r.prefill_latency + decode_sum, 1e-9);
  EXPECT_NEAR(r.overall_throughput,
              double(r.input_len + r.output_len) * r.batch_size / r.total_latency,
              1e-6 * r.overall_throughput);
  if (r.output_len > 1) {
    ASSERT_TRUE(r.median_decode_latency.has_value());
    std::vector<double> sorted = r.decode_latencies;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_GE(*r.median_decode_latency, sorted.front());
    EXPECT_LE(*r.median_decode_latency, sorted.back());
    EXPECT_NEAR(*r.median_decode_throughput, r.batch_size / *r.median_decode_latency,
                1e-6 * *r.median_decode_throughput);
  } else {
    EXPECT_FALSE(r.median_decode_latency.has_value());
  }
}

TEST_F(BenchOneBatch, SweepReportsEveryCombination) {
  auto r = runner(4096, 1);
  ASSERT_NE(r, nullptr);
  OneBatchOptions o;
  o.run_name = "unit";
  o.batch_sizes = {1, 3};
  o.input_lens = {8, 17};
  o.output_lens = {4, 1};
  const auto results = run_one_batch_sweep(*r, o, log());
  ASSERT_TRUE(results.is_ok()) << results.status().to_string();
  ASSERT_EQ(results->size(), 8u);
  // SGLang's order: batch, then input, then output.
  EXPECT_EQ((*results)[0].batch_size, 1);
  EXPECT_EQ((*results)[0].input_len, 8);
  EXPECT_EQ((*results)[0].output_len, 4);
  EXPECT_EQ((*results)[1].output_len, 1);
  EXPECT_EQ((*results)[2].input_len, 17);
  EXPECT_EQ((*results)[7].batch_size, 3);
  for (const OneBatchResult& res : *results) {
    expect_consistent(res);
    const json j = res.to_json();
    EXPECT_EQ(j["run_name"], "unit");
    EXPECT_EQ(j["batch_size"], res.batch_size);
    EXPECT_EQ(j["input_len"], res.input_len);
    EXPECT_EQ(j["output_len"], res.output_len);
    for (const char* key :
         {"prefill_latency", "prefill_throughput", "total_latency", "overall_throughput"}) {
      EXPECT_TRUE(j[key].is_number()) << key;
    }
    EXPECT_EQ(j.contains("median_decode_latency"), res.output_len > 1);
    EXPECT_EQ(j.contains("median_decode_throughput"), res.output_len > 1);
  }
  EXPECT_TRUE(logged("Warmup ..."));
  EXPECT_TRUE(logged("Benchmark ..."));
  EXPECT_TRUE(logged("Prefill. latency: "));
  EXPECT_TRUE(logged("Decode 0. Batch size: 3, latency: "));
  EXPECT_TRUE(logged("Decode.  median latency: "));
  EXPECT_TRUE(logged("Total. latency: "));
}

TEST_F(BenchOneBatch, PagedCacheAndBothBackends) {
  for (const std::string backend : {"cpu", "native"}) {
    auto r = runner(1024, 16, 4, backend);
    ASSERT_NE(r, nullptr);
    const auto res = run_one_batch_once(*r, "paged", 2, 20, 6, 5, log());
    ASSERT_TRUE(res.is_ok()) << res.status().to_string();
    expect_consistent(*res);
  }
}

TEST_F(BenchOneBatch, CombinationsThatDoNotFitAreSkipped) {
  // 64 KV tokens: 3 x (16 + 4) fits, 4 x 20 does not (SGLang: bs > 64 / 20).
  auto r = runner(64, 1, 8);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(one_batch_misfit(*r, 3, 16, 4).has_value());
  EXPECT_TRUE(one_batch_misfit(*r, 4, 16, 4).has_value());
  OneBatchOptions o;
  o.batch_sizes = {4, 3};
  o.input_lens = {16};
  o.output_lens = {4};
  auto results = run_one_batch_sweep(*r, o, log());
  ASSERT_TRUE(results.is_ok()) << results.status().to_string();
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].batch_size, 3);
  EXPECT_TRUE(logged("skipping (4, 16, 4) due to max batch size limit"));

  // Whole pages: with page size 16 a 20-token request takes 32 slots, so 2 fit in 64.
  auto paged = runner(64, 16, 8);
  ASSERT_NE(paged, nullptr);
  EXPECT_FALSE(one_batch_misfit(*paged, 2, 16, 4).has_value());
  EXPECT_TRUE(one_batch_misfit(*paged, 3, 16, 4).has_value());

  // More requests than rows, and a sequence past the context length (2048 for tiny).
  auto rows = runner(100000, 1, 2);
  ASSERT_NE(rows, nullptr);
  EXPECT_NE(one_batch_misfit(*rows, 3, 4, 4).value_or("").find("max_running_requests"),
            std::string::npos);
  EXPECT_NE(one_batch_misfit(*rows, 1, 2040, 16).value_or("").find("context length"),
            std::string::npos);
  log_.clear();
  o.batch_sizes = {3};
  o.input_lens = {4};
  o.output_lens = {4};
  results = run_one_batch_sweep(*rows, o, log());
  ASSERT_TRUE(results.is_ok());
  EXPECT_TRUE(results->empty());
  EXPECT_TRUE(logged("skipping (3, 4, 4)"));  // the warmup too
}

TEST_F(BenchOneBatch, BadListsAreInvalidArguments) {
  auto r = runner(256, 1);
  ASSERT_NE(r, nullptr);
  OneBatchOptions o;
  o.batch_sizes = {};
  EXPECT_EQ(run_one_batch_sweep(*r, o, log()).status().code(), StatusCode::kInvalidArgument);
  o.batch_sizes = {1};
  o.output_lens = {0};
  const auto bad = run_one_batch_sweep(*r, o, log());
  EXPECT_NE(bad.status().message().find("--output-len"), std::string::npos);
}

TEST_F(BenchOneBatch, CommandLineAppendsJsonLines) {
  model::testing::TempDir dir;
  const std::string out = (dir / "result.jsonl").string();
  const std::string cmd = "bench-one-batch --model-path " + model_dir() +
                          " --batch-size 1 2 --input-len 8 --output-len 3 --run-name cli "
                          "--max-total-tokens 1024 --page-size 4 --result-filename " +
                          out;
  auto r = testing_util::run_kvserve(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("max_total_num_tokens=1024"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("Prefill. latency:"), std::string::npos) << r.output;
  r = testing_util::run_kvserve(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::istringstream lines(model::testing::read_file(out));
  std::vector<json> rows;
  for (std::string line; std::getline(lines, line);)
    rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 4u);  // two runs of two batch sizes
  EXPECT_EQ(rows[0]["batch_size"], 1);
  EXPECT_EQ(rows[1]["batch_size"], 2);
  for (const json& j : rows) {
    EXPECT_EQ(j["run_name"], "cli");
    EXPECT_EQ(j["input_len"], 8);
    EXPECT_EQ(j["output_len"], 3);
    EXPECT_GT(j["median_decode_throughput"].get<double>(), 0.0);
  }
}

TEST_F(BenchOneBatch, CommandLineErrors) {
  auto r = testing_util::run_kvserve("bench-one-batch --model-path /no/such/model");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/no/such/model"), std::string::npos) << r.output;
  r = testing_util::run_kvserve("bench-one-batch --model-path " + model_dir() + " --batch-size 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--batch-size"), std::string::npos) << r.output;
  r = testing_util::run_kvserve("bench-one-batch --model-path " + model_dir() +
                                " --page-size 0 --input-len 8 --output-len 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--page-size"), std::string::npos) << r.output;
  // Nothing fits: every combination is skipped, nothing is written.
  model::testing::TempDir dir;
  const std::string out = (dir / "none.jsonl").string();
  r = testing_util::run_kvserve("bench-one-batch --model-path " + model_dir() +
                                " --batch-size 4 --input-len 60 --output-len 4 "
                                "--max-total-tokens 128 --result-filename " +
                                out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping (4, 60, 4)"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace kvserve::bench

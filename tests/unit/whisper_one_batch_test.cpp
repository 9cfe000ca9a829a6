// kvserve bench-one-batch on a Whisper checkpoint (whisper-test: 2+2 layers, d_model 64, 4 heads,
// 1500 encoder tokens, 64 decoder positions): both encoder KV layouts at page sizes 1 and 16, the
// layout accounting against its formulas, the tokens against a direct whisper_generate,
// pools left free, and the command line.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "kvserve/bench/whisper_one_batch.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/model/whisper_generate.h"
#include "kvserve/model/whisper_runner.h"
#include "run_kvserve.h"
#include "unit/model_test_util.h"

namespace kvserve::bench {
namespace {

using nlohmann::json;
using testing_util::run_kvserve;

// whisper-test's shapes, written out so the accounting is checked against numbers, not code.
constexpr int64_t kEncoderLen = 1500;
constexpr int64_t kDecoderLayers = 2;
constexpr int64_t kKvHeads = 4;
constexpr int64_t kHeadDim = 16;
constexpr int64_t kF32 = 4;  // the CPU's KV cache dtype
constexpr int64_t kSlotBytes = kDecoderLayers * 2 * kKvHeads * kHeadDim * kF32;
constexpr int32_t kSotPromptLen =
    4;  // <|startoftranscript|> <|en|> <|transcribe|> <|notimestamps|>

int64_t expected_reserved(const std::string& layout, int64_t page_size) {
  if (layout == "ragged") return kEncoderLen;
  return (kEncoderLen + page_size - 1) / page_size * page_size;
}

class WhisperOneBatch : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new model::testing::TempDir();
    for (const char* preset : {"whisper-test", "tiny"}) {
      makemodel::MakeModelOptions o;
      o.preset = preset;
      o.output = dir_->path() / preset;
      ASSERT_TRUE(makemodel::make_model(o).is_ok()) << preset;
    }
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string whisper_dir() { return (dir_->path() / "whisper-test").string(); }
  static std::string llama_dir() { return (dir_->path() / "tiny").string(); }

  static std::unique_ptr<model::WhisperRunner> runner(int32_t page_size,
                                                      mem::EncoderKvLayout layout, int32_t rows,
                                                      const std::string& backend = "",
                                                      int64_t max_total_tokens = 0) {
    model::WhisperRunnerOptions o;
    o.page_size = page_size;
    o.layout = layout;
    o.attention_backend = backend;
    o.max_running_requests = rows;
    o.max_total_tokens = max_total_tokens;
    auto r = model::WhisperRunner::create(whisper_dir(), o);
    EXPECT_TRUE(r.is_ok()) << r.status().to_string();
    return r.is_ok() ? std::move(r).value() : nullptr;
  }

  static bool pools_free(model::WhisperRunner& r) {
    return r.allocator().available_size() == r.allocator().size() &&
           r.req_to_token().available_size() == r.req_to_token().size();
  }

  std::vector<std::string> log_;
  std::function<void(std::string_view)> log() {
    return [this](std::string_view l) { log_.emplace_back(l); };
  }
  bool logged(std::string_view needle) const {
    return std::any_of(log_.begin(), log_.end(),
                       [&](const std::string& l) { return l.find(needle) != std::string::npos; });
  }

  static inline model::testing::TempDir* dir_ = nullptr;
};

void expect_consistent(const WhisperOneBatchResult& r) {
  EXPECT_GT(r.encoder_latency, 0.0);
  EXPECT_GT(r.prefill_latency, 0.0);
  EXPECT_NEAR(r.encoder_throughput, double(kEncoderLen) * r.batch_size / r.encoder_latency,
              1e-6 * r.encoder_throughput);
  EXPECT_NEAR(r.prefill_throughput, double(r.decoder_input_len) * r.batch_size / r.prefill_latency,
              1e-6 * r.prefill_throughput);
  ASSERT_EQ(r.decode_latencies.size(), static_cast<size_t>(r.output_len - 1));
  const double decode_sum =
      std::accumulate(r.decode_latencies.begin(), r.decode_latencies.end(), 0.0);
  EXPECT_NEAR(r.total_latency, r.encoder_latency + r.prefill_latency + decode_sum, 1e-9);
  ASSERT_EQ(r.median_decode_latency.has_value(), r.output_len > 1);
  if (r.output_len > 1) {
    const auto [lo, hi] = std::minmax_element(r.decode_latencies.begin(), r.decode_latencies.end());
    EXPECT_GE(*r.median_decode_latency, *lo);
    EXPECT_LE(*r.median_decode_latency, *hi);
  }
  // eos is ignored: every request decodes the whole length.
  EXPECT_EQ(r.first_request_tokens.size(), static_cast<size_t>(r.output_len));
}

void expect_accounting(const WhisperLayoutAccounting& a, const std::string& layout,
                       int32_t page_size, int32_t batch, bool gathers) {
  EXPECT_EQ(a.layout, layout);
  EXPECT_EQ(a.page_size, page_size);
  EXPECT_EQ(a.encoder_len, kEncoderLen);
  EXPECT_EQ(a.encoder_reserved_len, expected_reserved(layout, page_size));
  const auto parsed = mem::parse_encoder_kv_layout(layout);
  ASSERT_TRUE(parsed.is_ok());
  EXPECT_EQ(a.encoder_reserved_len, mem::encoder_reserved_len(kEncoderLen, page_size, *parsed));
  EXPECT_EQ(a.padding_slots, expected_reserved(layout, page_size) - kEncoderLen);
  EXPECT_EQ(a.padding_bytes, a.padding_slots * kSlotBytes);
  EXPECT_EQ(a.gathers, gathers);
  EXPECT_EQ(a.gathered_bytes_per_step, gathers ? batch * kEncoderLen * kSlotBytes : 0);
}

TEST_F(WhisperOneBatch, BothLayoutsAtPageSizes1And16) {
  for (const std::string layout : {"aligned", "ragged"}) {
    for (const int32_t ps : {1, 16}) {
      SCOPED_TRACE(layout + " page size " + std::to_string(ps));
      auto r = runner(ps, *mem::parse_encoder_kv_layout(layout), 3);
      ASSERT_NE(r, nullptr);
      WhisperOneBatchOptions o;
      o.run_name = "unit";
      o.batch_sizes = {1, 3};
      o.output_lens = {5};
      log_.clear();
      const auto results = run_whisper_one_batch_sweep(*r, o, log());
      ASSERT_TRUE(results.is_ok()) << results.status().to_string();
      ASSERT_EQ(results->size(), 2u);
      for (const WhisperOneBatchResult& res : *results) {
        EXPECT_EQ(res.decoder_input_len, kSotPromptLen);
        EXPECT_EQ(res.output_len, 5);
        expect_consistent(res);
        expect_accounting(res.layout, layout, ps, res.batch_size, /*gathers=*/false);
        EXPECT_EQ(res.layout.attention_backend, "cpu");
        const json j = res.to_json();
        EXPECT_EQ(j["encoder_kv_layout"], layout);
        EXPECT_EQ(j["padding_slots"], res.layout.padding_slots);
        EXPECT_EQ(j["gathered_bytes_per_step"], 0);
        EXPECT_TRUE(j["median_decode_latency"].is_number());
      }
      EXPECT_EQ((*results)[1].batch_size, 3);
      EXPECT_TRUE(pools_free(*r));
      for (const char* line : {"Warmup ...", "Encoder. latency: ", "Prefill. latency: ",
                               "Decode 0. Batch size: 3, latency: ", "Decode.  median latency: ",
                               "Layout. " /* the accounting line */}) {
        EXPECT_TRUE(logged(line)) << line;
      }
    }
  }
}

TEST_F(WhisperOneBatch, GatheringBackendReportsItsCopies) {
  auto r = runner(16, mem::EncoderKvLayout::kRagged, 2, "native");
  ASSERT_NE(r, nullptr);
  const auto res = run_whisper_one_batch_once(*r, "native", 2, 0, 3, 1, log());
  ASSERT_TRUE(res.is_ok()) << res.status().to_string();
  expect_consistent(*res);
  expect_accounting(res->layout, "ragged", 16, 2, /*gathers=*/true);
  EXPECT_EQ(res->layout.gathered_bytes_per_step, 2 * 1500 * 2 * 2 * 4 * 16 * 4);
  EXPECT_TRUE(pools_free(*r));
}

// The bench decodes what transcription decodes: request 0's tokens equal a direct greedy
// generation of the same features and prompt, alone, in another layout and page size, up to its
// eos (the bench ignores eos).
TEST_F(WhisperOneBatch, TokensMatchADirectGeneration) {
  auto bench_runner = runner(16, mem::EncoderKvLayout::kRagged, 3);
  auto direct_runner = runner(1, mem::EncoderKvLayout::kAligned, 1);
  ASSERT_NE(bench_runner, nullptr);
  ASSERT_NE(direct_runner, nullptr);
  for (const int32_t input_len : {0, 6}) {
    const auto res = run_whisper_one_batch_once(*bench_runner, "t", 3, input_len, 8, 42, log());
    ASSERT_TRUE(res.is_ok()) << res.status().to_string();
    auto requests = whisper_one_batch_requests(*direct_runner, 3, input_len, 42);
    ASSERT_TRUE(requests.is_ok());
    ASSERT_EQ(requests->size(), 3u);
    model::WhisperGenerateOptions o;
    o.max_new_tokens = 8;
    const auto direct = model::whisper_generate(*direct_runner, {&(*requests)[0], 1}, o);
    ASSERT_TRUE(direct.is_ok()) << direct.status().to_string();
    const std::vector<int32_t>& want = (*direct)[0].tokens;
    ASSERT_FALSE(want.empty());
    ASSERT_LE(want.size(), res->first_request_tokens.size());
    EXPECT_TRUE(std::equal(want.begin(), want.end(), res->first_request_tokens.begin()))
        << "input_len " << input_len;
    EXPECT_EQ(res->decoder_input_len, input_len == 0 ? kSotPromptLen : input_len);
    EXPECT_TRUE(pools_free(*bench_runner));
    EXPECT_TRUE(pools_free(*direct_runner));
  }
}

TEST_F(WhisperOneBatch, RequestsAreSeededAndPromptsHaveTheAskedLength) {
  auto r = runner(1, mem::EncoderKvLayout::kAligned, 1);
  ASSERT_NE(r, nullptr);
  const auto a = whisper_one_batch_requests(*r, 2, 0, 5);
  const auto b = whisper_one_batch_requests(*r, 2, 0, 5);
  const auto c = whisper_one_batch_requests(*r, 2, 0, 6);
  ASSERT_TRUE(a.is_ok() && b.is_ok() && c.is_ok());
  EXPECT_EQ((*a)[0].features.size(), 80u * 3000u);
  EXPECT_EQ((*a)[1].features, (*b)[1].features);
  EXPECT_NE((*a)[0].features, (*a)[1].features);
  EXPECT_NE((*a)[0].features, (*c)[0].features);
  EXPECT_TRUE((*a)[0].prompt.empty());  // the transcriber's prompt
  const auto sot = model::whisper_prompt(r->config(), r->generation_config());
  ASSERT_TRUE(sot.is_ok());
  const auto longer = whisper_one_batch_requests(*r, 1, 7, 5);
  ASSERT_TRUE(longer.is_ok());
  ASSERT_EQ((*longer)[0].prompt.size(), 7u);
  EXPECT_TRUE(std::equal(sot->begin(), sot->end(), (*longer)[0].prompt.begin()));
  const auto shorter = whisper_one_batch_requests(*r, 1, 2, 5);
  ASSERT_TRUE(shorter.is_ok());
  EXPECT_EQ((*shorter)[0].prompt, std::vector<int32_t>(sot->begin(), sot->begin() + 2));
}

TEST_F(WhisperOneBatch, CombinationsThatDoNotFitAreSkipped) {
  // A pool of two aligned rows at page size 16, (1504 + 4 + 8) -> 1520 slots each, and one page:
  // the scheduler admits the second request while its row and output budget (1508 + 8) stay
  // below what the first leaves (3056 - 1520 - 8).
  auto r = runner(16, mem::EncoderKvLayout::kAligned, 4, "", 2 * 1520 + 16);
  ASSERT_NE(r, nullptr);
  EXPECT_FALSE(whisper_one_batch_misfit(*r, 2, 0, 8).has_value());
  EXPECT_NE(whisper_one_batch_misfit(*r, 3, 0, 8).value_or("").find("max batch size limit"),
            std::string::npos);
  EXPECT_NE(whisper_one_batch_misfit(*r, 5, 0, 8).value_or("").find("max_running_requests"),
            std::string::npos);
  // 4 prompt tokens + 61 > 64 decoder positions.
  EXPECT_FALSE(whisper_one_batch_misfit(*r, 1, 0, 60).has_value());
  EXPECT_NE(whisper_one_batch_misfit(*r, 1, 0, 61).value_or("").find("length limit 64"),
            std::string::npos);
  WhisperOneBatchOptions o;
  o.batch_sizes = {3, 2};
  o.output_lens = {8};
  const auto results = run_whisper_one_batch_sweep(*r, o, log());
  ASSERT_TRUE(results.is_ok()) << results.status().to_string();
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].batch_size, 2);
  EXPECT_TRUE(logged("skipping (3, 0, 8) due to max batch size limit"));
  EXPECT_TRUE(pools_free(*r));
  o.output_lens = {0};
  EXPECT_EQ(run_whisper_one_batch_sweep(*r, o, log()).status().code(),
            StatusCode::kInvalidArgument);
}

TEST_F(WhisperOneBatch, CommandLineAppendsLayoutAccounting) {
  model::testing::TempDir dir;
  const std::string out = (dir / "result.jsonl").string();
  struct Case {
    std::string layout;
    int32_t page_size;
    std::string extra;
    bool gathers;
  };
  const std::vector<Case> cases = {{"aligned", 1, "", false},
                                   {"aligned", 16, "", false},
                                   {"ragged", 1, "", false},
                                   {"ragged", 16, "", false},
                                   {"ragged", 16, " --attention-backend native", true}};
  for (const Case& c : cases) {
    const auto r = run_kvserve("bench-one-batch --model-path " + whisper_dir() +
                               " --batch-size 1 2 --output-len 4 --run-name cli --page-size " +
                               std::to_string(c.page_size) + " --encoder-kv-layout " + c.layout +
                               c.extra + " --result-filename " + out);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* line : {"Encoder. latency:", "Prefill. latency:", "Decode.  median latency:",
                             "Layout. " /* accounting */}) {
      EXPECT_NE(r.output.find(line), std::string::npos) << line << "\n" << r.output;
    }
  }
  std::istringstream lines(model::testing::read_file(out));
  std::vector<json> rows;
  for (std::string line; std::getline(lines, line);)
    rows.push_back(json::parse(line));
  ASSERT_EQ(rows.size(), 2 * cases.size());  // two batch sizes per invocation
  for (size_t i = 0; i < rows.size(); ++i) {
    const json& j = rows[i];
    const Case& c = cases[i / 2];
    SCOPED_TRACE(j.dump());
    const int64_t batch = static_cast<int64_t>(i % 2) + 1;
    EXPECT_EQ(j["run_name"], "cli");
    EXPECT_EQ(j["model_type"], "whisper");
    EXPECT_EQ(j["device"], "cpu");
    EXPECT_EQ(j["batch_size"], batch);
    EXPECT_EQ(j["input_len"], kSotPromptLen);
    EXPECT_EQ(j["output_len"], 4);
    EXPECT_EQ(j["encoder_kv_layout"], c.layout);
    EXPECT_EQ(j["page_size"], c.page_size);
    EXPECT_EQ(j["attention_backend"], c.gathers ? "native" : "cpu");
    EXPECT_EQ(j["encoder_len"], kEncoderLen);
    EXPECT_EQ(j["encoder_reserved_len"], expected_reserved(c.layout, c.page_size));
    EXPECT_EQ(j["padding_slots"], expected_reserved(c.layout, c.page_size) - kEncoderLen);
    EXPECT_EQ(j["padding_bytes"],
              (expected_reserved(c.layout, c.page_size) - kEncoderLen) * kSlotBytes);
    EXPECT_EQ(j["gathers"], c.gathers);
    EXPECT_EQ(j["gathered_bytes_per_step"], c.gathers ? batch * kEncoderLen * kSlotBytes : 0);
    for (const char* key : {"encoder_latency", "prefill_latency", "median_decode_latency",
                            "median_decode_throughput", "total_latency", "overall_throughput"}) {
      EXPECT_GT(j[key].get<double>(), 0.0) << key;
    }
  }
}

TEST_F(WhisperOneBatch, CommandLineErrors) {
  // The layout flag on a decoder-only checkpoint.
  auto r = run_kvserve("bench-one-batch --model-path " + llama_dir() +
                       " --input-len 8 --output-len 2 --encoder-kv-layout ragged");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--encoder-kv-layout applies to Whisper checkpoints only"),
            std::string::npos)
      << r.output;
  const std::string whisper = "bench-one-batch --model-path " + whisper_dir() + " --output-len 2";
  r = run_kvserve(whisper + " --encoder-kv-layout diagonal");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--encoder-kv-layout"), std::string::npos) << r.output;
  r = run_kvserve(whisper + " --kv-cache-dtype fp8_e4m3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--kv-cache-dtype"), std::string::npos) << r.output;
  r = run_kvserve(whisper +
                  " --page-size 16 --encoder-kv-layout ragged --attention-backend "
                  "cuda-paged");
  EXPECT_NE(r.exit_code, 0) << r.output;
  // Past the decoder's 64 positions: skipped, nothing written.
  model::testing::TempDir dir;
  const std::string out = (dir / "none.jsonl").string();
  r = run_kvserve("bench-one-batch --model-path " + whisper_dir() +
                  " --output-len 61 --result-filename " + out);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("skipping (1, 0, 61) due to decoder input + output (65)"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace
}  // namespace kvserve::bench

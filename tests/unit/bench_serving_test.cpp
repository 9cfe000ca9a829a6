// kvserve bench-serving: metrics against hand-computed values, SSE parsing, the response readers,
// datasets, Poisson arrivals, and whole runs against a fake server (httplib::Server on 127.0.0.1)
// that streams SGLang /generate and OpenAI /v1/completions chunks with scripted delays.
//
// Debian's libcpp-httplib.so is built with these options (pkg-config --cflags cpp-httplib); the
// kvserve target gets them privately, so a test that includes <httplib.h> must see them too (from
// the build, or here) or its classes would not match the library's.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>

#include "kvserve/bench/client.h"
#include "kvserve/bench/dataset.h"
#include "kvserve/bench/metrics.h"
#include "kvserve/bench/report.h"
#include "kvserve/bench/serving.h"
#include "kvserve/bench/sse.h"
#include "kvserve/makemodel/make_model.h"
#include "run_kvserve.h"
#include "unit/model_test_util.h"

namespace kvserve::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// --- metrics ---------------------------------------------------------------------------------

TEST(BenchMetrics, PercentilesFollowNumpy) {
  const std::vector<double> v = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_DOUBLE_EQ(percentile(v, 99), 3.97);  // np.percentile([1,2,3,4], 99)
  EXPECT_DOUBLE_EQ(percentile(v, 95), 3.85);
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(median(v), 2.5);
  EXPECT_DOUBLE_EQ(mean(v), 2.5);
  EXPECT_DOUBLE_EQ(stddev(v), std::sqrt(1.25));  // population std, as np.std
  const std::vector<double> one = {7};
  EXPECT_DOUBLE_EQ(percentile(one, 99), 7.0);
  const std::vector<double> none;
  EXPECT_EQ(percentile(none, 99), 0.0);  // SGLang: np.percentile(x or 0, 99)
  EXPECT_EQ(mean(none), 0.0);
  EXPECT_EQ(stddev(none), 0.0);
}

// Two successful requests and a failed one, with times exact in binary.
std::vector<RequestOutput> hand_outputs() {
  RequestOutput a;  // tokens at 0.25, 0.5, 0.75, 1.0, 1.25
  a.success = true;
  a.start_time = 0.0;
  a.ttft = 0.25;
  a.itl = {0.25, 0.25, 0.25, 0.25};
  a.latency = 1.25;
  a.prompt_len = 10;
  a.output_len = 5;
  RequestOutput b;  // tokens at 1.0, 1.5, 2.0, 2.5
  b.success = true;
  b.start_time = 0.5;
  b.ttft = 0.5;
  b.itl = {0.5, 0.5, 0.5};
  b.latency = 2.0;
  b.prompt_len = 20;
  b.output_len = 4;
  RequestOutput c;
  c.success = false;
  c.error = "HTTP 500";
  c.prompt_len = 99;
  return {a, b, c};
}

TEST(BenchMetrics, HandComputedRun) {
  const std::vector<RequestOutput> outs = hand_outputs();
  const std::vector<int64_t> retok = {6, 4, 0};
  const BenchmarkMetrics m = calculate_metrics(outs, 4.0, retok);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 30);  // the failed request's prompt does not count
  EXPECT_EQ(m.total_output, 9);
  EXPECT_EQ(m.total_output_retokenized, 10);
  EXPECT_DOUBLE_EQ(m.request_throughput, 0.5);
  EXPECT_DOUBLE_EQ(m.input_throughput, 7.5);
  EXPECT_DOUBLE_EQ(m.output_throughput, 2.25);
  EXPECT_DOUBLE_EQ(m.total_throughput, 9.75);
  EXPECT_DOUBLE_EQ(m.concurrency, (1.25 + 2.0) / 4.0);
  // E2E 1.25 s and 2.0 s.
  EXPECT_DOUBLE_EQ(m.e2e.mean_ms, 1625);
  EXPECT_DOUBLE_EQ(m.e2e.median_ms, 1625);
  EXPECT_NEAR(m.e2e.p99_ms, 1992.5, 1e-9);
  // TTFT 0.25 and 0.5.
  EXPECT_DOUBLE_EQ(m.ttft.mean_ms, 375);
  EXPECT_DOUBLE_EQ(m.ttft.median_ms, 375);
  EXPECT_NEAR(m.ttft.p99_ms, 497.5, 1e-9);
  // TPOT (1.25 - 0.25) / 4 = 0.25 and (2.0 - 0.5) / 3 = 0.5.
  EXPECT_DOUBLE_EQ(m.tpot.mean_ms, 375);
  EXPECT_NEAR(m.tpot.p99_ms, 497.5, 1e-9);
  // ITL: four 0.25 and three 0.5.
  EXPECT_NEAR(m.itl.mean_ms, 2500.0 / 7, 1e-9);
  EXPECT_DOUBLE_EQ(m.itl.median_ms, 250);
  EXPECT_DOUBLE_EQ(m.itl.p95_ms, 500);
  EXPECT_DOUBLE_EQ(m.itl.p99_ms, 500);
  EXPECT_DOUBLE_EQ(m.itl.max_ms, 500);
  // Second 0: 3 tokens (a), second 1: 2 (a) + 2 (b), second 2: 2 (b); in flight: 2, 2, 1.
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 4);
  EXPECT_EQ(m.max_concurrent_requests, 2);
}

TEST(BenchMetrics, TpotSkipsSingleTokenOutputsAndEmptyRunsAreZero) {
  RequestOutput one;
  one.success = true;
  one.ttft = 0.1;
  one.latency = 0.1;
  one.output_len = 1;
  RequestOutput two;
  two.success = true;
  two.ttft = 0.1;
  two.latency = 0.3;
  two.output_len = 2;
  two.itl = {0.2};
  const std::vector<RequestOutput> outs = {one, two};
  const BenchmarkMetrics m = calculate_metrics(outs, 1.0);
  EXPECT_DOUBLE_EQ(m.tpot.mean_ms, 200);  // only the 2-token request
  EXPECT_DOUBLE_EQ(m.tpot.max_ms, 200);
  EXPECT_EQ(m.total_output_retokenized, -1);

  const std::vector<RequestOutput> failed(3);
  const BenchmarkMetrics f = calculate_metrics(failed, 2.0);
  EXPECT_EQ(f.completed, 0);
  EXPECT_EQ(f.failed, 3);
  EXPECT_EQ(f.ttft.mean_ms, 0);
  EXPECT_EQ(f.itl.p99_ms, 0);
  EXPECT_EQ(f.max_output_tokens_per_s, 0);
  EXPECT_EQ(f.concurrency, 0);
}

TEST(BenchMetrics, PeakBucketsStartAtTheFirstRequest) {
  // Ten tokens at 5.0 + k / 16 s (k = 0..9) and one at 7.0625 s. Buckets are seconds from the
  // first start (4.5 s), not wall-clock seconds: [4.5, 5.5) holds eight of the ten.
  RequestOutput o;
  o.success = true;
  o.start_time = 4.5;
  o.ttft = 0.5;
  o.itl = std::vector<double>(9, 0.0625);
  o.itl.push_back(1.5);
  o.latency = 3.0;
  o.output_len = 11;
  const std::vector<RequestOutput> outs = {o};
  const PeakStats p = peak_stats(outs);
  EXPECT_DOUBLE_EQ(p.max_output_tokens_per_s, 8);
  EXPECT_EQ(p.max_concurrent_requests, 1);
}

// --- report ----------------------------------------------------------------------------------

TEST(BenchReport, TableLooksLikeSglangs) {
  const BenchmarkMetrics m = calculate_metrics(hand_outputs(), 4.0);
  ReportInfo info;
  info.backend = "sglang";
  info.dataset_name = "random";
  info.num_prompts = 3;
  const std::string t = format_report(m, info);
  EXPECT_EQ(t.substr(0, t.find('\n')), "============ Serving Benchmark Result ============");
  EXPECT_NE(t.find("Backend:                                 sglang    \n"), std::string::npos)
      << t;
  EXPECT_NE(t.find("Traffic request rate:                    inf       \n"), std::string::npos);
  EXPECT_NE(t.find("Max request concurrency:                 not set   \n"), std::string::npos);
  EXPECT_NE(t.find("Successful requests:                     2         \n"), std::string::npos);
  EXPECT_NE(t.find("Benchmark duration (s):                  4.00      \n"), std::string::npos);
  EXPECT_NE(t.find("Mean TTFT (ms):                          375.00    \n"), std::string::npos);
  EXPECT_NE(t.find("---------------Time to First Token----------------\n"), std::string::npos);
  EXPECT_NE(t.find("-----Time per Output Token (excl. 1st token)------\n"), std::string::npos);
  EXPECT_NE(t.find("P95 ITL (ms):"), std::string::npos);
  EXPECT_NE(t.find("Peak output token throughput (tok/s):    4.00"), std::string::npos);
  EXPECT_EQ(t.find("retokenized"), std::string::npos);  // no tokenizer, no line
  EXPECT_EQ(t.substr(t.size() - 51), std::string(50, '=') + "\n");

  info.request_rate = 4.0;
  info.max_concurrency = 8;
  const json j = result_json(m, info);
  EXPECT_EQ(j["request_rate"], 4.0);
  EXPECT_EQ(j["max_concurrency"], 8);
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["failed"], 1);
  EXPECT_DOUBLE_EQ(j["p99_ttft_ms"].get<double>(), m.ttft.p99_ms);
  EXPECT_TRUE(j["total_output_tokens_retokenized"].is_null());
  EXPECT_EQ(python_float(4.0), "4.0");
  EXPECT_EQ(python_float(0.5), "0.5");
  EXPECT_EQ(python_float(INFINITY), "inf");
  info.request_rate = INFINITY;
  EXPECT_EQ(result_json(m, info)["request_rate"], "inf");
}

// --- SSE -------------------------------------------------------------------------------------

TEST(BenchSse, EventsSplitAcrossReads) {
  SseParser p;
  EXPECT_TRUE(p.feed("da").empty());
  EXPECT_TRUE(p.feed("ta: {\"a\":").empty());
  EXPECT_TRUE(p.feed("1}\n").empty());  // not dispatched before the blank line
  const auto e = p.feed("\ndata: [DO");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "{\"a\":1}");
  const auto done = p.feed("NE]\n\n");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0], "[DONE]");
  EXPECT_TRUE(p.finish().empty());
}

TEST(BenchSse, ManyEventsInOneReadAndLineEndings) {
  SseParser p;
  auto e = p.feed("data: 1\n\ndata: 2\r\n\r\ndata: 3\r\rdata: 4\r");
  ASSERT_EQ(e.size(), 3u);
  EXPECT_EQ(e[0], "1");
  EXPECT_EQ(e[1], "2");
  EXPECT_EQ(e[2], "3");
  // A CRLF split between reads is one line end, not a line end and a blank line.
  e = p.feed("\n");
  EXPECT_TRUE(e.empty());
  e = p.feed("\r\n");
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "4");
}

TEST(BenchSse, MultiLineDataCommentsFieldsAndMalformedLines) {
  SseParser p;
  auto e = p.feed(
      ": keep-alive\n\n"
      "event: message\nid: 7\nretry: 100\ndata: {\"x\":\ndata:  2}\n\n"
      "garbage without a colon\n"
      "bogus: field\n"
      "data:nospace\n\n");
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[0], "{\"x\":\n 2}");  // one space after "data:" is dropped, the next is kept
  EXPECT_EQ(json::parse(e[0])["x"], 2);
  EXPECT_EQ(e[1], "nospace");
  EXPECT_EQ(p.ignored_lines(), 2);
  // A last event without its blank line comes out at the end of the stream.
  EXPECT_TRUE(p.feed("data: tail").empty());
  e = p.finish();
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0], "tail");
}

// --- response readers ------------------------------------------------------------------------

std::string sglang_chunk(const std::string& text, int completion, bool last = false) {
  json meta = {
      {"id", "r1"},
      {"prompt_tokens", 5},
      {"completion_tokens", completion},
      {"cached_tokens", 0},
      {"finish_reason", last ? json({{"type", "length"}, {"length", completion}}) : json(nullptr)},
      {"e2e_latency", 0.1}};
  return "data: " + json({{"text", text}, {"meta_info", meta}}).dump() + "\n\n";
}

std::string openai_chunk(const std::string& text, const char* finish = nullptr) {
  json c = {{"id", "cmpl-1"},
            {"object", "text_completion"},
            {"choices",
             {{{"index", 0},
               {"text", text},
               {"logprobs", nullptr},
               {"finish_reason", finish == nullptr ? json(nullptr) : json(finish)}}}},
            {"usage", nullptr}};
  return "data: " + c.dump() + "\n\n";
}

TEST(BenchReader, SglangCumulativeChunks) {
  RequestOutput out;
  out.start_time = 0.5;
  ResponseReader r(Backend::kSglang, true, 99, out);
  r.on_bytes(sglang_chunk("", 0), 0.6);            // no text yet: not the first token
  r.on_bytes(sglang_chunk("A", 1), 0.75);          // TTFT 0.25
  r.on_bytes(sglang_chunk("ABC", 3), 1.25);        // two tokens: 0.25 each
  r.on_bytes(sglang_chunk("ABC", 3), 1.5);         // nothing new: skipped
  r.on_bytes(sglang_chunk("ABCD", 4, true), 2.0);  // one token, timed from 1.25
  r.on_bytes("data: [DONE]\n\n", 2.25);
  r.finish(2.5);
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_DOUBLE_EQ(out.ttft, 0.25);
  EXPECT_EQ(out.itl, (std::vector<double>{0.25, 0.25, 0.75}));
  EXPECT_EQ(out.output_len, 4);
  EXPECT_EQ(out.generated_text, "ABCD");
  EXPECT_DOUBLE_EQ(out.latency, 1.75);  // the [DONE] event
}

// A stream whose first tokens have no text yet (a detokenizer holding back incomplete UTF-8):
// TTFT counts from the first text, as SGLang's bench_serving does; the first token chunk and the
// tokens before the text tell the two apart.
TEST(BenchReader, SglangTokensBeforeText) {
  RequestOutput out;
  out.start_time = 1.0;
  ResponseReader r(Backend::kSglang, true, 99, out);
  r.on_bytes(sglang_chunk("", 0), 1.05);  // no token yet
  r.on_bytes(sglang_chunk("", 1), 1.1);   // a token, no text
  r.on_bytes(sglang_chunk("", 3), 1.3);
  r.on_bytes(sglang_chunk("\u00e9", 4), 1.4);
  r.on_bytes(sglang_chunk("\u00e9x", 5, true), 1.5);
  r.on_bytes("data: [DONE]\n\n", 1.5);
  r.finish(1.5);
  ASSERT_TRUE(out.success) << out.error;
  EXPECT_NEAR(out.first_token_chunk, 0.1, 1e-12);
  EXPECT_NEAR(out.ttft, 0.4, 1e-12);
  EXPECT_EQ(out.tokens_before_text, 3);
  EXPECT_EQ(out.itl.size(), 1u);
  // Token chunks, text or not: 1 -> 3 (two tokens in 0.2 s), 3 -> 4 (0.1 s), 4 -> 5 (0.1 s).
  ASSERT_EQ(out.token_itl.size(), 4u);
  EXPECT_NEAR(out.token_itl[0], 0.1, 1e-12);
  EXPECT_NEAR(out.token_itl[1], 0.1, 1e-12);
  EXPECT_NEAR(out.token_itl[2], 0.1, 1e-12);
  EXPECT_NEAR(out.token_itl[3], 0.1, 1e-12);

  RequestOutput plain;  // text from the first token on
  ResponseReader p(Backend::kSglang, true, 99, plain);
  p.on_bytes(sglang_chunk("A", 1), 0.2);
  p.on_bytes(sglang_chunk("AB", 2, true), 0.3);
  p.finish(0.3);
  EXPECT_DOUBLE_EQ(plain.first_token_chunk, 0.2);
  EXPECT_EQ(plain.tokens_before_text, 0);

  RequestOutput a = out, b = plain;
  a.success = b.success = true;
  const std::vector<RequestOutput> both = {a, b};
  const BenchmarkMetrics m = calculate_metrics(both, 1.0);
  EXPECT_EQ(m.token_chunk_requests, 2);
  EXPECT_DOUBLE_EQ(m.mean_tokens_before_text, 1.5);
  EXPECT_NEAR(m.first_token_chunk.mean_ms, 150, 1e-9);
  EXPECT_NE(format_report(m, {}).find("Mean tokens before text:"), std::string::npos);
  // 0.1 s four times (out) and once (plain: 1 -> 2 in 0.1 s).
  EXPECT_NEAR(m.token_itl.median_ms, 100, 1e-9);
  EXPECT_NEAR(m.token_itl.max_ms, 100, 1e-9);
  EXPECT_NE(format_report(m, {}).find("P99 token-chunk ITL (ms):"), std::string::npos);
}

TEST(BenchReader, OpenAiDeltasAndUsage) {
  RequestOutput out;
  out.start_time = 1.0;
  ResponseReader r(Backend::kOpenAI, true, 99, out);
  r.on_bytes(openai_chunk(""), 1.125);  // role / empty chunk
  // Two chunks in one read arrive at the same time.
  r.on_bytes(openai_chunk("He") + openai_chunk("l"), 1.25);
  r.on_bytes(openai_chunk("lo"), 1.75);
  r.on_bytes(openai_chunk("", "length"), 1.8);
  r.on_bytes(
      "data: " +
          json({{"choices", json::array()},
                {"usage", {{"prompt_tokens", 3}, {"completion_tokens", 4}, {"total_tokens", 7}}}})
              .dump() +
          "\n\n",
      1.875);
  r.on_bytes("data: [DONE]\n\n", 2.0);
  r.finish(2.0);
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_DOUBLE_EQ(out.ttft, 0.25);
  EXPECT_EQ(out.itl, (std::vector<double>{0.0, 0.5}));  // one ITL per chunk
  EXPECT_EQ(out.output_len, 4);                         // from usage
  EXPECT_EQ(out.generated_text, "Hello");
  EXPECT_DOUBLE_EQ(out.latency, 1.0);
}

TEST(BenchReader, BadStreamsFail) {
  {
    RequestOutput out;
    ResponseReader r(Backend::kSglang, true, 8, out);
    r.on_bytes(sglang_chunk("A", 1), 0.1);
    r.on_bytes("data: {not json\n\n", 0.2);
    r.finish(0.3);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("malformed"), std::string::npos) << out.error;
  }
  {
    RequestOutput out;
    ResponseReader r(Backend::kOpenAI, true, 8, out);
    r.on_bytes("data: {\"error\": {\"message\": \"out of memory\"}}\n\n", 0.1);
    r.finish(0.3);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("out of memory"), std::string::npos) << out.error;
  }
  {
    RequestOutput out;  // a JSON body where a stream was expected
    ResponseReader r(Backend::kSglang, true, 8, out);
    r.on_bytes("{\"text\": \"hi\"}", 0.1);
    r.finish(0.3);
    EXPECT_FALSE(out.success);
    EXPECT_NE(out.error.find("server-sent"), std::string::npos) << out.error;
  }
  {
    RequestOutput out;
    ResponseReader r(Backend::kSglang, true, 8, out);
    r.finish(0.3);
    EXPECT_FALSE(out.success);
  }
}

TEST(BenchReader, NonStreamingBodies) {
  RequestOutput out;
  out.start_time = 1.0;
  ResponseReader r(Backend::kSglang, false, 8, out);
  r.on_bytes(R"({"text": "abc", "meta_info": {"comple)", 1.5);
  r.on_bytes(R"(tion_tokens": 6}})", 1.75);
  r.finish(2.0);
  EXPECT_TRUE(out.success) << out.error;
  EXPECT_DOUBLE_EQ(out.latency, 1.0);
  EXPECT_DOUBLE_EQ(out.ttft, 1.0);
  EXPECT_TRUE(out.itl.empty());
  EXPECT_EQ(out.output_len, 6);
  EXPECT_EQ(out.generated_text, "abc");

  RequestOutput o2;
  ResponseReader r2(Backend::kOpenAI, false, 8, o2);
  r2.on_bytes(R"({"choices": [{"text": "xy"}], "usage": {"completion_tokens": 2}})", 0.5);
  r2.finish(0.5);
  EXPECT_TRUE(o2.success);
  EXPECT_EQ(o2.output_len, 2);
  EXPECT_EQ(o2.generated_text, "xy");
}

TEST(BenchClient, RequestBodiesAndUrls) {
  ClientOptions o;
  DatasetRow text{"hello", {}, 1, 7};
  json b = request_body(o, text, 7);
  EXPECT_EQ(b["text"], "hello");
  EXPECT_EQ(b["sampling_params"]["max_new_tokens"], 7);
  EXPECT_EQ(b["sampling_params"]["temperature"], 0.0);
  EXPECT_EQ(b["sampling_params"]["ignore_eos"], true);
  EXPECT_EQ(b["stream"], true);
  DatasetRow ids{"", {1, 2, 3}, 3, 4};
  b = request_body(o, ids, 4);
  EXPECT_EQ(b["input_ids"], json({1, 2, 3}));
  EXPECT_FALSE(b.contains("text"));

  o.backend = Backend::kOpenAI;
  o.model = "m";
  o.ignore_eos = false;
  b = request_body(o, text, 5);
  EXPECT_EQ(b["model"], "m");
  EXPECT_EQ(b["prompt"], "hello");
  EXPECT_EQ(b["max_tokens"], 5);
  EXPECT_EQ(b["ignore_eos"], false);
  EXPECT_EQ(b["stream_options"]["include_usage"], true);
  o.stream = false;
  EXPECT_FALSE(request_body(o, text, 5).contains("stream_options"));

  auto e = parse_base_url("http://127.0.0.1:30000");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->scheme_host_port, "http://127.0.0.1:30000");
  EXPECT_EQ(e->path_prefix, "");
  e = parse_base_url("https://example.com/api/v2/");
  ASSERT_TRUE(e.is_ok());
  EXPECT_EQ(e->scheme_host_port, "https://example.com");
  EXPECT_EQ(e->path_prefix, "/api/v2");
  EXPECT_FALSE(parse_base_url("127.0.0.1:30000").is_ok());
  EXPECT_FALSE(parse_base_url("ftp://x").is_ok());
  EXPECT_FALSE(parse_backend("vllm").is_ok());
}

// --- datasets --------------------------------------------------------------------------------

// The tiny preset's tokenizer (and checkpoint), made once for the whole suite.
class TinyModel : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new model::testing::TempDir();
    makemodel::MakeModelOptions o;
    o.preset = "tiny";
    o.output = dir_->path() / "tiny";
    ASSERT_TRUE(makemodel::make_model(o).is_ok());
    auto t = tokenizer::Tokenizer::from_directory(o.output);
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    tok_ = std::move(t).value().release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    delete dir_;
    tok_ = nullptr;
    dir_ = nullptr;
  }
  static fs::path model_dir() { return dir_->path() / "tiny"; }

  static model::testing::TempDir* dir_;
  static tokenizer::Tokenizer* tok_;
};
model::testing::TempDir* TinyModel::dir_ = nullptr;
tokenizer::Tokenizer* TinyModel::tok_ = nullptr;

TEST(BenchDataset, LengthRanges) {
  EXPECT_EQ(random_length_range(1024, 0.0).lo, 1);
  EXPECT_EQ(random_length_range(1024, 0.0).hi, 1024);
  EXPECT_EQ(random_length_range(1024, 0.5).lo, 512);
  EXPECT_EQ(random_length_range(10, 0.05).lo, 1);  // int(0.5) = 0 -> 1
  EXPECT_EQ(random_length_range(100, 1.0).lo, 100);
  EXPECT_EQ(random_length_range(7, 0.99).lo, 6);  // int(6.93)
}

using BenchDatasetTiny = TinyModel;

TEST_F(BenchDatasetTiny, RandomLengthsHonorTheRangeRatio) {
  RandomDatasetOptions o;
  o.num_prompts = 300;
  o.input_len = 64;
  o.output_len = 32;
  o.range_ratio = 0.5;
  std::mt19937_64 rng(3);
  const auto rows = sample_random_requests(o, tok_, rng);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  ASSERT_EQ(rows->size(), 300u);
  std::set<int32_t> in_lens, out_lens;
  for (const DatasetRow& r : *rows) {
    EXPECT_GE(r.prompt_len, 32);
    EXPECT_LE(r.prompt_len, 64);
    EXPECT_GE(r.output_len, 16);
    EXPECT_LE(r.output_len, 32);
    in_lens.insert(r.prompt_len);
    out_lens.insert(r.output_len);
    EXPECT_FALSE(r.prompt.empty());
    EXPECT_TRUE(r.input_ids.empty());
    // The decoded text re-encodes to roughly as many tokens.
    const auto n = static_cast<int32_t>(tok_->encode(r.prompt, false).size());
    EXPECT_GT(n, r.prompt_len / 3);
    EXPECT_LT(n, r.prompt_len * 3);
  }
  // Both ends of both ranges are drawn.
  EXPECT_EQ(*in_lens.begin(), 32);
  EXPECT_EQ(*in_lens.rbegin(), 64);
  EXPECT_EQ(*out_lens.begin(), 16);
  EXPECT_EQ(*out_lens.rbegin(), 32);

  // Ratio 1: exact lengths. Ids: no special token, all in the vocabulary; same seed, same rows.
  o.range_ratio = 1.0;
  o.return_text = false;
  o.num_prompts = 20;
  std::mt19937_64 rng1(9), rng2(9);
  const auto a = sample_random_requests(o, tok_, rng1);
  const auto b = sample_random_requests(o, tok_, rng2);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  for (size_t i = 0; i < a->size(); ++i) {
    const DatasetRow& r = (*a)[i];
    EXPECT_EQ(r.prompt_len, 64);
    EXPECT_EQ(r.output_len, 32);
    ASSERT_EQ(r.input_ids.size(), 64u);
    EXPECT_TRUE(r.prompt.empty());
    EXPECT_EQ(r.input_ids, (*b)[i].input_ids);
    for (const int32_t id : r.input_ids) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, tok_->vocab_size());
      EXPECT_FALSE(tok_->is_special(id)) << id;
    }
  }
  // Ratio 0: lengths from 1.
  o.range_ratio = 0.0;
  o.num_prompts = 400;
  o.input_len = 8;
  std::mt19937_64 rng3(1);
  const auto z = sample_random_requests(o, tok_, rng3);
  ASSERT_TRUE(z.is_ok());
  int32_t min_len = 100;
  for (const DatasetRow& r : *z)
    min_len = std::min(min_len, r.prompt_len);
  EXPECT_EQ(min_len, 1);
}

TEST_F(BenchDatasetTiny, RandomErrors) {
  RandomDatasetOptions o;
  std::mt19937_64 rng(1);
  o.range_ratio = 1.5;
  EXPECT_EQ(sample_random_requests(o, tok_, rng).status().code(), StatusCode::kInvalidArgument);
  o.range_ratio = 0.0;
  o.input_len = 0;
  EXPECT_NE(sample_random_requests(o, tok_, rng).status().message().find("--random-input-len"),
            std::string::npos);
  o.input_len = 4;
  EXPECT_EQ(sample_random_requests(o, nullptr, rng).status().code(),
            StatusCode::kInvalidArgument);  // text needs a tokenizer
  o.return_text = false;
  o.num_prompts = 5;
  const auto ids = sample_random_requests(o, nullptr, rng, 50);
  ASSERT_TRUE(ids.is_ok());
  for (const DatasetRow& r : *ids) {
    for (const int32_t id : r.input_ids)
      EXPECT_LT(id, 50);
  }
}

fs::path sharegpt_fixture() {
  return model::testing::fixtures_dir() / "bench/sharegpt_small.json";
}

TEST_F(BenchDatasetTiny, ShareGptFiltering) {
  ShareGptOptions o;
  o.path = sharegpt_fixture();
  o.num_prompts = 100;
  std::mt19937_64 rng(1);
  auto rows = sample_sharegpt_requests(o, *tok_, rng);
  ASSERT_TRUE(rows.is_ok()) << rows.status().to_string();
  // normal, long, singular-key, three-turns; not one-turn, short-prompt, short-output, no key.
  ASSERT_EQ(rows->size(), 4u);
  std::set<std::string> prompts;
  for (const DatasetRow& r : *rows) {
    prompts.insert(r.prompt);
    EXPECT_EQ(r.prompt_len, static_cast<int32_t>(tok_->encode(r.prompt).size()));
    EXPECT_GE(r.prompt_len, 2);
    EXPECT_GE(r.output_len, 2);
  }
  EXPECT_TRUE(prompts.count("Name three primary colours of light for me."));
  EXPECT_TRUE(prompts.count("Explain why the sky is blue in a few short sentences."));
  for (const DatasetRow& r : *rows) {
    if (r.prompt == "Name three primary colours of light for me.") {
      EXPECT_EQ(
          r.output_len,
          static_cast<int32_t>(
              tok_->encode("Red, green and blue are the three primary colours of light.").size()));
    }
  }

  o.context_len = 100;  // drops the long one
  std::mt19937_64 rng2(1);
  rows = sample_sharegpt_requests(o, *tok_, rng2);
  ASSERT_TRUE(rows.is_ok());
  EXPECT_EQ(rows->size(), 3u);
  for (const DatasetRow& r : *rows)
    EXPECT_LE(r.prompt_len + r.output_len, 100);

  o.context_len.reset();
  o.fixed_output_len = 8;  // the one-token answer is no longer too short
  std::mt19937_64 rng3(1);
  rows = sample_sharegpt_requests(o, *tok_, rng3);
  ASSERT_TRUE(rows.is_ok());
  EXPECT_EQ(rows->size(), 5u);
  for (const DatasetRow& r : *rows)
    EXPECT_EQ(r.output_len, 8);

  o.num_prompts = 2;
  std::mt19937_64 rng4(1);
  rows = sample_sharegpt_requests(o, *tok_, rng4);
  ASSERT_TRUE(rows.is_ok());
  EXPECT_EQ(rows->size(), 2u);
}

TEST_F(BenchDatasetTiny, ShareGptErrors) {
  ShareGptOptions o;
  std::mt19937_64 rng(1);
  o.path = "/no/such/sharegpt.json";
  EXPECT_EQ(sample_sharegpt_requests(o, *tok_, rng).status().code(), StatusCode::kNotFound);
  model::testing::TempDir dir;
  o.path = dir / "bad.json";
  model::testing::write_file(o.path, "{\"not\": \"a list\"}");
  EXPECT_EQ(sample_sharegpt_requests(o, *tok_, rng).status().code(), StatusCode::kInvalidArgument);
  model::testing::write_file(o.path, "[{\"conversations\": [1, 2]}]");
  EXPECT_NE(sample_sharegpt_requests(o, *tok_, rng).status().message().find("[0]"),
            std::string::npos);
  model::testing::write_file(o.path, "[{\"conversations\": ");
  EXPECT_EQ(sample_sharegpt_requests(o, *tok_, rng).status().code(), StatusCode::kInvalidArgument);
  o.path = sharegpt_fixture();
  o.fixed_output_len = 3;  // SGLang: output_len too small
  EXPECT_NE(
      sample_sharegpt_requests(o, *tok_, rng).status().message().find("--sharegpt-output-len"),
      std::string::npos);
}

TEST(BenchArrivals, PoissonStatistics) {
  std::mt19937_64 rng(42);
  const double rate = 50.0;
  const std::vector<double> t = poisson_arrival_times(20001, rate, rng);
  ASSERT_EQ(t.size(), 20001u);
  EXPECT_EQ(t[0], 0.0);
  std::vector<double> gaps;
  for (size_t i = 1; i < t.size(); ++i) {
    ASSERT_GE(t[i], t[i - 1]);
    gaps.push_back(t[i] - t[i - 1]);
  }
  const double m = mean(gaps);
  EXPECT_NEAR(m, 1.0 / rate, 0.03 / rate);                       // mean 1 / rate
  EXPECT_NEAR(stddev(gaps) / m, 1.0, 0.05);                      // exponential: std = mean
  EXPECT_NEAR(median(gaps), std::log(2.0) / rate, 0.05 / rate);  // median ln 2 / rate
  // Same seed, same schedule; an infinite rate sends everything at once.
  std::mt19937_64 again(42);
  EXPECT_EQ(poisson_arrival_times(20001, rate, again), t);
  std::mt19937_64 r2(1);
  const std::vector<double> all = poisson_arrival_times(5, INFINITY, r2);
  EXPECT_EQ(all, std::vector<double>(5, 0.0));
}

// --- end to end against a fake server --------------------------------------------------------

// Streams `max_new_tokens` tokens: the first after `ttft_s`, then `tokens_per_chunk` per chunk
// every `chunk_gap_s` (sglang), or one per chunk (openai).
class FakeServer {
 public:
  struct Script {
    double ttft_s = 0.05;
    double chunk_gap_s = 0.02;
    int tokens_per_chunk = 2;
    int fail_every = 0;  // requests n with n % fail_every == fail_every - 1 get HTTP 500
    std::string model_path;
  };

  explicit FakeServer(Script script) : script_(std::move(script)) {
    server_.Post("/generate", [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res, Backend::kSglang);
    });
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      handle(req, res, Backend::kOpenAI);
    });
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"object": "list", "data": [{"id": "fake-model"}]})", "application/json");
    });
    server_.Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
      json info = {{"version", "fake"}};
      if (!script_.model_path.empty()) info["model_path"] = script_.model_path;
      res.set_content(info.dump(), "application/json");
    });
    server_.Post("/flush_cache", [this](const httplib::Request&, httplib::Response& res) {
      ++flushes_;
      res.set_content("Cache flushed.", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    for (int i = 0; i < 500 && !server_.is_running(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return fmt::format("http://127.0.0.1:{}", port_); }
  std::vector<json> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }
  int max_in_flight() const { return max_in_flight_; }
  int flushes() const { return flushes_; }

 private:
  void handle(const httplib::Request& req, httplib::Response& res, Backend backend) {
    const int n = requests_++;
    json body = json::parse(req.body);
    {
      std::lock_guard lock(mu_);
      bodies_.push_back(body);
    }
    if (script_.fail_every > 0 && n % script_.fail_every == script_.fail_every - 1) {
      res.status = 500;
      res.set_content("scripted failure", "text/plain");
      return;
    }
    const int tokens = backend == Backend::kSglang
                           ? body["sampling_params"]["max_new_tokens"].get<int>()
                           : body["max_tokens"].get<int>();
    const bool stream = body.value("stream", false);
    if (!stream) {
      enter();
      sleep(script_.ttft_s);
      json out =
          backend == Backend::kSglang
              ? json({{"text", std::string(static_cast<size_t>(tokens), 'w')},
                      {"meta_info", {{"completion_tokens", tokens}}}})
              : json({{"choices", {{{"text", std::string(static_cast<size_t>(tokens), 'w')}}}},
                      {"usage", {{"completion_tokens", tokens}}}});
      leave();
      res.set_content(out.dump(), "application/json");
      return;
    }
    res.set_chunked_content_provider("text/event-stream", [this, tokens, backend](
                                                              size_t, httplib::DataSink& sink) {
      enter();
      auto write = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
      sleep(script_.ttft_s);
      std::string text;
      int done = 0;
      bool ok = true;
      while (ok && done < tokens) {
        if (done > 0) sleep(script_.chunk_gap_s);
        const int k = backend == Backend::kOpenAI || done == 0
                          ? 1
                          : std::min(script_.tokens_per_chunk, tokens - done);
        done += k;
        const std::string delta(static_cast<size_t>(k), 'w');
        text += delta;
        json chunk;
        if (backend == Backend::kSglang) {
          chunk = {{"text", text},
                   {"meta_info",
                    {{"id", "fake"},
                     {"prompt_tokens", 4},
                     {"completion_tokens", done},
                     {"cached_tokens", 0},
                     {"finish_reason", done == tokens ? json({{"type", "length"}}) : json(nullptr)},
                     {"e2e_latency", 0.0}}}};
        } else {
          chunk = {{"choices", {{{"index", 0}, {"text", delta}, {"finish_reason", nullptr}}}},
                   {"usage", nullptr}};
        }
        ok = write("data: " + chunk.dump() + "\n\n");
      }
      if (ok && backend == Backend::kOpenAI) {
        write("data: " +
              json({{"choices", {{{"index", 0}, {"text", ""}, {"finish_reason", "length"}}}},
                    {"usage", nullptr}})
                  .dump() +
              "\n\n");
        write("data: " +
              json({{"choices", json::array()},
                    {"usage", {{"prompt_tokens", 4}, {"completion_tokens", done}}}})
                  .dump() +
              "\n\n");
      }
      if (ok) write("data: [DONE]\n\n");
      leave();
      sink.done();
      return ok;
    });
  }
  static void sleep(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }
  void enter() {
    const int now = ++in_flight_;
    int seen = max_in_flight_.load();
    while (now > seen && !max_in_flight_.compare_exchange_weak(seen, now)) {
    }
  }
  void leave() { --in_flight_; }

  Script script_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<json> bodies_;
  std::atomic<int> requests_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> max_in_flight_{0};
  std::atomic<int> flushes_{0};
};

using BenchServingEndToEnd = TinyModel;

std::function<void(std::string_view)> collect(std::vector<std::string>& lines) {
  return [&lines](std::string_view l) { lines.emplace_back(l); };
}

TEST_F(BenchServingEndToEnd, SglangStreamingMatchesTheScript) {
  FakeServer server({});
  model::testing::TempDir dir;
  ServingOptions o;
  o.client.base_url = server.url();
  o.dataset_name = "random-ids";
  o.num_prompts = 6;
  o.random_input_len = 16;
  o.random_output_len = 8;
  o.random_range_ratio = 1.0;
  o.pause_after_warmup_s = 0;
  o.flush_cache = true;
  o.output_file = (dir / "out.jsonl").string();
  std::vector<std::string> log;
  const auto r = run_bench_serving(o, collect(log));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const BenchmarkMetrics& m = r->metrics;
  EXPECT_EQ(m.completed, 6);
  EXPECT_EQ(m.failed, 0);
  EXPECT_EQ(m.total_input, 6 * 16);
  EXPECT_EQ(m.total_output, 6 * 8);           // the server's completion_tokens
  EXPECT_EQ(m.total_output_retokenized, -1);  // the server reports no model path
  EXPECT_EQ(server.flushes(), 1);
  for (const RequestOutput& out : r->outputs) {
    EXPECT_TRUE(out.success) << out.error;
    EXPECT_EQ(out.output_len, 8);
    EXPECT_EQ(out.generated_text, std::string(8, 'w'));
    // Chunks of 1, 2, 2, 2, 1 tokens: one ITL per token after the first chunk.
    ASSERT_EQ(out.itl.size(), 7u);
    EXPECT_GE(out.ttft, 0.05);  // the server waits 50 ms before the first chunk
    EXPECT_LT(out.ttft, 2.0);
    // Four chunk gaps of 20 ms spread over seven tokens.
    const double itl_sum = std::accumulate(out.itl.begin(), out.itl.end(), 0.0);
    EXPECT_GT(itl_sum, 0.04);
    EXPECT_LT(itl_sum, 2.0);
    EXPECT_GE(out.latency, out.ttft + itl_sum - 1e-9);
  }
  EXPECT_GT(m.itl.median_ms, 3.0);  // ~10 ms: 20 ms per chunk of two tokens
  EXPECT_LT(m.itl.median_ms, 500.0);
  EXPECT_GE(m.ttft.mean_ms, 50.0);
  EXPECT_GT(m.tpot.mean_ms, 3.0);  // ~80 ms / 7
  EXPECT_GE(m.max_output_tokens_per_s, 1.0);
  EXPECT_GE(m.concurrency, 0.5);

  // The warmup (8 -> min(8, 32) tokens), then six requests of 16 random ids each.
  const std::vector<json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 7u);
  for (const json& b : bodies) {
    EXPECT_EQ(b["input_ids"].size(), 16u);
    EXPECT_EQ(b["sampling_params"]["max_new_tokens"], 8);
    EXPECT_EQ(b["sampling_params"]["temperature"], 0.0);
    EXPECT_EQ(b["sampling_params"]["ignore_eos"], true);
    EXPECT_EQ(b["stream"], true);
  }
  // One JSON line per run, appended.
  const std::string first = model::testing::read_file(o.output_file);
  EXPECT_EQ(json::parse(first)["completed"], 6);
  EXPECT_EQ(json::parse(first)["total_output_tokens"], 48);
  ASSERT_TRUE(run_bench_serving(o, collect(log)).is_ok());
  const std::string both = model::testing::read_file(o.output_file);
  EXPECT_EQ(std::count(both.begin(), both.end(), '\n'), 2);
  EXPECT_NE(r->table.find("Successful requests:                     6"), std::string::npos)
      << r->table;
}

TEST_F(BenchServingEndToEnd, OpenAiStreamingWithTheServersTokenizer) {
  FakeServer::Script script;
  script.model_path = model_dir().string();
  script.chunk_gap_s = 0.01;
  FakeServer server(script);
  ServingOptions o;
  o.client.base_url = server.url();
  o.client.backend = Backend::kOpenAI;
  o.dataset_name = "random";
  o.num_prompts = 4;
  o.random_input_len = 12;
  o.random_output_len = 6;
  o.random_range_ratio = 1.0;
  o.pause_after_warmup_s = 0;
  std::vector<std::string> log;
  const auto r = run_bench_serving(o, collect(log));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->metrics.completed, 4);
  EXPECT_EQ(r->metrics.total_output, 24);             // from the usage chunk
  EXPECT_GE(r->metrics.total_output_retokenized, 4);  // the tokenizer re-encodes "wwwwww"
  for (const RequestOutput& out : r->outputs) {
    EXPECT_EQ(out.itl.size(), 5u);  // one per chunk after the first
    EXPECT_GE(out.ttft, 0.05);
  }
  const std::vector<json> bodies = server.bodies();
  ASSERT_EQ(bodies.size(), 5u);
  for (const json& b : bodies) {
    EXPECT_EQ(b["model"], "fake-model");  // from GET /v1/models
    EXPECT_TRUE(b["prompt"].is_string());
    EXPECT_FALSE(b["prompt"].get<std::string>().empty());
    EXPECT_EQ(b["max_tokens"], 6);
    EXPECT_EQ(b["stream_options"]["include_usage"], true);
    EXPECT_EQ(b["ignore_eos"], true);
  }
  EXPECT_NE(r->table.find("Backend:                                 openai"), std::string::npos);
  EXPECT_NE(r->table.find("Total generated tokens (retokenized):"), std::string::npos);
}

TEST_F(BenchServingEndToEnd, ConcurrencyLimitRateAndNonStreaming) {
  FakeServer::Script script;
  script.ttft_s = 0.03;
  FakeServer server(script);
  ServingOptions o;
  o.client.base_url = server.url();
  o.dataset_name = "random-ids";
  o.num_prompts = 6;
  o.random_input_len = 8;
  o.random_output_len = 4;
  o.random_range_ratio = 1.0;
  o.max_concurrency = 2;
  o.request_rate = 200;
  o.pause_after_warmup_s = 0;
  o.client.stream = false;
  o.client.ignore_eos = false;
  std::vector<std::string> log;
  const auto r = run_bench_serving(o, collect(log));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->metrics.completed, 6);
  EXPECT_EQ(r->metrics.total_output, 24);
  EXPECT_LE(server.max_in_flight(), 2);
  for (const RequestOutput& out : r->outputs) {
    EXPECT_DOUBLE_EQ(out.ttft, out.latency);  // not streaming: TTFT = latency
    EXPECT_TRUE(out.itl.empty());
  }
  for (const json& b : server.bodies()) {
    EXPECT_EQ(b["stream"], false);
    EXPECT_EQ(b["sampling_params"]["ignore_eos"], false);
  }
  EXPECT_NE(r->table.find("Max request concurrency:                 2 "), std::string::npos);
  EXPECT_NE(r->table.find("Traffic request rate:                    200.0"), std::string::npos);
}

TEST_F(BenchServingEndToEnd, FailedRequestsAreCountedAndTheFirstErrorLogged) {
  FakeServer::Script script;
  script.fail_every = 3;  // requests 2, 5 (the warmup is request 0)
  FakeServer server(script);
  ServingOptions o;
  o.client.base_url = server.url();
  o.dataset_name = "random-ids";
  o.num_prompts = 6;
  o.random_input_len = 8;
  o.random_output_len = 4;
  o.random_range_ratio = 1.0;
  o.max_concurrency = 1;  // arrival order = request order
  o.pause_after_warmup_s = 0;
  std::vector<std::string> log;
  const auto r = run_bench_serving(o, collect(log));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->metrics.completed, 4);
  EXPECT_EQ(r->metrics.failed, 2);
  EXPECT_EQ(r->metrics.total_output, 16);
  bool logged = false;
  for (const std::string& l : log)
    logged = logged || (l.find("2 of 6 requests failed") != std::string::npos &&
                        l.find("HTTP 500: scripted failure") != std::string::npos);
  EXPECT_TRUE(logged);
  EXPECT_NE(r->table.find("Failed requests:                         2"), std::string::npos);
}

TEST_F(BenchServingEndToEnd, UnreachableServerAndMissingTokenizer) {
  int port = 0;
  {
    FakeServer gone({});  // a port that was just free
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  ServingOptions o;
  o.client.base_url = fmt::format("http://127.0.0.1:{}", port);
  o.dataset_name = "random-ids";
  o.num_prompts = 2;
  o.random_input_len = 4;
  o.random_output_len = 4;
  o.pause_after_warmup_s = 0;
  std::vector<std::string> log;
  auto r = run_bench_serving(o, collect(log));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(r.status().message().find("Warmup failed"), std::string::npos);

  FakeServer server({});  // reports no model path
  o.client.base_url = server.url();
  o.dataset_name = "random";
  r = run_bench_serving(o, collect(log));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("--tokenizer"), std::string::npos);

  o.tokenizer = "/no/such/tokenizer";
  r = run_bench_serving(o, collect(log));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--tokenizer"), std::string::npos);
}

TEST_F(BenchServingEndToEnd, ShareGptThroughTheCommandLine) {
  FakeServer::Script script;
  script.model_path = model_dir().string();
  script.ttft_s = 0.01;
  script.chunk_gap_s = 0.005;
  FakeServer server(script);
  model::testing::TempDir dir;
  const std::string out = (dir / "result.jsonl").string();
  const auto r = testing_util::run_kvserve(
      "bench-serving --base-url " + server.url() + " --dataset-name sharegpt --dataset-path " +
      sharegpt_fixture().string() + " --num-prompts 3 --sharegpt-output-len 5 --output-file " +
      out);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("============ Serving Benchmark Result ============"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Successful requests:                     3"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("Total generated tokens:                  15"), std::string::npos)
      << r.output;
  const json j = json::parse(model::testing::read_file(out));
  EXPECT_EQ(j["completed"], 3);
  EXPECT_EQ(j["dataset_name"], "sharegpt");
  EXPECT_EQ(j["sharegpt_output_len"], 5);
  EXPECT_EQ(j["request_rate"], "inf");
}

TEST_F(BenchServingEndToEnd, CommandLineUsageErrors) {
  FakeServer server({});
  const std::string base = "bench-serving --base-url " + server.url();
  auto r = testing_util::run_kvserve(base + " --backend tgi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--backend"), std::string::npos) << r.output;
  r = testing_util::run_kvserve(base + " --request-rate 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--request-rate"), std::string::npos) << r.output;
  r = testing_util::run_kvserve(base + " --request-rate fast");
  EXPECT_EQ(r.exit_code, 2);
  r = testing_util::run_kvserve(base + " --dataset-name sharegpt");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--dataset-path"), std::string::npos) << r.output;
  r = testing_util::run_kvserve(base + " --dataset-name mooncake");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--dataset-name"), std::string::npos) << r.output;
  r = testing_util::run_kvserve(base + " --dataset-name random-ids --random-range-ratio 2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--random-range-ratio"), std::string::npos) << r.output;
  r = testing_util::run_kvserve(
      "bench-serving --base-url http://127.0.0.1:1 --dataset-name random-ids --num-prompts 1 "
      "--random-input-len 4 --random-output-len 4");
  EXPECT_EQ(r.exit_code, 1);  // a runtime failure: nothing listens there
  EXPECT_NE(r.output.find("Warmup failed"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvserve::bench

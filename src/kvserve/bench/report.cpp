#include "kvserve/bench/report.h"

#include <fmt/format.h>

#include <cmath>

namespace kvserve::bench {
namespace {

class Table {
 public:
  // Python's "{s:{c}^{n}}": centred, the odd fill character on the right.
  void title(std::string_view s, char fill) {
    const size_t pad = s.size() < 50 ? 50 - s.size() : 0;
    out_ += std::string(pad / 2, fill) + std::string(s) + std::string(pad - pad / 2, fill) + "\n";
  }
  void row(std::string_view label, std::string_view value) {
    out_ += fmt::format("{:<40} {:<10}\n", label, value);
  }
  void row(std::string_view label, int64_t value) { row(label, std::to_string(value)); }
  void row(std::string_view label, double value) { row(label, fmt::format("{:.2f}", value)); }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string python_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

std::string format_report(const BenchmarkMetrics& m, const ReportInfo& info) {
  Table t;
  t.title(" Serving Benchmark Result ", '=');
  t.row("Backend:", info.backend);
  t.row("Traffic request rate:", python_float(info.request_rate));
  t.row("Max request concurrency:",
        info.max_concurrency > 0 ? std::to_string(info.max_concurrency) : "not set");
  t.row("Successful requests:", int64_t{m.completed});
  t.row("Failed requests:", int64_t{m.failed});
  t.row("Benchmark duration (s):", m.duration_s);
  t.row("Total input tokens:", m.total_input);
  t.row("Total generated tokens:", m.total_output);
  if (m.total_output_retokenized >= 0) {
    t.row("Total generated tokens (retokenized):", m.total_output_retokenized);
  }
  t.row("Request throughput (req/s):", m.request_throughput);
  t.row("Input token throughput (tok/s):", m.input_throughput);
  t.row("Output token throughput (tok/s):", m.output_throughput);
  t.row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
  t.row("Peak concurrent requests:", int64_t{m.max_concurrent_requests});
  t.row("Total token throughput (tok/s):", m.total_throughput);
  t.row("Concurrency:", m.concurrency);
  t.title("End-to-End Latency", '-');
  t.row("Mean E2E Latency (ms):", m.e2e.mean_ms);
  t.row("Median E2E Latency (ms):", m.e2e.median_ms);
  t.row("P99 E2E Latency (ms):", m.e2e.p99_ms);
  t.title("Time to First Token", '-');
  t.row("Mean TTFT (ms):", m.ttft.mean_ms);
  t.row("Median TTFT (ms):", m.ttft.median_ms);
  t.row("P99 TTFT (ms):", m.ttft.p99_ms);
  if (m.token_chunk_requests > 0) {
    t.row("Median first token chunk (ms):", m.first_token_chunk.median_ms);
    t.row("Mean tokens before text:", m.mean_tokens_before_text);
  }
  t.title("Time per Output Token (excl. 1st token)", '-');
  t.row("Mean TPOT (ms):", m.tpot.mean_ms);
  t.row("Median TPOT (ms):", m.tpot.median_ms);
  t.row("P99 TPOT (ms):", m.tpot.p99_ms);
  t.title("Inter-Token Latency", '-');
  t.row("Mean ITL (ms):", m.itl.mean_ms);
  t.row("Median ITL (ms):", m.itl.median_ms);
  t.row("P95 ITL (ms):", m.itl.p95_ms);
  t.row("P99 ITL (ms):", m.itl.p99_ms);
  t.row("Max ITL (ms):", m.itl.max_ms);
  if (m.token_chunk_requests > 0) {
    // Between chunks that brought tokens, text or not: the decode's pace when random weights'
    // text is held back (the ITL above spreads a held-back run evenly over its tokens).
    t.row("Median token-chunk ITL (ms):", m.token_itl.median_ms);
    t.row("P99 token-chunk ITL (ms):", m.token_itl.p99_ms);
    t.row("Max token-chunk ITL (ms):", m.token_itl.max_ms);
  }
  std::string out = t.take();
  out += std::string(50, '=') + "\n";
  return out;
}

nlohmann::json result_json(const BenchmarkMetrics& m, const ReportInfo& info) {
  using nlohmann::json;
  json j;
  j["backend"] = info.backend;
  j["dataset_name"] = info.dataset_name;
  j["request_rate"] = std::isinf(info.request_rate) ? json("inf") : json(info.request_rate);
  j["max_concurrency"] = info.max_concurrency > 0 ? json(info.max_concurrency) : json(nullptr);
  j["num_prompts"] = info.num_prompts;
  j["sharegpt_output_len"] =
      info.sharegpt_output_len.has_value() ? json(*info.sharegpt_output_len) : json(nullptr);
  j["random_input_len"] = info.random_input_len;
  j["random_output_len"] = info.random_output_len;
  j["random_range_ratio"] = info.random_range_ratio;
  j["duration"] = m.duration_s;
  j["completed"] = m.completed;
  j["failed"] = m.failed;
  j["total_input_tokens"] = m.total_input;
  j["total_output_tokens"] = m.total_output;
  j["total_output_tokens_retokenized"] =
      m.total_output_retokenized >= 0 ? json(m.total_output_retokenized) : json(nullptr);
  j["request_throughput"] = m.request_throughput;
  j["input_throughput"] = m.input_throughput;
  j["output_throughput"] = m.output_throughput;
  j["total_throughput"] = m.total_throughput;
  j["mean_e2e_latency_ms"] = m.e2e.mean_ms;
  j["median_e2e_latency_ms"] = m.e2e.median_ms;
  j["std_e2e_latency_ms"] = m.e2e.std_ms;
  j["p99_e2e_latency_ms"] = m.e2e.p99_ms;
  j["mean_ttft_ms"] = m.ttft.mean_ms;
  j["median_ttft_ms"] = m.ttft.median_ms;
  j["std_ttft_ms"] = m.ttft.std_ms;
  j["p99_ttft_ms"] = m.ttft.p99_ms;
  if (m.token_chunk_requests > 0) {
    j["mean_first_token_chunk_ms"] = m.first_token_chunk.mean_ms;
    j["median_first_token_chunk_ms"] = m.first_token_chunk.median_ms;
    j["mean_tokens_before_text"] = m.mean_tokens_before_text;
    j["median_token_chunk_itl_ms"] = m.token_itl.median_ms;
    j["p99_token_chunk_itl_ms"] = m.token_itl.p99_ms;
    j["max_token_chunk_itl_ms"] = m.token_itl.max_ms;
  }
  j["mean_tpot_ms"] = m.tpot.mean_ms;
  j["median_tpot_ms"] = m.tpot.median_ms;
  j["std_tpot_ms"] = m.tpot.std_ms;
  j["p99_tpot_ms"] = m.tpot.p99_ms;
  j["mean_itl_ms"] = m.itl.mean_ms;
  j["median_itl_ms"] = m.itl.median_ms;
  j["std_itl_ms"] = m.itl.std_ms;
  j["p95_itl_ms"] = m.itl.p95_ms;
  j["p99_itl_ms"] = m.itl.p99_ms;
  j["max_itl_ms"] = m.itl.max_ms;
  j["concurrency"] = m.concurrency;
  j["max_output_tokens_per_s"] = m.max_output_tokens_per_s;
  j["max_concurrent_requests"] = m.max_concurrent_requests;
  return j;
}

}  // namespace kvserve::bench

// bench-serving metrics: SGLang's calculate_metrics (python/sglang/bench_serving.py).
//
// Every time is in seconds on one steady clock whose zero is the start of the benchmark; the
// reported latencies are in milliseconds. Statistics follow numpy: the median and percentiles
// interpolate linearly between order statistics, std is the population std, and an empty sample
// gives 0 (SGLang's `np.mean(ttfts or 0)`).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kvserve::bench {

// What one request produced (SGLang's RequestFuncOutput).
struct RequestOutput {
  bool success = false;
  std::string error;           // why it failed (HTTP status, connection error, bad stream)
  std::string generated_text;  // the whole output text
  double start_time = 0.0;     // when it was sent, seconds since the benchmark started
  double latency = 0.0;        // E2E: from sending to the last event of the response
  double ttft = 0.0;           // time to the first chunk with text
  // SGLang's native stream only (its chunks carry completion_tokens even while the text is still
  // held back, e.g. incomplete UTF-8): time to the first chunk with a token, text or not (-1:
  // not known), and the tokens of the chunks without text before the first text.
  double first_token_chunk = -1.0;
  int32_t tokens_before_text = 0;
  // The gaps between chunks that brought tokens, text or not (SGLang's native stream only), one
  // per token after the first chunk: the decode's pace even while text is held back.
  std::vector<double> token_itl;
  std::vector<double> itl;  // inter-token latencies after the first chunk, one per token
  int32_t prompt_len = 0;   // the dataset's prompt length
  int32_t output_len = 0;   // the server's completion_tokens (else the requested length)
};

// numpy.percentile(values, p) with its default linear interpolation; 0 when empty.
double percentile(std::span<const double> values, double p);
double mean(std::span<const double> values);
double median(std::span<const double> values);
double stddev(std::span<const double> values);  // population (ddof = 0), as numpy

// Mean, median, std and the percentiles a report shows, in milliseconds.
struct LatencyStats {
  double mean_ms = 0, median_ms = 0, std_ms = 0, p95_ms = 0, p99_ms = 0, max_ms = 0;
};
LatencyStats latency_stats(std::span<const double> seconds);

struct BenchmarkMetrics {
  int32_t completed = 0;
  int32_t failed = 0;
  int64_t total_input = 0;
  int64_t total_output = 0;
  int64_t total_output_retokenized = -1;  // -1: no tokenizer to count with
  double duration_s = 0;
  double request_throughput = 0;        // completed / duration
  double input_throughput = 0;          // total_input / duration
  double output_throughput = 0;         // total_output / duration
  double total_throughput = 0;          // (total_input + total_output) / duration
  double concurrency = 0;               // sum of E2E latencies / duration
  double max_output_tokens_per_s = 0;   // the busiest 1-second bucket of token arrivals
  int32_t max_concurrent_requests = 0;  // the busiest 1-second bucket of requests in flight
  LatencyStats e2e, ttft, tpot, itl;
  // Over requests whose stream told (RequestOutput::first_token_chunk >= 0); else zeros. A TTFT
  // well above the first token chunk means the detokenizer held the first tokens' text back.
  int32_t token_chunk_requests = 0;
  LatencyStats first_token_chunk;
  double mean_tokens_before_text = 0;
  LatencyStats token_itl;  // RequestOutput::token_itl of those requests
};

// Token arrivals (start + ttft, then + each ITL) and requests in flight, in 1-second buckets
// from the earliest start of a successful request (SGLang's peak throughput metrics).
struct PeakStats {
  double max_output_tokens_per_s = 0;
  int32_t max_concurrent_requests = 0;
};
PeakStats peak_stats(std::span<const RequestOutput> outputs);

// Metrics over `outputs` for a benchmark that lasted `duration_s`. Failed requests count only
// in `failed`; TPOT = (latency - ttft) / (output_len - 1) for requests with output_len > 1.
// `retokenized_lens` (optional, one per output) are the generated texts re-encoded.
BenchmarkMetrics calculate_metrics(std::span<const RequestOutput> outputs, double duration_s,
                                   std::span<const int64_t> retokenized_lens = {});

}  // namespace kvserve::bench

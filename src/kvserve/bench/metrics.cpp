#include "kvserve/bench/metrics.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "kvserve/core/check.h"

namespace kvserve::bench {

double percentile(std::span<const double> values, double p) {
  KV_CHECK(p >= 0 && p <= 100, "percentile {} outside [0, 100]", p);
  if (values.empty()) return 0.0;
  std::vector<double> v(values.begin(), values.end());
  std::sort(v.begin(), v.end());
  const double rank = p / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return v[lo] + (v[hi] - v[lo]) * frac;
}

double mean(std::span<const double> values) {
  if (values.empty()) return 0.0;
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double median(std::span<const double> values) {
  return percentile(values, 50);
}

double stddev(std::span<const double> values) {
  if (values.empty()) return 0.0;
  const double m = mean(values);
  double sq = 0;
  for (const double v : values)
    sq += (v - m) * (v - m);
  return std::sqrt(sq / static_cast<double>(values.size()));
}

LatencyStats latency_stats(std::span<const double> seconds) {
  LatencyStats s;
  s.mean_ms = mean(seconds) * 1000;
  s.median_ms = median(seconds) * 1000;
  s.std_ms = stddev(seconds) * 1000;
  s.p95_ms = percentile(seconds, 95) * 1000;
  s.p99_ms = percentile(seconds, 99) * 1000;
  s.max_ms = seconds.empty() ? 0.0 : *std::max_element(seconds.begin(), seconds.end()) * 1000;
  return s;
}

PeakStats peak_stats(std::span<const RequestOutput> outputs) {
  PeakStats peak;
  double min_start = INFINITY;
  double max_end = -INFINITY;
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    min_start = std::min(min_start, o.start_time);
    max_end = std::max(max_end, o.start_time + o.latency);
  }
  if (!std::isfinite(min_start)) return peak;
  const auto buckets = static_cast<size_t>(std::ceil(max_end - min_start)) + 1;
  std::vector<double> tokens(buckets, 0.0);
  std::vector<int32_t> in_flight(buckets, 0);
  auto bucket_of = [&](double t) { return static_cast<int64_t>(t - min_start); };
  for (const RequestOutput& o : outputs) {
    if (!o.success) continue;
    double t = o.start_time + o.ttft;
    auto count_token = [&](double at) {
      const int64_t b = bucket_of(at);
      if (b >= 0 && b < static_cast<int64_t>(buckets)) tokens[static_cast<size_t>(b)] += 1;
    };
    count_token(t);
    for (const double gap : o.itl) {
      t += gap;
      count_token(t);
    }
    const int64_t first = bucket_of(o.start_time);
    const int64_t last =
        std::min(bucket_of(o.start_time + o.latency) + 1, static_cast<int64_t>(buckets));
    for (int64_t b = std::max<int64_t>(first, 0); b < last; ++b)
      in_flight[static_cast<size_t>(b)] += 1;
  }
  peak.max_output_tokens_per_s = *std::max_element(tokens.begin(), tokens.end());
  peak.max_concurrent_requests = *std::max_element(in_flight.begin(), in_flight.end());
  return peak;
}

BenchmarkMetrics calculate_metrics(std::span<const RequestOutput> outputs, double duration_s,
                                   std::span<const int64_t> retokenized_lens) {
  KV_CHECK_GT(duration_s, 0.0);
  KV_CHECK(retokenized_lens.empty() || retokenized_lens.size() == outputs.size(),
           "{} retokenized lengths for {} outputs", retokenized_lens.size(), outputs.size());
  BenchmarkMetrics m;
  m.duration_s = duration_s;
  std::vector<double> e2e, ttft, tpot, itl, first_chunk, token_itl;
  int64_t tokens_before_text = 0;
  int64_t retokenized = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const RequestOutput& o = outputs[i];
    if (!o.success) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input += o.prompt_len;
    m.total_output += o.output_len;
    if (!retokenized_lens.empty()) retokenized += retokenized_lens[i];
    if (o.output_len > 1) tpot.push_back((o.latency - o.ttft) / (o.output_len - 1));
    itl.insert(itl.end(), o.itl.begin(), o.itl.end());
    ttft.push_back(o.ttft);
    if (o.first_token_chunk >= 0) {
      first_chunk.push_back(o.first_token_chunk);
      tokens_before_text += o.tokens_before_text;
      token_itl.insert(token_itl.end(), o.token_itl.begin(), o.token_itl.end());
    }
    e2e.push_back(o.latency);
  }
  if (!retokenized_lens.empty()) m.total_output_retokenized = retokenized;
  m.request_throughput = m.completed / duration_s;
  m.input_throughput = static_cast<double>(m.total_input) / duration_s;
  m.output_throughput = static_cast<double>(m.total_output) / duration_s;
  m.total_throughput = static_cast<double>(m.total_input + m.total_output) / duration_s;
  m.concurrency = std::accumulate(e2e.begin(), e2e.end(), 0.0) / duration_s;
  const PeakStats peak = peak_stats(outputs);
  m.max_output_tokens_per_s = peak.max_output_tokens_per_s;
  m.max_concurrent_requests = peak.max_concurrent_requests;
  m.e2e = latency_stats(e2e);
  m.ttft = latency_stats(ttft);
  m.tpot = latency_stats(tpot);
  m.itl = latency_stats(itl);
  m.token_chunk_requests = static_cast<int32_t>(first_chunk.size());
  m.first_token_chunk = latency_stats(first_chunk);
  m.token_itl = latency_stats(token_itl);
  if (!first_chunk.empty()) {
    m.mean_tokens_before_text =
        static_cast<double>(tokens_before_text) / static_cast<double>(first_chunk.size());
  }
  return m;
}

}  // namespace kvserve::bench

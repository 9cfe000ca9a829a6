// The decode-phase timing both one-batch benchmarks report (bench-one-batch on decoder-only and
// Whisper checkpoints), as SGLang's bench_one_batch does: each decode step's latency (the first
// five logged), then the median step and its throughput, the total latency and the overall
// throughput, with their log lines and JSON fields.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace kvserve::bench {

struct DecodeTiming {
  std::vector<double> decode_latencies;            // one per decode step (output_len - 1)
  std::optional<double> median_decode_latency;     // when there was a decode step
  std::optional<double> median_decode_throughput;  // batch / median latency
  double total_latency = 0;                        // what came before + every decode step
  double overall_throughput = 0;                   // tokens / total_latency

  // One decode step of `batch_size` requests; "Decode i. ..." for the first five.
  void add_step(double latency, int32_t batch_size,
                const std::function<void(std::string_view)>& log);
  // The median (when there were steps) and the overall throughput of `tokens` (prompt + output,
  // all requests) over total_latency; "Decode. median ..." and "Total. ..." lines.
  void finish(int32_t batch_size, double tokens, const std::function<void(std::string_view)>& log);
  // median_decode_latency / _throughput (when set), total_latency, overall_throughput.
  void add_json(nlohmann::json& j) const;
};

}  // namespace kvserve::bench

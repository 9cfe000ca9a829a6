#include "kvserve/bench/decode_timing.h"

#include <fmt/format.h>

#include "kvserve/bench/metrics.h"

namespace kvserve::bench {

void DecodeTiming::add_step(double latency, int32_t batch_size,
                            const std::function<void(std::string_view)>& log) {
  if (decode_latencies.size() < 5) {
    log(fmt::format("Decode {}. Batch size: {}, latency: {:6.5f} s, throughput: {:9.2f} token/s",
                    decode_latencies.size(), batch_size, latency, batch_size / latency));
  }
  decode_latencies.push_back(latency);
  total_latency += latency;
}

void DecodeTiming::finish(int32_t batch_size, double tokens,
                          const std::function<void(std::string_view)>& log) {
  if (!decode_latencies.empty()) {
    const double med = median(decode_latencies);
    median_decode_latency = med;
    median_decode_throughput = batch_size / med;
    log(fmt::format("Decode.  median latency: {:6.5f} s, median throughput: {:9.2f} token/s", med,
                    *median_decode_throughput));
  }
  overall_throughput = tokens / total_latency;
  log(fmt::format("Total. latency: {:6.3f} s, throughput: {:9.2f} token/s", total_latency,
                  overall_throughput));
}

void DecodeTiming::add_json(nlohmann::json& j) const {
  if (median_decode_latency.has_value()) {
    j["median_decode_latency"] = *median_decode_latency;
    j["median_decode_throughput"] = *median_decode_throughput;
  }
  j["total_latency"] = total_latency;
  j["overall_throughput"] = overall_throughput;
}

}  // namespace kvserve::bench

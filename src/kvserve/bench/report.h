// bench-serving's output: SGLang's result table ("{:<40} {:<10}" rows under
// "==== Serving Benchmark Result ====") and the JSON line appended to --output-file.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include "kvserve/bench/metrics.h"

namespace kvserve::bench {

// The arguments a report repeats.
struct ReportInfo {
  std::string backend;
  std::string dataset_name;
  double request_rate = INFINITY;
  int32_t max_concurrency = 0;  // 0: not set
  int32_t num_prompts = 0;
  std::optional<int32_t> sharegpt_output_len;
  int32_t random_input_len = 0;
  int32_t random_output_len = 0;
  double random_range_ratio = 0;
};

// A double as Python's str() writes it: "inf", "4.0", "0.5".
std::string python_float(double v);

// The table, every line ending in '\n'. The retokenized line only when the metrics have it.
std::string format_report(const BenchmarkMetrics& m, const ReportInfo& info);

// SGLang's result dict (the same keys) plus failed, num_prompts, p95/max ITL and the peaks.
// request_rate is the string "inf" for an infinite rate; max_concurrency null when not set.
nlohmann::json result_json(const BenchmarkMetrics& m, const ReportInfo& info);

}  // namespace kvserve::bench

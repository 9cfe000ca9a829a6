// `kvserve bench-serving`: SGLang's bench_serving.py benchmark() as a library call.
//
// Tokenizer (--tokenizer, else the server's tokenizer_path / model_path from /get_server_info)
// -> dataset -> one warmup request -> optional /flush_cache -> every request on its Poisson
// schedule under the concurrency limit -> metrics, the table, and a JSON line.
#pragma once

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/bench/client.h"
#include "kvserve/bench/dataset.h"
#include "kvserve/bench/metrics.h"
#include "kvserve/bench/report.h"
#include "kvserve/core/status.h"

namespace kvserve::bench {

struct ServingOptions {
  ClientOptions client;                   // base URL, backend, model, stream, ignore_eos
  std::string dataset_name = "sharegpt";  // sharegpt, random or random-ids
  std::string dataset_path;               // the ShareGPT JSON file
  int32_t num_prompts = 1000;
  int32_t random_input_len = 1024;
  int32_t random_output_len = 1024;
  double random_range_ratio = 0.0;
  std::optional<int32_t> sharegpt_output_len;
  std::optional<int32_t> sharegpt_context_len;
  double request_rate = INFINITY;  // requests per second; inf: all at once
  int32_t max_concurrency = 0;     // 0: no limit
  uint64_t seed = 1;
  bool flush_cache = false;
  std::string tokenizer;    // a directory with tokenizer.json; empty: ask the server
  std::string output_file;  // append the JSON result line; empty: none
  int32_t warmup_requests = 1;
  double pause_after_warmup_s = 1.0;  // SGLang sleeps 1 s before the run
};

struct ServingResult {
  std::vector<RequestOutput> outputs;
  BenchmarkMetrics metrics;
  std::string table;
  nlohmann::json json;
};

// Usage errors (a bad option, a missing dataset or tokenizer) are kInvalidArgument or
// kNotFound; a server that cannot be used (unreachable, warmup failed) is kUnavailable. Progress
// lines ("#Input tokens: ...", warmup, the first error of failed requests) go to `log`.
Result<ServingResult> run_bench_serving(const ServingOptions& options,
                                        const std::function<void(std::string_view)>& log);

}  // namespace kvserve::bench

// bench-attention: paged decode attention on a fragmented pool, timed against the device's copy
// bandwidth, with its error against the float64 reference.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/platform/platform.h"

namespace kvserve::bench {

struct AttentionBenchConfig {
  std::string backend = "cuda-paged";
  int32_t batch = 16;
  int32_t seq_len = 4096;
  int32_t page_size = 16;
  int32_t num_q_heads = 32;
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  int32_t iters = 50;
  int32_t num_splits = 0;  // 0: plan_paged_decode decides
  uint64_t seed = 1;
  bool check = true;              // compute the reference and the max error
  bool measure_copy = true;       // time a 1 GiB device copy for the roofline
  std::vector<int32_t> seq_lens;  // per request (tests: ragged, empty); empty: seq_len each
};

struct AttentionBenchResult {
  double median_ms = 0;
  double kv_bytes = 0;      // K and V bytes read
  double gbps = 0;          // kv_bytes / median time
  double copy_gbps = 0;     // device-to-device copy: (read + write) bytes / time
  double roofline_pct = 0;  // gbps / copy_gbps
  double max_abs_err = -1;  // against the float64 reference; -1 when not checked
  // The largest error in units of the reference's bf16 spacing (ulp; at least 2^-10 near zero):
  // rounding the exact result to bf16 alone gives up to 0.5.
  double max_ulp_err = -1;
  int32_t num_splits = 1;
};

Result<AttentionBenchResult> run_attention_bench(platform::Platform& platform,
                                                 const AttentionBenchConfig& config);

}  // namespace kvserve::bench

// bench-attention: one attention kernel on a fragmented pool with its error against the float64
// reference. Decode mode (the default): paged decode, timed against the device's copy bandwidth,
// through the CUDA-core decode kernel (kernel "decode") or its tensor-core variant (kernel "tc":
// ops::paged_decode_tc). Prefill mode: `batch` requests of seq_len new tokens after prefix_len
// cached ones, through the tensor-core paged prefill kernel (or the decode kernel with one query
// per token, today's extend path, with kernel "decode-per-token"), timed in TFLOP/s against a
// stated peak. --kv-dtype fp8_e4m3 / fp8_e5m2 stores the pool in fp8 (quantised from the same
// bf16 draws with k_scale / v_scale, 1 from the command line): the roofline counts the bytes of
// the cache dtype, and the reference reads the dequantised fp8 values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"
#include "kvserve/platform/platform.h"

namespace kvserve::bench {

struct AttentionBenchConfig {
  std::string backend = "cuda-paged";
  std::string mode = "decode";  // decode or prefill
  // Decode mode: decode (default) or tc (alias decode-tc); prefill mode: prefill (default) or
  // decode-per-token. Empty: the mode's default.
  std::string kernel;
  // Prefill: the tile shape (ops::parse_prefill_variant); decode tc: the pipeline depth, auto
  // (ops::resolve_decode_tc_stages), s2, s3 or s4.
  std::string variant = "auto";
  int32_t batch = 16;
  int32_t seq_len = 4096;
  int32_t page_size = 16;
  int32_t num_q_heads = 32;
  int32_t num_kv_heads = 8;
  int32_t head_dim = 128;
  DType kv_dtype = DType::kBF16;  // the pool's: kBF16, kFP8E4M3 or kFP8E5M2
  float k_scale = 1.0f;           // fp8 pools: stored = value / scale (tests vary them)
  float v_scale = 1.0f;
  int32_t iters = 50;
  int32_t num_splits = 0;  // 0: the kernel's plan decides (plan_paged_decode[_tc])
  // With num_splits > 0: every request cut alike in tokens_per_split chunks (0: ceil(longest /
  // num_splits)) unless min_tokens_per_split > 0 asks for per-request splits.
  int32_t tokens_per_split = 0;
  int32_t min_tokens_per_split = -1;  // -1: the plan's (0 with num_splits > 0)
  bool flush_l2 = false;              // decode: overwrite 256 MiB between timed launches
  // Decode: > 0 times `layers` launches queued back to back, each over its own copy of the K/V
  // cache (one page table, as a model's layers share theirs), and reports the time per launch:
  // what a decode step pays per layer, with no host launch gap and no cache reused from L2.
  int32_t layers = 0;
  // Decode, tensor cores: read the metadata and the first K/V tiles before waiting for the
  // preceding kernel (PagedDecodeParams::stable_before_wait), as a decode step's attention does.
  bool early_loads = true;
  uint64_t seed = 1;
  bool check = true;              // compute the reference and the max error
  bool measure_copy = true;       // time a 1 GiB device copy for the roofline
  std::vector<int32_t> seq_lens;  // per request (tests: ragged, empty); empty: seq_len each
  // Sliding window and soft-capping (paged_decode_params.h), both modes; the roofline and FLOP
  // counts cover the positions a query reads.
  int32_t window_left = -1;
  float logit_softcap = 0.0f;
  float sm_scale = 0.0f;  // 0: 1 / sqrt(head_dim); tests raise it so that soft-capping bites
  // Prefill mode.
  int32_t prefix_len = 0;        // cached positions before the seq_len new tokens
  bool causal = true;            // false: every query sees all its request's positions
  std::vector<int32_t> q_lens;   // per request new tokens (tests); empty: seq_len each
  std::vector<int32_t> kv_lens;  // per request positions; empty: prefix_len + q_len
  // Contiguous K/V (page_ids null: request b's position t is row page_indptr[b] + t), page size 1.
  bool contiguous = false;
  double peak_tflops = 989.4;   // H100/H200 SXM dense bf16, the vendor's figure
  double check_max_work = 4e9;  // reference multiply-adds; queries are subsampled above it
};

struct AttentionBenchResult {
  double median_ms = 0;
  double kv_bytes = 0;      // K and V bytes read (of the cache dtype)
  double gbps = 0;          // kv_bytes / median time
  double copy_gbps = 0;     // device-to-device copy: (read + write) bytes / time
  double roofline_pct = 0;  // gbps / copy_gbps
  double max_abs_err = -1;  // against the float64 reference; -1 when not checked
  // The largest error in units of the reference's bf16 spacing (ulp; at least 2^-10 near zero):
  // rounding the exact result to bf16 alone gives up to 0.5.
  double max_ulp_err = -1;
  int32_t num_splits = 1;
  int32_t ctas_per_sm = 0;  // decode tc: resident blocks per SM (CUDA occupancy calculator)
  // Prefill mode.
  double flops = 0;             // 4 * head_dim * num_q_heads * visible keys over all queries
  double tflops = 0;            // flops / median time
  double peak_pct = 0;          // tflops / peak_tflops
  int32_t checked_queries = 0;  // query tokens compared with the reference
  std::string variant;          // the kernel and tile shape that ran (decode: decode, tc-s3)
};

Result<AttentionBenchResult> run_attention_bench(platform::Platform& platform,
                                                 const AttentionBenchConfig& config);

}  // namespace kvserve::bench

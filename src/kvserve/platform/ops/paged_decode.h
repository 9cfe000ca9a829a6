// Paged decode attention (paged_decode_params.h): the plan (split-KV decision, made once per
// batch and reused by every layer) and the op, dispatched on the platform at one boundary.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvserve/platform/ops/paged_decode_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

struct PagedDecodePlan {
  int32_t num_splits = 1;
  int32_t tokens_per_split = 0;
  int32_t min_tokens_per_split = 0;  // what per-request splits keep (PagedDecodeParams)
  size_t workspace_floats = 0;       // partial outputs + log-sum-exps, 0 without splitting
  // uint32 split counters the plan uses (PagedDecodeParams::split_counters; the tensor-core plan
  // only, 0 without splitting). They live in a buffer of their own, zeroed once when allocated:
  // counter i must stay a counter for every plan that buffer serves (plans of other batch sizes
  // lay their floats out differently), and the kernel leaves them zero after each launch.
  size_t workspace_counters = 0;
};

// Where a plan's workspace puts its parts (the layout every caller uses): in `floats`, partial
// outputs [batch, num_q_heads, num_splits, head_dim] then log-sum-exps [batch, num_q_heads,
// num_splits]; the split counters at the start of `counters` (a zeroed buffer of at least
// workspace_counters uint32s, or nullptr: the kernel then merges with a second launch). All null
// without splitting.
struct PagedDecodeWorkspace {
  float* partial_out = nullptr;
  float* partial_lse = nullptr;
  uint32_t* split_counters = nullptr;
};
PagedDecodeWorkspace paged_decode_workspace(const PagedDecodePlan& plan, float* floats,
                                            uint32_t* counters, int32_t head_dim);

// Splits each request's KV so that batch x num_kv_heads x splits blocks fill `num_sms`
// multiprocessors about three times over, keeping at least 256 tokens per split (a split's fixed
// cost is a merge of head_dim floats per query head). tokens_per_split cuts every request alike;
// min_tokens_per_split (256) lets each request cut its own (the same chunks for the longest one).
// With per-request splits a request of length L uses min(num_splits, ceil(L / 256)) splits, where
// num_splits depends on max_seq_len only through a cap that L never reaches: a plan for the
// largest possible max_seq_len (a decode graph's) cuts every request as the plan for its batch.
// A sliding window (window_left >= 0) plans over the positions a query reads, at most
// window_left + 1 (windowed_len): the kernels split only those.
PagedDecodePlan plan_paged_decode(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads,
                                  int32_t head_dim, int32_t max_seq_len, int32_t num_sms,
                                  int32_t window_left = -1);

// Streaming multiprocessors of a CUDA platform's device (1 on the CPU): the split decision's input.
int32_t num_compute_units(platform::Platform& platform);

// The KV cache dtypes the paged kernels read: bf16, fp8_e4m3, fp8_e5m2 (params' kv_dtype).
bool is_paged_kv_dtype(DType t);

// The K/V row of position t for a query whose page list starts at page_indptr entry `first`:
// through page_ids, or row first + t for contiguous K/V (page_ids null; params headers). Host side:
// the float64 references; the kernels inline the same rule.
inline int64_t kv_row_of(const int32_t* page_ids, int32_t first, int32_t page_size, int32_t t) {
  if (page_ids == nullptr) return int64_t{first} + t;
  return static_cast<int64_t>(page_ids[first + t / page_size]) * page_size + t % page_size;
}

// CHECKs what every paged kernel needs of its addressing: contiguous K/V come with page size 1.
void check_kv_addressing(const int32_t* page_ids, int32_t page_size);

// Runs on `stream`. CUDA only for now; the CPU platform's attention is the `cpu` backend.
void paged_decode(platform::Platform& platform, const PagedDecodeParams& params,
                  platform::StreamHandle stream = {});

namespace reference {
// Element `index` of a host KV cache of `dtype` as the kernels see it: bf16 as is, fp8 times
// `scale` (the dequantised value), in float64.
double kv_value(const void* cache, DType dtype, int64_t index, float scale);

// The same computation on host buffers in float64 (bf16 q, bf16 or fp8 K/V dequantised with the
// params' scales, float out), for tests and bench-attention's error column. `out` is
// [batch, num_q_heads, head_dim].
void paged_decode(const PagedDecodeParams& params, float* out);

// A score after soft-capping (paged_decode_params.h): cap * tanh(score / cap), or as is (cap 0).
double softcapped(double score, float logit_softcap);
}  // namespace reference

}  // namespace kvserve::ops

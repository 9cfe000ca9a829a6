// Parameters of variable-length attention over contiguous K/V and of the gather that builds that
// K/V from the paged pool (fmt-free, so a CUDA source may include it). The cuda-ragged backend
// gathers each request's slots, then attends; Whisper's encoder calls the one-sequence case
// (cu_q null, not causal) on its packed q|k|v rows.
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

// k_out[i] = k_cache[slots[i]], v_out[i] = v_cache[slots[i]] for i < num_tokens: rows of
// row_elems elements (num_kv_heads * head_dim). Every slot must be in [0, num_slots).
// The rows are copied as they are (a cache of `dtype`; an fp8 cache's bytes too when dtype is
// that fp8 type: the paged kernels' contiguous mode reads them and applies the scales), or, when
// cache_dtype is fp8 (kFP8E4M3 / kFP8E5M2: the pool stores bytes) and dtype is kBF16, converted:
// k_out = stored * k_scale, v_out = stored * v_scale (the pool's convention, kv_pool.h), so the
// varlen kernel reads values. A non-fp8 cache_dtype is ignored.
struct GatherKvParams {
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* slots = nullptr;  // [num_tokens], device memory
  void* k_out = nullptr;           // [num_tokens, row_elems] contiguous
  void* v_out = nullptr;
  DType dtype = DType::kBF16;        // of k_out / v_out
  DType cache_dtype = DType::kBF16;  // fp8: a converting gather (else: rows of `dtype`)
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int64_t num_tokens = 0;
  int64_t row_elems = 0;
  int64_t num_slots = 0;
};

// Multi-head attention over a batch of sequences, each with its own queries and keys:
// sequence s has queries [cu_q[s], cu_q[s + 1]) and keys [cu_kv[s], cu_kv[s + 1]). Query head h
// reads KV head h / (num_heads / num_kv_heads). Query i of a sequence with q_len queries and
// kv_len keys sees keys [0, kv_len) (non-causal) or [0, kv_len - q_len + i + 1) (causal: the
// queries are the last q_len positions of the sequence, as in an extend over a cached prefix). A
// sequence without keys (or a causal query seeing none) yields zeros. With window_left >= 0 query i
// (at position kv_len - q_len + i) also skips keys below that position - window_left.
// With cu_q == nullptr there is one sequence of num_q queries and num_kv keys (then cu_kv must
// be null too). Head h of a row is columns [h * head_dim, (h + 1) * head_dim) from the row's
// start; rows have their own strides (elements). f32 arithmetic; on CUDA the softmax is online in
// the log2 domain, on the CPU (f32 only, any head_dim) exact per row with float64 sums. cu_q and
// cu_kv are in the platform's memory (host memory on the CPU).
struct VarlenAttentionParams {
  const void* q = nullptr;         // [num_q, num_heads * head_dim], row stride q_stride
  const void* k = nullptr;         // [num_kv, num_kv_heads * head_dim], row stride k_stride
  const void* v = nullptr;         // [num_kv, num_kv_heads * head_dim], row stride v_stride
  void* out = nullptr;             // [num_q, num_heads * head_dim], row stride out_stride
  const int32_t* cu_q = nullptr;   // [num_seqs + 1], device memory, or null
  const int32_t* cu_kv = nullptr;  // [num_seqs + 1], device memory, or null
  DType dtype = DType::kBF16;
  int32_t num_seqs = 1;
  int32_t max_q_len = 0;  // the largest cu_q[s + 1] - cu_q[s] (num_q without cu_q)
  int64_t num_q = 0;      // without cu_q
  int64_t num_kv = 0;     // without cu_kv
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  int64_t v_stride = 0;
  int64_t out_stride = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;  // 16, 32, 64, 80, 96, 128 or 256 on CUDA
  float scaling = 1.0f;
  // Sliding window and soft-capping, as attention::AttentionLayer (attention/backend.h) defines
  // them: a query at position p sees KV positions [p - window_left, p] (-1: all it may see);
  // score = logit_softcap * tanh(score / logit_softcap) after the scaling (0: none).
  int32_t window_left = -1;
  float logit_softcap = 0.0f;
  bool causal = false;
};

}  // namespace kvserve::ops

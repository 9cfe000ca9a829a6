// Parameters of the decoder-layer ops (fmt-free: CUDA sources include it).
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

// out[t, :] = table[ids[t], :] * scale (Gemma scales by sqrt(hidden_size), the scale already
// rounded to the compute dtype by the caller as transformers casts it; 1: a plain copy).
struct EmbeddingParams {
  const void* table = nullptr;   // [vocab, hidden]
  const int32_t* ids = nullptr;  // [num_tokens], each in [vocab_start, vocab_start + vocab)
  void* out = nullptr;           // [num_tokens, hidden]
  DType dtype = DType::kF32;
  int64_t num_tokens = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
  // The table holds rows [vocab_start, vocab_start + vocab) of the vocabulary (a tensor-parallel
  // rank's slice): id's row is table[id - vocab_start]. With mask_outside, an id outside the
  // slice gives a zero row (vocab-parallel embedding: the ranks' rows are summed); without, it is
  // a bug (CHECK on the CPU, a zero row on CUDA).
  int64_t vocab_start = 0;
  bool mask_outside = false;
  float scale = 1.0f;
  // Programmatic dependent launch (platform/cuda/pdl.cuh); the op dispatch sets it from the
  // platform's KernelSwitches::pdl.
  bool pdl = true;
};

// With `residual`: residual = x + residual; out = rmsnorm(residual). Without: out = rmsnorm(x).
// rmsnorm(v) = v / sqrt(mean(v^2) + eps) * (weight + weight_offset). `out` may alias `x`.
// With `residual_out`, the sum v (x + residual, or x alone) goes there instead and `residual` is
// only read; residual_out may be `residual` (in place) or set without it (x starts the stream:
// the first layer's norm, NormedLinearParams).
// weight_offset is 1 for Gemma's RMSNorm (x * (1 + w), the sum in f32), 0 elsewhere. Per-head
// q/k norms (Qwen3, Gemma 3) are this op over rows = tokens * heads, cols = head_dim.
struct RmsNormParams {
  const void* x = nullptr;       // [rows, cols], row stride x_stride
  void* residual = nullptr;      // [rows, cols] contiguous, or null
  void* residual_out = nullptr;  // [rows, cols] contiguous, or null (then `residual` in place)
  void* out = nullptr;           // [rows, cols] contiguous
  const void* weight = nullptr;  // [cols]
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_stride = 0;
  float eps = 1e-6f;
  float weight_offset = 0.0f;
  // Programmatic dependent launch (platform/cuda/pdl.cuh); the op dispatch sets it from the
  // platform's KernelSwitches::pdl.
  bool pdl = true;
};

// Rotates q and k in place (rotate-half / GPT-NeoX layout): for i < rotary_dim / 2, with
// f = inv_freq[row * rotary_dim / 2 + i] (row = rope_rows[t], or 0 without rope_rows),
// angle = positions[t] * f in f32, cos = cos(angle) * attention_factor, sin likewise:
//   x[i]       = x[i] * cos - x[i + rotary_dim/2] * sin
//   x[i + d/2] = x[i + d/2] * cos + x[i] * sin
// (model/rope.h: the rows of a length-dependent scaling, the attention factor of yarn/longrope.)
struct RopeParams {
  void* q = nullptr;  // [num_tokens, num_heads, head_dim], token stride q_stride
  void* k = nullptr;  // [num_tokens, num_kv_heads, head_dim], token stride k_stride
  DType dtype = DType::kF32;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [rows, rotary_dim / 2]
  const int32_t* rope_rows = nullptr;  // [num_tokens], each in [0, rows); null: row 0
  float attention_factor = 1.0f;
  int64_t num_tokens = 0;
  int64_t q_stride = 0;
  int64_t k_stride = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t rotary_dim = 0;
};

// The gated MLP's activation of the gate: SiLU (Llama, Qwen) or GELU with the tanh approximation
// (Gemma's gelu_pytorch_tanh: 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))).
enum class GatedActivation { kSilu, kGeluTanh };

// out[t, i] = act(x[t, i]) * x[t, inter + i]   (x = [gate | up], as a merged gate_up_proj)
struct ActAndMulParams {
  const void* x = nullptr;  // [num_tokens, 2 * inter]
  void* out = nullptr;      // [num_tokens, inter]
  DType dtype = DType::kF32;
  GatedActivation activation = GatedActivation::kSilu;
  int64_t num_tokens = 0;
  int64_t inter = 0;
  // Programmatic dependent launch (platform/cuda/pdl.cuh); the op dispatch sets it from the
  // platform's KernelSwitches::pdl.
  bool pdl = true;
};

// A decoder's norm and the projection after it in one op: the pre-attention norm into qkv_proj,
// the pre-MLP norm into gate_up_proj and its gated activation.
//   v = x + residual_in             (rounded to dtype; v = x without residual_in)
//   residual_out = v                (when set: the next residual stream)
//   y = rmsnorm(v) . w^T (+ bias)   (RmsNormParams' rmsnorm with norm_weight, GemmParams' product)
//   out = y, or with `gated`: out[:, i] = act(y[:, i]) * y[:, n / 2 + i]   (ActAndMulParams)
// ops::normed_linear runs it as rms_norm into `normed`, gemm into `gate_up` (gated) or `out`, and
// act_and_mul: the one place a fused kernel would go. (A batch-1 CUDA kernel that folded the norm
// into the skinny GEMV's prologue and the activation into its epilogue was measured slower than
// these three launches with PDL on the H100, docs/perf/2026-12-07-fused-norm-linear.md, and
// removed.) residual_out may be residual_in (the stream updated in place). Rows are contiguous.
struct NormedLinearParams {
  const void* x = nullptr;            // [m, k]
  const void* residual_in = nullptr;  // [m, k] or null
  void* residual_out = nullptr;       // [m, k]; null only without residual_in
  const void* norm_weight = nullptr;  // [k]
  float eps = 1e-6f;
  float weight_offset = 0.0f;  // RmsNormParams::weight_offset
  const void* w = nullptr;     // [n, k]; gated: [gate rows; up rows], n / 2 each
  const void* bias = nullptr;  // [n] or null (not with `gated`)
  void* out = nullptr;         // [m, n], or [m, n / 2] gated
  DType dtype = DType::kF32;
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  bool gated = false;
  GatedActivation activation = GatedActivation::kSilu;
  // The intermediates: [m, k] and (gated) [m, n].
  void* normed = nullptr;
  void* gate_up = nullptr;
};

// Splits a fused qkv projection [num_tokens, (num_heads + 2 * num_kv_heads) * head_dim] into
// contiguous q [num_tokens, num_heads, head_dim], k and v [num_tokens, num_kv_heads, head_dim],
// rotating q and k as `RopeParams` says (positions and inv_freq on the op's device).
struct SplitQkvRopeParams {
  const void* qkv = nullptr;
  void* q = nullptr;
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kF32;
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [rows, rotary_dim / 2]
  const int32_t* rope_rows = nullptr;  // [num_tokens], each in [0, rows); null: row 0
  float attention_factor = 1.0f;
  int64_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t rotary_dim = 0;
  // Optional, the KV store fused in (set_kv_buffer's copy for a cache of the activations' dtype
  // and scale 1): when k_cache is set, token t's rotated k and its v go to row cache_loc[t] of
  // k_cache / v_cache ([num_slots, num_kv_heads, head_dim]) and k / v are not written.
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  const int32_t* cache_loc = nullptr;  // [num_tokens], on the op's device
  int64_t num_slots = 0;
  // Programmatic dependent launch (platform/cuda/pdl.cuh); the op dispatch sets it from the
  // platform's KernelSwitches::pdl.
  bool pdl = true;
};

// In place on f32 rows: x = cap * tanh(x / cap) (Gemma 2's final_logit_softcapping; cap > 0).
struct SoftcapParams {
  float* x = nullptr;  // [rows, cols] contiguous, on the op's device
  int64_t rows = 0;
  int64_t cols = 0;
  float cap = 0.0f;
};

}  // namespace kvserve::ops

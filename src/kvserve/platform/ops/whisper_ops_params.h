// Parameters of the Whisper layer ops (fmt-free, so a CUDA source may include it).
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

// With `residual`: residual = x + residual; out = layernorm(residual). Without: out =
// layernorm(x). layernorm(v) = (v - mean(v)) / sqrt(var(v) + eps) * weight + bias, with the
// biased (population) variance as torch.nn.LayerNorm. `out` may alias `x`.
struct LayerNormParams {
  const void* x = nullptr;       // [rows, cols], row stride x_stride
  void* residual = nullptr;      // [rows, cols] contiguous, or null
  void* out = nullptr;           // [rows, cols] contiguous
  const void* weight = nullptr;  // [cols]
  const void* bias = nullptr;    // [cols] or null
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t x_stride = 0;
  float eps = 1e-5f;
};

// out[i] = x[i] * 0.5 * (1 + erf(x[i] / sqrt(2))): transformers' "gelu" (exact, not tanh).
// `out` may alias `x`.
struct GeluParams {
  const void* x = nullptr;
  void* out = nullptr;
  DType dtype = DType::kF32;
  int64_t n = 0;
};

// torch.nn.Conv1d with zero padding: out[t, o] = bias[o] + sum over c, j of
// weight[o, c, j] * x(t * stride + j - padding, c), x outside [0, in_len) being 0.
// Element (t, c) of the input is x[t * x_t_stride + c * x_c_stride], so both a channel-major
// [in_channels, in_len] input (log-mel features) and a token-major [in_len, in_channels] one
// (a previous conv's output) are read in place. The output is token-major [out_len, out_channels]
// with out_len = (in_len + 2 * padding - kernel_size) / stride + 1.
// Off the CPU the convolution is an im2col into `workspace` (workspace_elems() elements of
// `dtype`, device memory) followed by a GEMM; the CPU kernel keeps its own buffer.
struct Conv1dParams {
  const void* x = nullptr;
  const void* weight = nullptr;  // [out_channels, in_channels, kernel_size]
  const void* bias = nullptr;    // [out_channels] or null
  void* out = nullptr;           // [out_len, out_channels]
  void* workspace = nullptr;     // [out_len, in_channels * kernel_size]; unused on the CPU
  DType dtype = DType::kF32;
  int64_t in_channels = 0;
  int64_t in_len = 0;
  int64_t out_channels = 0;
  int64_t x_t_stride = 0;
  int64_t x_c_stride = 0;
  int32_t kernel_size = 3;
  int32_t stride = 1;
  int32_t padding = 1;

  int64_t out_len() const { return (in_len + 2 * padding - kernel_size) / stride + 1; }
  int64_t workspace_elems() const { return out_len() * in_channels * kernel_size; }
};

// x[t, :] += table[positions[t], :] (positions[t] = t when `positions` is null). Every position
// must be in [0, num_positions) (device memory off the CPU; a CUDA kernel leaves the row of a
// position outside the table unchanged instead of failing).
struct AddPositionEmbeddingParams {
  void* x = nullptr;                   // [rows, cols] contiguous
  const void* table = nullptr;         // [num_positions, cols]
  const int32_t* positions = nullptr;  // [rows] or null
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t num_positions = 0;
};

}  // namespace kvserve::ops

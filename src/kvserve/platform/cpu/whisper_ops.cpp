// CPU kernels of the Whisper layer ops (f32): row-wise loops parallel over rows with OpenMP,
// convolution through OpenBLAS.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/platform/cpu/cpu_ops.h"
#include "kvserve/platform/ops/whisper_ops.h"

namespace kvserve::ops::cpu {

void layer_norm(const LayerNormParams& p) {
  require_f32(p.dtype, "layer_norm");
  KV_CHECK_GT(p.cols, 0);
  const auto* x = static_cast<const float*>(p.x);
  auto* residual = static_cast<float*>(p.residual);
  auto* out = static_cast<float*>(p.out);
  const auto* w = static_cast<const float*>(p.weight);
  const auto* b = static_cast<const float*>(p.bias);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* xr = x + r * p.x_stride;
    float* o = out + r * p.cols;
    const float* v = xr;
    if (residual != nullptr) {
      float* res = residual + r * p.cols;
      for (int64_t c = 0; c < p.cols; ++c)
        res[c] += xr[c];
      v = res;
    }
    double sum = 0;
    for (int64_t c = 0; c < p.cols; ++c)
      sum += v[c];
    const double mean = sum / static_cast<double>(p.cols);
    double sq = 0;
    for (int64_t c = 0; c < p.cols; ++c) {
      const double d = v[c] - mean;
      sq += d * d;
    }
    const auto inv = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(p.cols) + p.eps));
    const auto m = static_cast<float>(mean);
    for (int64_t c = 0; c < p.cols; ++c)
      o[c] = (v[c] - m) * inv * w[c] + (b != nullptr ? b[c] : 0.0f);
  }
}

void gelu(const GeluParams& p) {
  require_f32(p.dtype, "gelu");
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  constexpr float kInvSqrt2 = 0.70710678118654752f;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < p.n; ++i)
    out[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
}

void conv1d(const Conv1dParams& p) {
  require_f32(p.dtype, "conv1d");
  KV_CHECK(p.kernel_size >= 1 && p.stride >= 1 && p.padding >= 0, "conv1d k={} s={} p={}",
           p.kernel_size, p.stride, p.padding);
  const int64_t out_len = p.out_len();
  KV_CHECK_GT(out_len, 0, "conv1d input of {} frames is shorter than its kernel", p.in_len);
  const int64_t cols = p.in_channels * p.kernel_size;  // one im2col row: (channel, tap) pairs
  const auto* x = static_cast<const float*>(p.x);
  std::vector<float> col(static_cast<size_t>(out_len * cols));
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < out_len; ++t) {
    float* row = col.data() + t * cols;
    for (int64_t c = 0; c < p.in_channels; ++c) {
      for (int32_t j = 0; j < p.kernel_size; ++j) {
        const int64_t s = t * p.stride + j - p.padding;
        row[c * p.kernel_size + j] =
            s >= 0 && s < p.in_len ? x[s * p.x_t_stride + c * p.x_c_stride] : 0.0f;
      }
    }
  }
  auto* out = static_cast<float*>(p.out);
  float beta = 0.0f;
  if (p.bias != nullptr) {
    const auto* bias = static_cast<const float*>(p.bias);
    for (int64_t t = 0; t < out_len; ++t)
      std::copy_n(bias, p.out_channels, out + t * p.out_channels);
    beta = 1.0f;
  }
  // out[out_len, out_ch] = col[out_len, cols] . weight[out_ch, cols]^T (+ bias)
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(out_len),
              static_cast<blasint>(p.out_channels), static_cast<blasint>(cols), 1.0f, col.data(),
              static_cast<blasint>(cols), static_cast<const float*>(p.weight),
              static_cast<blasint>(cols), beta, out, static_cast<blasint>(p.out_channels));
}

void add_position_embedding(const AddPositionEmbeddingParams& p) {
  require_f32(p.dtype, "add_position_embedding");
  auto* x = static_cast<float*>(p.x);
  const auto* table = static_cast<const float*>(p.table);
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t pos = p.positions != nullptr ? p.positions[r] : r;
    KV_CHECK(pos >= 0 && pos < p.num_positions, "position {} outside the table of {}", pos,
             p.num_positions);
    const float* e = table + pos * p.cols;
    float* xr = x + r * p.cols;
    for (int64_t c = 0; c < p.cols; ++c)
      xr[c] += e[c];
  }
}

}  // namespace kvserve::ops::cpu

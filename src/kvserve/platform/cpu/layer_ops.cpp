// CPU kernels of the decoder-layer ops (f32), parallel over rows with OpenMP.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/platform/cpu/cpu_ops.h"
#include "kvserve/platform/ops/gemm.h"
#include "kvserve/platform/ops/layer_ops.h"

namespace kvserve::ops::cpu {

void gemm(const GemmParams& p) {
  require_f32(p.dtype, "gemm");
  if (p.m == 0 || p.n == 0) return;
  auto* c = static_cast<float*>(p.c);
  float beta = 0.0f;
  if (p.bias != nullptr) {
    const auto* bias = static_cast<const float*>(p.bias);
    for (int64_t i = 0; i < p.m; ++i)
      std::memcpy(c + i * p.ldc, bias, p.n * sizeof(float));
    beta = 1.0f;
  }
  if (p.m == 1) {
    // One row (a batch-1 decode): a matrix-vector product streams the weight once; OpenBLAS's
    // sgemm does not route m == 1 to its gemv kernel.
    cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<blasint>(p.n), static_cast<blasint>(p.k),
                1.0f, static_cast<const float*>(p.b), static_cast<blasint>(p.ldb),
                static_cast<const float*>(p.a), 1, beta, c, 1);
    return;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(p.m),
              static_cast<blasint>(p.n), static_cast<blasint>(p.k), 1.0f,
              static_cast<const float*>(p.a), static_cast<blasint>(p.lda),
              static_cast<const float*>(p.b), static_cast<blasint>(p.ldb), beta, c,
              static_cast<blasint>(p.ldc));
}

void embedding(const EmbeddingParams& p) {
  require_f32(p.dtype, "embedding");
  const auto* table = static_cast<const float*>(p.table);
  auto* out = static_cast<float*>(p.out);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t id = int64_t{p.ids[t]} - p.vocab_start;
    float* o = out + t * p.hidden;
    if (p.mask_outside && (id < 0 || id >= p.vocab)) {
      std::fill_n(o, p.hidden, 0.0f);
      continue;
    }
    KV_CHECK(id >= 0 && id < p.vocab, "token id {} outside the vocabulary of {}", p.ids[t],
             p.vocab);
    const float* row = table + id * p.hidden;
    if (p.scale == 1.0f) {
      std::memcpy(o, row, p.hidden * sizeof(float));
    } else {
      for (int64_t i = 0; i < p.hidden; ++i)
        o[i] = row[i] * p.scale;
    }
  }
}

void rms_norm(const RmsNormParams& p) {
  require_f32(p.dtype, "rms_norm");
  const auto* x = static_cast<const float*>(p.x);
  const auto* residual = static_cast<const float*>(p.residual);
  // Where v = x + residual goes: residual_out, else residual in place (none without either).
  auto* residual_out = static_cast<float*>(p.residual_out ? p.residual_out : p.residual);
  auto* out = static_cast<float*>(p.out);
  const auto* w = static_cast<const float*>(p.weight);
#pragma omp parallel for schedule(static) if (p.rows > 4)
  for (int64_t r = 0; r < p.rows; ++r) {
    const float* xr = x + r * p.x_stride;
    float* orow = out + r * p.cols;
    const float* v = xr;
    if (residual_out != nullptr) {
      float* res = residual_out + r * p.cols;
      const float* rin = residual != nullptr ? residual + r * p.cols : nullptr;
      for (int64_t i = 0; i < p.cols; ++i)
        res[i] = rin != nullptr ? rin[i] + xr[i] : xr[i];
      v = res;
    }
    float sum = 0.0f;
    for (int64_t i = 0; i < p.cols; ++i)
      sum += v[i] * v[i];
    const float inv = 1.0f / std::sqrt(sum / static_cast<float>(p.cols) + p.eps);
    for (int64_t i = 0; i < p.cols; ++i)
      orow[i] = v[i] * inv * (w[i] + p.weight_offset);
  }
}

void rope(const RopeParams& p) {
  require_f32(p.dtype, "rope");
  KV_CHECK(p.rotary_dim % 2 == 0 && p.rotary_dim <= p.head_dim, "rotary_dim {} head_dim {}",
           p.rotary_dim, p.head_dim);
  const int32_t half = p.rotary_dim / 2;
  KV_CHECK_LE(half, 512, "rotary_dim {} too large", p.rotary_dim);
#pragma omp parallel for schedule(static) if (p.num_tokens > 4)
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    // The angle is computed in f32 as Hugging Face does (position * inv_freq, then cos/sin).
    float cos_t[512];
    float sin_t[512];
    const auto pos = static_cast<float>(p.positions[t]);
    const float* inv_freq = p.inv_freq + (p.rope_rows != nullptr ? p.rope_rows[t] : 0) * half;
    for (int32_t i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cos_t[i] = std::cos(angle) * p.attention_factor;
      sin_t[i] = std::sin(angle) * p.attention_factor;
    }
    auto rotate = [&](float* base, int32_t heads) {
      for (int32_t h = 0; h < heads; ++h) {
        float* x = base + static_cast<int64_t>(h) * p.head_dim;
        for (int32_t i = 0; i < half; ++i) {
          const float x1 = x[i];
          const float x2 = x[i + half];
          x[i] = x1 * cos_t[i] - x2 * sin_t[i];
          x[i + half] = x2 * cos_t[i] + x1 * sin_t[i];
        }
      }
    };
    rotate(static_cast<float*>(p.q) + t * p.q_stride, p.num_heads);
    rotate(static_cast<float*>(p.k) + t * p.k_stride, p.num_kv_heads);
  }
}

void act_and_mul(const ActAndMulParams& p) {
  require_f32(p.dtype, "act_and_mul");
  const auto* x = static_cast<const float*>(p.x);
  auto* out = static_cast<float*>(p.out);
  const bool gelu = p.activation == GatedActivation::kGeluTanh;
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
#pragma omp parallel for schedule(static) if (p.num_tokens > 4)
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const float* gate = x + t * 2 * p.inter;
    const float* up = gate + p.inter;
    float* o = out + t * p.inter;
    for (int64_t i = 0; i < p.inter; ++i) {
      const float g = gate[i];
      const float a =
          gelu ? 0.5f * g * (1.0f + std::tanh(kSqrt2OverPi * (g + 0.044715f * g * g * g)))
               : g / (1.0f + std::exp(-g));
      o[i] = a * up[i];
    }
  }
}

void softcap(const SoftcapParams& p) {
  const int64_t n = p.rows * p.cols;
#pragma omp parallel for schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i)
    p.x[i] = std::tanh(p.x[i] / p.cap) * p.cap;  // as transformers: divide, tanh, multiply
}

void split_qkv_rope(const SplitQkvRopeParams& p) {
  require_f32(p.dtype, "split_qkv_rope");
  const int64_t qd = static_cast<int64_t>(p.num_heads) * p.head_dim;
  const int64_t kvd = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  if (p.k_cache != nullptr) {
    // The fused store: split into scratch k / v, then copy each row to its slot.
    std::vector<float> k(static_cast<size_t>(p.num_tokens * kvd));
    std::vector<float> v(k.size());
    SplitQkvRopeParams split = p;
    split.k = k.data();
    split.v = v.data();
    split.k_cache = split.v_cache = nullptr;
    split_qkv_rope(split);
    for (int64_t t = 0; t < p.num_tokens; ++t) {
      const int64_t slot = p.cache_loc[t];
      KV_CHECK(slot >= 0 && slot < p.num_slots, "split_qkv_rope: slot {} of {}", slot, p.num_slots);
      std::memcpy(static_cast<float*>(p.k_cache) + slot * kvd, k.data() + t * kvd,
                  kvd * sizeof(float));
      std::memcpy(static_cast<float*>(p.v_cache) + slot * kvd, v.data() + t * kvd,
                  kvd * sizeof(float));
    }
    return;
  }
  const int64_t cols = qd + 2 * kvd;
  const auto* qkv = static_cast<const float*>(p.qkv);
  auto* q = static_cast<float*>(p.q);
  auto* k = static_cast<float*>(p.k);
  auto* v = static_cast<float*>(p.v);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    std::memcpy(q + t * qd, qkv + t * cols, qd * sizeof(float));
    std::memcpy(k + t * kvd, qkv + t * cols + qd, kvd * sizeof(float));
    std::memcpy(v + t * kvd, qkv + t * cols + qd + kvd, kvd * sizeof(float));
  }
  rope({.q = q,
        .k = k,
        .dtype = p.dtype,
        .positions = p.positions,
        .inv_freq = p.inv_freq,
        .rope_rows = p.rope_rows,
        .attention_factor = p.attention_factor,
        .num_tokens = p.num_tokens,
        .q_stride = qd,
        .k_stride = kvd,
        .num_heads = p.num_heads,
        .num_kv_heads = p.num_kv_heads,
        .head_dim = p.head_dim,
        .rotary_dim = p.rotary_dim});
}

}  // namespace kvserve::ops::cpu

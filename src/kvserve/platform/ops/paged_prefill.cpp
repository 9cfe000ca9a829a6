#include "kvserve/platform/ops/paged_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::ops {

PrefillVariant parse_prefill_variant(std::string_view name) {
  if (name == "m64w4") return PrefillVariant::kM64W4;
  if (name == "m128w8") return PrefillVariant::kM128W8;
  if (name == "m128w4") return PrefillVariant::kM128W4;
  return PrefillVariant::kAuto;
}

std::string_view prefill_variant_name(PrefillVariant v) {
  switch (v) {
    case PrefillVariant::kM64W4:
      return "m64w4";
    case PrefillVariant::kM128W8:
      return "m128w8";
    case PrefillVariant::kM128W4:
      return "m128w4";
    default:
      return "auto";
  }
}

PrefillVariant choose_prefill_variant(PrefillVariant requested, int32_t total_q, int32_t batch,
                                      int32_t group) {
  if (requested != PrefillVariant::kAuto) return requested;
  static const PrefillVariant from_env = [] {
    const char* v = std::getenv("KVSERVE_PREFILL_VARIANT");
    return v == nullptr ? PrefillVariant::kAuto : parse_prefill_variant(v);
  }();
  if (from_env != PrefillVariant::kAuto) return from_env;
  const int64_t mean_rows = static_cast<int64_t>(total_q) * group / std::max(batch, 1);
  if (mean_rows < 128) return PrefillVariant::kM64W4;
  // H200, head_dim 128, page 16 (docs/perf/2026-12-01-prefill-and-whisper-cuda.md): with GQA
  // group 4 (32/8 heads) the 128-row tile on 4 warps was the fastest at 1 x 8192, 8 x 1024 and
  // 64 x 1024 (278 / 195 / 215 TFLOP/s against 252 / 182 / 190 for 8 warps); without GQA the
  // 8-warp tile won at 1 x 8192 and the results were mixed elsewhere.
  return group >= 4 ? PrefillVariant::kM128W4 : PrefillVariant::kM128W8;
}

void paged_prefill(platform::Platform& platform, const PagedPrefillParams& params,
                   platform::StreamHandle stream) {
  KV_CHECK(platform.device().kind == DeviceKind::kCuda,
           "paged prefill attention runs on CUDA; the CPU platform uses the cpu backend");
  KV_CHECK(params.num_kv_heads > 0 && params.num_q_heads % params.num_kv_heads == 0,
           "{} query heads over {} KV heads", params.num_q_heads, params.num_kv_heads);
  PagedPrefillParams p = params;
  p.variant = choose_prefill_variant(params.variant, params.total_q, params.batch,
                                     params.num_q_heads / params.num_kv_heads);
  platform::cuda::paged_prefill(p, platform.resolve(stream));
}

namespace reference {

void paged_prefill(const PagedPrefillParams& p, float* out, int32_t query_step) {
  const auto* q = static_cast<const uint16_t*>(p.q);
  const auto* k = static_cast<const uint16_t*>(p.k_cache);
  const auto* v = static_cast<const uint16_t*>(p.v_cache);
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int32_t total = p.qo_indptr[p.batch];
  KV_CHECK(query_step >= 1, "query_step {}", query_step);
#pragma omp parallel for schedule(dynamic, 1)
  for (int32_t t = 0; t < total; t += query_step) {
    const int32_t b = static_cast<int32_t>(
        std::upper_bound(p.qo_indptr, p.qo_indptr + p.batch + 1, t) - p.qo_indptr - 1);
    const int32_t q_len = p.qo_indptr[b + 1] - p.qo_indptr[b];
    const int32_t i = t - p.qo_indptr[b];
    const int32_t kv_len = p.kv_lens[b];
    const int32_t visible = p.causal ? std::clamp(kv_len - q_len + i + 1, 0, kv_len) : kv_len;
    const int32_t* pages = p.page_ids + p.page_indptr[b];
    std::vector<double> scores(static_cast<size_t>(visible));
    std::vector<int64_t> slots(static_cast<size_t>(visible));
    for (int32_t j = 0; j < visible; ++j)
      slots[j] = static_cast<int64_t>(pages[j / p.page_size]) * p.page_size + j % p.page_size;
    for (int32_t h = 0; h < p.num_q_heads; ++h) {
      const int64_t kv_col = static_cast<int64_t>(h / group) * p.head_dim;
      const uint16_t* qh = q + (static_cast<int64_t>(t) * p.num_q_heads + h) * p.head_dim;
      float* oh = out + (static_cast<int64_t>(t) * p.num_q_heads + h) * p.head_dim;
      double mx = -INFINITY;
      for (int32_t j = 0; j < visible; ++j) {
        const uint16_t* kj = k + slots[j] * row + kv_col;
        double s = 0;
        for (int32_t d = 0; d < p.head_dim; ++d)
          s += double(bf16_to_float(qh[d])) * bf16_to_float(kj[d]);
        scores[j] = s * p.sm_scale;
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (double& s : scores)
        sum += (s = std::exp(s - mx));
      std::vector<double> acc(static_cast<size_t>(p.head_dim), 0.0);
      for (int32_t j = 0; j < visible; ++j) {
        const uint16_t* vj = v + slots[j] * row + kv_col;
        for (int32_t d = 0; d < p.head_dim; ++d)
          acc[d] += scores[j] * bf16_to_float(vj[d]);
      }
      for (int32_t d = 0; d < p.head_dim; ++d)
        oh[d] = visible == 0 ? 0.0f : static_cast<float>(acc[d] / sum);
    }
  }
}

}  // namespace reference
}  // namespace kvserve::ops

#include "kvserve/platform/ops/paged_decode.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::ops {

PagedDecodePlan plan_paged_decode(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads,
                                  int32_t head_dim, int32_t max_seq_len, int32_t num_sms,
                                  int32_t window_left) {
  max_seq_len = windowed_len(max_seq_len, window_left);
  constexpr int32_t kMinTokensPerSplit = 256;
  // Three blocks per SM: at 16 x 4096 (32/8 heads) 4 splits reach 52.5 % of the roofline where
  // 3 reached 44 %; large batches keep one split (more splits only add merge work there:
  // docs/perf/2026-11-30-cuda-paged-decode.md).
  constexpr int32_t kBlocksPerSm = 3;
  PagedDecodePlan plan;
  const int64_t blocks = static_cast<int64_t>(batch) * num_kv_heads;
  const int64_t want =
      (static_cast<int64_t>(num_sms) * kBlocksPerSm + blocks - 1) / std::max<int64_t>(blocks, 1);
  const int64_t most =
      std::max<int64_t>(1, (max_seq_len + kMinTokensPerSplit - 1) / kMinTokensPerSplit);
  plan.num_splits = static_cast<int32_t>(std::clamp<int64_t>(want, 1, most));
  plan.tokens_per_split = std::max(1, (max_seq_len + plan.num_splits - 1) / plan.num_splits);
  plan.min_tokens_per_split = kMinTokensPerSplit;
  if (plan.num_splits > 1) {
    plan.workspace_floats = static_cast<size_t>(batch) * num_q_heads * plan.num_splits *
                            (static_cast<size_t>(head_dim) + 1);
  }
  return plan;
}

PagedDecodeWorkspace paged_decode_workspace(const PagedDecodePlan& plan, float* floats,
                                            uint32_t* counters, int32_t head_dim) {
  PagedDecodeWorkspace w;
  if (plan.num_splits <= 1 || floats == nullptr) return w;
  const size_t rows = plan.workspace_floats / (static_cast<size_t>(head_dim) + 1);
  w.partial_out = floats;
  w.partial_lse = floats + rows * static_cast<size_t>(head_dim);
  if (plan.workspace_counters > 0) w.split_counters = counters;
  return w;
}

int32_t num_compute_units(platform::Platform& platform) {
  return platform.device().kind == DeviceKind::kCuda ? platform::cuda::multiprocessor_count() : 1;
}

void paged_decode(platform::Platform& platform, const PagedDecodeParams& params,
                  platform::StreamHandle stream) {
  KV_CHECK(platform.device().kind == DeviceKind::kCuda,
           "paged decode attention runs on CUDA; the CPU platform uses the cpu backend");
  KV_CHECK(params.num_splits == 1 || (params.partial_out && params.partial_lse),
           "{} splits need a workspace", params.num_splits);
  KV_CHECK(is_paged_kv_dtype(params.kv_dtype), "paged decode reads a bf16 or fp8 KV cache, not {}",
           dtype_name(params.kv_dtype));
  check_kv_addressing(params.page_ids, params.page_size);
  platform::cuda::paged_decode(params, platform.resolve(stream));
}

void check_kv_addressing(const int32_t* page_ids, int32_t page_size) {
  KV_CHECK(page_ids != nullptr || page_size == 1,
           "contiguous K/V (no page ids) are read with page size 1, not {}", page_size);
}

bool is_paged_kv_dtype(DType t) {
  return t == DType::kBF16 || t == DType::kFP8E4M3 || t == DType::kFP8E5M2;
}

namespace reference {

double kv_value(const void* cache, DType dtype, int64_t index, float scale) {
  switch (dtype) {
    case DType::kBF16:
      return bf16_to_float(static_cast<const uint16_t*>(cache)[index]);
    case DType::kFP8E4M3:
      return double(fp8_e4m3_to_float(static_cast<const uint8_t*>(cache)[index])) * scale;
    case DType::kFP8E5M2:
      return double(fp8_e5m2_to_float(static_cast<const uint8_t*>(cache)[index])) * scale;
    default:
      KV_CHECK(false, "KV cache dtype {}: bf16, fp8_e4m3 or fp8_e5m2", dtype_name(dtype));
  }
  return 0;
}

double softcapped(double score, float logit_softcap) {
  return logit_softcap > 0 ? logit_softcap * std::tanh(score / logit_softcap) : score;
}

void paged_decode(const PagedDecodeParams& p, float* out) {
  const auto* q = static_cast<const uint16_t*>(p.q);
  auto k_at = [&](int64_t i) { return kv_value(p.k_cache, p.kv_dtype, i, p.k_scale); };
  auto v_at = [&](int64_t i) { return kv_value(p.v_cache, p.kv_dtype, i, p.v_scale); };
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  std::vector<double> scores;
  for (int32_t b = 0; b < p.batch; ++b) {
    const int32_t seq = p.seq_lens[b];
    const int32_t first = p.page_indptr[b];
    for (int32_t h = 0; h < p.num_q_heads; ++h) {
      const int32_t kvh = h / group;
      const uint16_t* qh = q + (static_cast<int64_t>(b) * p.num_q_heads + h) * p.head_dim;
      float* oh = out + (static_cast<int64_t>(b) * p.num_q_heads + h) * p.head_dim;
      // The query is at position seq - 1; a window keeps positions [seq - 1 - window_left, seq).
      const int32_t lo = window_first(seq, p.window_left);
      scores.assign(seq, 0.0);
      double mx = -INFINITY;
      for (int32_t t = lo; t < seq; ++t) {
        const int64_t slot = kv_row_of(p.page_ids, first, p.page_size, t);
        const int64_t kt = slot * row + static_cast<int64_t>(kvh) * p.head_dim;
        double s = 0;
        for (int32_t d = 0; d < p.head_dim; ++d)
          s += double(bf16_to_float(qh[d])) * k_at(kt + d);
        scores[t] = softcapped(s * p.sm_scale, p.logit_softcap);
        mx = std::max(mx, scores[t]);
      }
      double sum = 0;
      for (int32_t t = lo; t < seq; ++t)
        sum += (scores[t] = std::exp(scores[t] - mx));
      for (int32_t d = 0; d < p.head_dim; ++d) {
        double acc = 0;
        for (int32_t t = lo; t < seq; ++t) {
          const int64_t slot = kv_row_of(p.page_ids, first, p.page_size, t);
          acc += scores[t] * v_at(slot * row + static_cast<int64_t>(kvh) * p.head_dim + d);
        }
        oh[d] = seq == 0 ? 0.0f : static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace reference
}  // namespace kvserve::ops

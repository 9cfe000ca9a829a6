#include "kvserve/platform/ops/paged_prefill.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/cuda/ops.h"
#if KVSERVE_WITH_CUDA
#include "kvserve/platform/cuda/paged_decode_tc.h"
#endif

namespace kvserve::ops {

PrefillVariant parse_prefill_variant(std::string_view name) {
  if (name == "m64w4") return PrefillVariant::kM64W4;
  if (name == "m128w8") return PrefillVariant::kM128W8;
  if (name == "m128w4") return PrefillVariant::kM128W4;
  if (name == "sm90") return PrefillVariant::kSm90;
  if (name == "mma") return PrefillVariant::kMma;
  if (name == "sm90pp") return PrefillVariant::kSm90PingPong;
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
    case PrefillVariant::kSm90:
      return "sm90";
    case PrefillVariant::kMma:
      return "mma";
    case PrefillVariant::kSm90PingPong:
      return "sm90pp";
    default:
      return "auto";
  }
}

PrefillVariant choose_prefill_variant(PrefillVariant requested, int32_t total_q, int32_t batch,
                                      int32_t group) {
  if (requested != PrefillVariant::kAuto && requested != PrefillVariant::kMma &&
      requested != PrefillVariant::kSm90 && requested != PrefillVariant::kSm90PingPong) {
    return requested;
  }
  const int64_t mean_rows = static_cast<int64_t>(total_q) * group / std::max(batch, 1);
  if (mean_rows < 128) return PrefillVariant::kM64W4;
  // H200, head_dim 128, page 16 (docs/perf/2026-12-01-prefill-and-whisper-cuda.md): with GQA
  // group 4 (32/8 heads) the 128-row tile on 4 warps was the fastest at 1 x 8192, 8 x 1024 and
  // 64 x 1024 (278 / 195 / 215 TFLOP/s against 252 / 182 / 190 for 8 warps); without GQA the
  // 8-warp tile won at 1 x 8192 and the results were mixed elsewhere.
  return group >= 4 ? PrefillVariant::kM128W4 : PrefillVariant::kM128W8;
}

bool prefill_sm90_supports(const PagedPrefillParams& p) {
  return p.kv_dtype == DType::kBF16 &&
         (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) && p.window_left < 0 &&
         p.logit_softcap <= 0.0f;
}

bool prefill_sm90_device(platform::Platform& platform) {
  return platform.device().kind == DeviceKind::kCuda && platform::cuda::paged_prefill_sm90_device();
}

PrefillVariant resolve_prefill_variant(PrefillVariant requested, const PagedPrefillParams& p,
                                       bool sm90_device, bool auto_sm90) {
  const int32_t group = p.num_q_heads / std::max(p.num_kv_heads, 1);
  const bool sm90 = sm90_device && prefill_sm90_supports(p);
  if ((requested == PrefillVariant::kSm90 || requested == PrefillVariant::kSm90PingPong) && sm90) {
    return requested;
  }
  if (requested == PrefillVariant::kAuto && auto_sm90 && sm90) {
    // Short extends (fewer than one 128-row tile per request) keep the 64-row mma.sync tile.
    const int64_t mean_rows = static_cast<int64_t>(p.total_q) * group / std::max(p.batch, 1);
    if (mean_rows >= 128) return PrefillVariant::kSm90;
  }
  return choose_prefill_variant(requested, p.total_q, p.batch, group);
}

void paged_prefill(platform::Platform& platform, const PagedPrefillParams& params,
                   platform::StreamHandle stream) {
  KV_CHECK(platform.device().kind == DeviceKind::kCuda,
           "paged prefill attention runs on CUDA; the CPU platform uses the cpu backend");
  KV_CHECK(params.num_kv_heads > 0 && params.num_q_heads % params.num_kv_heads == 0,
           "{} query heads over {} KV heads", params.num_q_heads, params.num_kv_heads);
  KV_CHECK(is_paged_kv_dtype(params.kv_dtype), "paged prefill reads a bf16 or fp8 KV cache, not {}",
           dtype_name(params.kv_dtype));
  check_kv_addressing(params.page_ids, params.page_size);
  KV_CHECK(params.q_stride % 8 == 0 && params.kv_stride % 8 == 0 && params.q_stride >= 0 &&
               params.kv_stride >= 0,
           "row strides {} / {}: multiples of 8 elements (16-byte loads)", params.q_stride,
           params.kv_stride);
  PagedPrefillParams p = params;
  // The params' own choice, else the platform's switch (kernel_switches.h), else by shape.
  const PrefillVariant requested = params.variant != PrefillVariant::kAuto
                                       ? params.variant
                                       : platform.kernel_switches().prefill_variant;
  p.variant = resolve_prefill_variant(requested, params, prefill_sm90_device(platform));
  p.tma = params.tma && platform.kernel_switches().prefill_tma;
  if (p.variant == PrefillVariant::kSm90 || p.variant == PrefillVariant::kSm90PingPong) {
    platform::cuda::paged_prefill_sm90(p, platform.resolve(stream));
  } else {
    platform::cuda::paged_prefill(p, platform.resolve(stream));
  }
}

int32_t resolve_decode_tc_stages(int32_t requested, int32_t head_dim) {
  auto valid = [](int32_t s) { return s >= 2 && s <= 4; };
  int32_t stages = valid(requested) ? requested : (head_dim <= 64 ? 4 : 3);
  // Head dim 256: four bf16 stages (256 KiB) exceed a block's shared memory; three fit.
  while (stages > 2 && decode_tc_smem_bytes(head_dim, stages) > kMaxSmemPerBlock)
    --stages;
  return stages;
}

PagedDecodePlan plan_paged_decode_tc(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads,
                                     int32_t head_dim, int32_t max_seq_len, int32_t num_sms,
                                     int32_t stages, int32_t window_left) {
  max_seq_len = windowed_len(max_seq_len, window_left);
  // A split streams at least two tiles: its fixed costs (the dependent loads before data flows,
  // the partial it writes and its share of the merge) stay below the bytes it reads.
  constexpr int32_t kMinTokensPerSplit = 2 * kDecodeTcTileTokens;
  constexpr int32_t kMaxSplits = 64;
  const int64_t slots = std::max<int64_t>(
      1, int64_t{num_sms} *
             decode_tc_ctas_per_sm(head_dim, resolve_decode_tc_stages(stages, head_dim)));
  const int64_t base = std::max<int64_t>(1, int64_t{batch} * num_kv_heads);
  // One wave: every (query, KV head, split) block resident at once, so that the blocks start
  // together, each with its pipeline's tiles in flight, and finish together (equal lengths). A
  // small batch takes one block per SM: on the H200 (docs/perf/2026-12-03-gpu-validation.md,
  // 1 x L, 8 KV heads) 16 splits ran 12.3 us at L = 4096 where 32 (both slots of every SM) ran
  // 13.3, and 26.4 vs 27.0 us at L = 16384. A batch with fewer blocks than two per SM splits
  // across both slots; one whose blocks already take more than half the slots (base > slots / 2)
  // gains nothing from a split but the merge.
  const int64_t per_sm = int64_t{num_sms} / base;
  const int64_t want = std::clamp<int64_t>(per_sm >= 2 ? per_sm : slots / base, 1, kMaxSplits);
  const int64_t most =
      std::max<int64_t>(1, (int64_t{max_seq_len} + kMinTokensPerSplit - 1) / kMinTokensPerSplit);
  PagedDecodePlan plan;
  plan.num_splits = static_cast<int32_t>(std::min<int64_t>(want, most));
  const int64_t per = (std::max<int64_t>(max_seq_len, 1) + plan.num_splits - 1) / plan.num_splits;
  plan.tokens_per_split = static_cast<int32_t>((per + kDecodeTcTileTokens - 1) /
                                               kDecodeTcTileTokens * kDecodeTcTileTokens);
  plan.min_tokens_per_split = kMinTokensPerSplit;
  if (plan.num_splits > 1) {
    plan.workspace_floats = static_cast<size_t>(batch) * num_q_heads * plan.num_splits *
                            (static_cast<size_t>(head_dim) + 1);
    plan.workspace_counters = static_cast<size_t>(batch) * num_kv_heads;
  }
  return plan;
}

int32_t decode_tc_occupancy(platform::Platform& platform, int32_t head_dim, int32_t stages) {
  if (platform.device().kind != DeviceKind::kCuda) return 0;
#if KVSERVE_WITH_CUDA
  if (stages == 0) stages = platform.kernel_switches().decode_tc_stages;
  return platform::cuda::paged_decode_tc_occupancy(head_dim,
                                                   resolve_decode_tc_stages(stages, head_dim));
#else
  (void)head_dim;
  (void)stages;
  return 0;
#endif
}

void paged_decode_tc(platform::Platform& platform, const PagedDecodeParams& params,
                     platform::StreamHandle stream, int32_t stages) {
  KV_CHECK(platform.device().kind == DeviceKind::kCuda,
           "paged decode attention runs on CUDA; the CPU platform uses the cpu backend");
  KV_CHECK(params.num_kv_heads > 0 && params.num_q_heads % params.num_kv_heads == 0 &&
               params.num_q_heads / params.num_kv_heads <= 8,
           "{} query heads over {} KV heads (GQA groups 1..8)", params.num_q_heads,
           params.num_kv_heads);
  KV_CHECK(params.head_dim == 64 || params.head_dim == 80 || params.head_dim == 96 ||
               params.head_dim == 128 || params.head_dim == 256,
           "head_dim {}: 64, 80, 96, 128 or 256", params.head_dim);
  KV_CHECK(params.num_splits >= 1, "num_splits {}", params.num_splits);
  KV_CHECK(params.num_splits == 1 || (params.partial_out && params.partial_lse),
           "{} splits need a workspace", params.num_splits);
  KV_CHECK(is_paged_kv_dtype(params.kv_dtype), "paged decode reads a bf16 or fp8 KV cache, not {}",
           dtype_name(params.kv_dtype));
  check_kv_addressing(params.page_ids, params.page_size);
#if KVSERVE_WITH_CUDA
  if (stages == 0) stages = platform.kernel_switches().decode_tc_stages;
  stages = resolve_decode_tc_stages(stages, params.head_dim);
  const platform::KernelSwitches& ks = platform.kernel_switches();
  if (params.pdl != ks.pdl || (params.split_counters != nullptr && !ks.split_counters)) {
    PagedDecodeParams p = params;  // A/B runs only: the default copies nothing
    p.pdl = ks.pdl;
    if (!ks.split_counters) p.split_counters = nullptr;  // the merge kernel
    return platform::cuda::paged_decode_tc(p, stages, platform.resolve(stream));
  }
  platform::cuda::paged_decode_tc(params, stages, platform.resolve(stream));
#else
  (void)stream;
  (void)stages;
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
#endif
}

namespace reference {

void paged_prefill(const PagedPrefillParams& p, float* out, int32_t query_step) {
  const auto* q = static_cast<const uint16_t*>(p.q);
  auto k_at = [&](int64_t i) { return kv_value(p.k_cache, p.kv_dtype, i, p.k_scale); };
  auto v_at = [&](int64_t i) { return kv_value(p.v_cache, p.kv_dtype, i, p.v_scale); };
  const int32_t group = p.num_q_heads / p.num_kv_heads;
  const int64_t row =
      p.kv_stride != 0 ? p.kv_stride : static_cast<int64_t>(p.num_kv_heads) * p.head_dim;
  const int64_t q_row =
      p.q_stride != 0 ? p.q_stride : static_cast<int64_t>(p.num_q_heads) * p.head_dim;
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
    // A window keeps positions [pos - window_left, ...] of the query at pos = kv_len - q_len + i.
    const int32_t lo = p.window_left >= 0
                           ? std::clamp(kv_len - q_len + i - p.window_left, 0, std::max(visible, 0))
                           : 0;
    std::vector<double> scores(static_cast<size_t>(visible));
    std::vector<int64_t> slots(static_cast<size_t>(visible));
    for (int32_t j = lo; j < visible; ++j)
      slots[j] = kv_row_of(p.page_ids, p.page_indptr[b], p.page_size, j);
    for (int32_t h = 0; h < p.num_q_heads; ++h) {
      const int64_t kv_col = static_cast<int64_t>(h / group) * p.head_dim;
      const uint16_t* qh =
          q + static_cast<int64_t>(t) * q_row + static_cast<int64_t>(h) * p.head_dim;
      float* oh = out + (static_cast<int64_t>(t) * p.num_q_heads + h) * p.head_dim;
      double mx = -INFINITY;
      for (int32_t j = lo; j < visible; ++j) {
        const int64_t kj = slots[j] * row + kv_col;
        double s = 0;
        for (int32_t d = 0; d < p.head_dim; ++d)
          s += double(bf16_to_float(qh[d])) * k_at(kj + d);
        scores[j] = softcapped(s * p.sm_scale, p.logit_softcap);
        mx = std::max(mx, scores[j]);
      }
      double sum = 0;
      for (int32_t j = lo; j < visible; ++j)
        sum += (scores[j] = std::exp(scores[j] - mx));
      std::vector<double> acc(static_cast<size_t>(p.head_dim), 0.0);
      for (int32_t j = lo; j < visible; ++j) {
        const int64_t vj = slots[j] * row + kv_col;
        for (int32_t d = 0; d < p.head_dim; ++d)
          acc[d] += scores[j] * v_at(vj + d);
      }
      for (int32_t d = 0; d < p.head_dim; ++d)
        oh[d] = visible <= lo ? 0.0f : static_cast<float>(acc[d] / sum);
    }
  }
}

void paged_decode_parallel(const PagedDecodeParams& p, float* out) {
  std::vector<int32_t> qo_indptr(static_cast<size_t>(p.batch) + 1);
  for (int32_t b = 0; b <= p.batch; ++b)
    qo_indptr[b] = b;
  PagedPrefillParams pp;
  pp.q = p.q;
  pp.k_cache = p.k_cache;
  pp.v_cache = p.v_cache;
  pp.kv_dtype = p.kv_dtype;
  pp.k_scale = p.k_scale;
  pp.v_scale = p.v_scale;
  pp.qo_indptr = qo_indptr.data();
  pp.page_indptr = p.page_indptr;
  pp.page_ids = p.page_ids;
  pp.kv_lens = p.seq_lens;
  pp.batch = p.batch;
  pp.total_q = p.batch;
  pp.num_q_heads = p.num_q_heads;
  pp.num_kv_heads = p.num_kv_heads;
  pp.head_dim = p.head_dim;
  pp.page_size = p.page_size;
  pp.causal = false;  // a decode query sees all seq_lens[b] positions
  pp.sm_scale = p.sm_scale;
  pp.window_left = p.window_left;  // the query is at position seq_lens[b] - 1 either way
  pp.logit_softcap = p.logit_softcap;
  paged_prefill(pp, out);
}

}  // namespace reference
}  // namespace kvserve::ops

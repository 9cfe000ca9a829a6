// cuda-paged decode attention: one block per (split, KV head, request) reads its K/V rows in
// place through the page table and serves all query heads of the GQA group from each load.
// Layout inside a block: HEAD_DIM / 8 lanes hold one token's row (16 bytes = 8 bf16 each), in a
// lane group of the next power of two (80 and 96 use 10 and 12 of 16 lanes; the rest hold zeros
// and load nothing), so a block of 128 threads works on 4 (head_dim 256), 8 (80, 96, 128) or 16
// (64) tokens at once; each token group keeps an online softmax per query head; the groups merge
// in shared memory at the end.
// Page size is a run-time shift and mask (powers of two), like the tensor-core kernels'; a sliding
// window (window_left >= 0) narrows a query's positions to [window_first, seq) before the split,
// and soft-capping (logit_softcap > 0) picks one of two instantiations of the token loop (a
// uniform branch per block): the query is pre-scaled by sm_scale / cap, the score becomes
// cap * log2(e) * tanh(score).
// An fp8 cache (KV = __nv_fp8_e4m3 / e5m2) keeps the lane layout: a lane loads its 8 elements as
// 8 bytes and widens them; k_scale is folded into the query's pre-scale and v_scale into the
// output (value = stored * scale).
#include <cuda_bf16.h>

#include <cmath>
#include <string>
#include <type_traits>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/kv_elem.cuh"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kVec = 8;     // elements per lane load (16 bytes of bf16, 8 of fp8)
constexpr int kUnroll = 4;  // tokens in flight per token group
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ void unpack(const uint4& raw, float (&x)[kVec]) {
  const auto* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

template <typename KV>
__device__ __forceinline__ void unpack(const uint2& raw, float (&x)[kVec]) {
  const auto* pairs = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = fp8x2_to_float2<KV>(pairs[i]);
    x[2 * i] = f.x;
    x[2 * i + 1] = f.y;
  }
}

// A lane's 8 K (or V) elements as loaded: 16 bytes of bf16, or 8 bytes of fp8.
template <typename KV>
using LaneRaw = std::conditional_t<kIsFp8<KV>, uint2, uint4>;

template <typename KV>
__device__ __forceinline__ LaneRaw<KV> zero_raw() {
  if constexpr (kIsFp8<KV>) {
    return make_uint2(0, 0);
  } else {
    return make_uint4(0, 0, 0, 0);
  }
}

template <typename KV>
__device__ __forceinline__ void unpack_kv(const LaneRaw<KV>& raw, float (&x)[kVec]) {
  if constexpr (kIsFp8<KV>) {
    unpack<KV>(raw, x);
  } else {
    unpack(raw, x);
  }
}

// The lanes a row of HEAD_DIM elements takes: HEAD_DIM / 8 rounded up to a power of two (the
// shuffle reduction's width).
__host__ __device__ constexpr int lanes_for(int head_dim) {
  int n = 1;
  while (n < head_dim / kVec)
    n *= 2;
  return n;
}

template <typename KV, int HEAD_DIM, int GROUP>
__global__ void __launch_bounds__(kThreads)
    paged_decode_kernel(const __grid_constant__ ops::PagedDecodeParams p, int page_shift) {
  constexpr int kLanes = lanes_for(HEAD_DIM);  // threads per token row
  constexpr int kGroups = kThreads / kLanes;   // token groups per block
  static_assert(HEAD_DIM % kVec == 0 && kLanes <= 32, "whole 8-element lanes within a warp");
  // Requests (or the query tokens of an extend, up to 2^31 - 1) on x; splits on z (<= 65535).
  const int b = blockIdx.x;
  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int lane = threadIdx.x % kLanes;
  const int grp = threadIdx.x / kLanes;
  // A lane of the row (not padding); a compile-time true when the row fills its lane group.
  constexpr bool kNoPadding = kLanes == HEAD_DIM / kVec;
  const bool lane_on = kNoPadding || lane < HEAD_DIM / kVec;
  const int seq = p.seq_lens[b];
  // The positions this query reads: [lo, seq) (the window's, or all), cut into the splits.
  const int lo = ops::window_first(seq, p.window_left);
  const int len = seq - lo;
  int split_len = p.tokens_per_split;
  if (p.min_tokens_per_split > 0) {
    // This request's own splits: past the last one a block finds no tokens (an empty partial).
    const int splits =
        min(p.num_splits, max(1, (len + p.min_tokens_per_split - 1) / p.min_tokens_per_split));
    split_len = max(1, (len + splits - 1) / splits);
  }
  const int begin = lo + min(len, split * split_len);
  const int end = min(seq, begin + split_len);

  // The group's queries, this lane's 8 dimensions, pre-scaled into the log2 domain (and by
  // k_scale for fp8: q . (stored * k_scale) = (q * k_scale) . stored); soft-capping pre-scales by
  // sm_scale / cap and applies cap * log2(e) after the tanh.
  const bool capped = p.logit_softcap > 0.f;
  const float sm = capped ? p.sm_scale / p.logit_softcap : p.sm_scale * kLog2e;
  const float cap_l2 = p.logit_softcap * kLog2e;
  const float q_scale = kIsFp8<KV> ? sm * p.k_scale : sm;
  const float v_scale = kIsFp8<KV> ? p.v_scale : 1.f;
  float q[GROUP][kVec];
  const auto* qbase = static_cast<const __nv_bfloat16*>(p.q);
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    const int h = kvh * GROUP + g;
    const uint4 raw =
        lane_on
            ? *reinterpret_cast<const uint4*>(
                  qbase + (static_cast<int64_t>(b) * p.num_q_heads + h) * HEAD_DIM + lane * kVec)
            : make_uint4(0, 0, 0, 0);
    unpack(raw, q[g]);
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      q[g][i] *= q_scale;
  }
  float m[GROUP], l[GROUP], o[GROUP][kVec];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < kVec; ++i)
      o[g][i] = 0.f;
  }

  // Contiguous K/V (page_ids null, page size 1): position t is row first + t.
  const int32_t first = p.page_indptr[b];
  const int page_mask = (1 << page_shift) - 1;
  const int32_t* pages = p.page_ids == nullptr ? nullptr : p.page_ids + first;
  const auto* kc = static_cast<const KV*>(p.k_cache);
  const auto* vc = static_cast<const KV*>(p.v_cache);
  const int64_t row = static_cast<int64_t>(p.num_kv_heads) * HEAD_DIM;
  const int64_t col = static_cast<int64_t>(kvh) * HEAD_DIM + lane * kVec;

  // The loop bounds are the same for every thread (warp-uniform): the lanes of other token
  // groups in this warp must reach the shuffles too, so a token past the end is masked, not
  // skipped. The loop is instantiated with and without soft-capping and for paged or contiguous
  // K/V, chosen once per block, so the common loop has no branch per score or per token.
  auto token_loop = [&](auto capped_tag, auto paged_tag) {
    constexpr bool kCapped = decltype(capped_tag)::value;
    constexpr bool kPaged = decltype(paged_tag)::value;
    for (int base = begin; base < end; base += kGroups * kUnroll) {
      // Issue every load of kUnroll tokens before using any of them.
      LaneRaw<KV> kraw[kUnroll], vraw[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int t = base + u * kGroups + grp;
        kraw[u] = zero_raw<KV>();
        vraw[u] = zero_raw<KV>();
        if (t < end && lane_on) {
          int64_t slot;
          if constexpr (kPaged) {
            slot = (static_cast<int64_t>(pages[t >> page_shift]) << page_shift) | (t & page_mask);
          } else {
            slot = int64_t{first} + t;
          }
          kraw[u] = __ldg(reinterpret_cast<const LaneRaw<KV>*>(kc + slot * row + col));
          vraw[u] = __ldg(reinterpret_cast<const LaneRaw<KV>*>(vc + slot * row + col));
        }
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        if (base + u * kGroups >= end) break;  // uniform across the block
        const bool valid = base + u * kGroups + grp < end;
        float k[kVec], v[kVec];
        unpack_kv<KV>(kraw[u], k);
        unpack_kv<KV>(vraw[u], v);
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
          float s = 0.f;
#pragma unroll
          for (int i = 0; i < kVec; ++i)
            s += q[g][i] * k[i];
#pragma unroll
          for (int off = kLanes / 2; off > 0; off /= 2)
            s += __shfl_xor_sync(0xffffffffu, s, off);
          if constexpr (kCapped) s = cap_l2 * tanhf(s);
          if (!valid) continue;
          const float m_new = fmaxf(m[g], s);
          const float c = exp2f(m[g] - m_new);
          const float e = exp2f(s - m_new);
          l[g] = l[g] * c + e;
#pragma unroll
          for (int i = 0; i < kVec; ++i)
            o[g][i] = o[g][i] * c + e * v[i];
          m[g] = m_new;
        }
      }
    }
  };
  if (pages != nullptr) {
    if (capped) {
      token_loop(std::true_type{}, std::true_type{});
    } else {
      token_loop(std::false_type{}, std::true_type{});
    }
  } else if (capped) {
    token_loop(std::true_type{}, std::false_type{});
  } else {
    token_loop(std::false_type{}, std::false_type{});
  }

  // Merge the token groups of the block.
  __shared__ float sm_m[kGroups][GROUP];
  __shared__ float sm_l[kGroups][GROUP];
  __shared__ float sm_o[kGroups][GROUP][HEAD_DIM];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    if (lane == 0) {
      sm_m[grp][g] = m[g];
      sm_l[grp][g] = l[g];
    }
    if (lane_on) {
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        sm_o[grp][g][lane * kVec + i] = o[g][i];
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < GROUP * HEAD_DIM; idx += kThreads) {
    const int g = idx / HEAD_DIM;
    const int d = idx % HEAD_DIM;
    float mm = -INFINITY;
    for (int j = 0; j < kGroups; ++j)
      mm = fmaxf(mm, sm_m[j][g]);
    float ll = 0.f, oo = 0.f;
    if (mm != -INFINITY) {
      for (int j = 0; j < kGroups; ++j) {
        const float w = exp2f(sm_m[j][g] - mm);  // 0 for empty groups (m = -inf)
        ll += sm_l[j][g] * w;
        oo += sm_o[j][g][d] * w;
      }
    }
    const int h = kvh * GROUP + g;
    const int64_t bh = static_cast<int64_t>(b) * p.num_q_heads + h;
    // v_scale on the normalised output (the merge of splits is linear in it).
    const float val = ll > 0.f ? oo / ll * v_scale : 0.f;
    if (p.num_splits == 1) {
      static_cast<__nv_bfloat16*>(p.out)[bh * HEAD_DIM + d] = __float2bfloat16_rn(val);
    } else {
      p.partial_out[(bh * p.num_splits + split) * HEAD_DIM + d] = val;
      if (d == 0) p.partial_lse[bh * p.num_splits + split] = ll > 0.f ? mm + log2f(ll) : -INFINITY;
    }
  }
}

// Combines the splits of one (request, query head): weights 2^(lse_s - max lse).
template <int HEAD_DIM>
__global__ void __launch_bounds__(HEAD_DIM)
    merge_splits_kernel(const __grid_constant__ ops::PagedDecodeParams p) {
  const int64_t bh = blockIdx.x;
  const int d = threadIdx.x;
  const float* lse = p.partial_lse + bh * p.num_splits;
  float mm = -INFINITY;
  for (int s = 0; s < p.num_splits; ++s)
    mm = fmaxf(mm, lse[s]);
  float w_sum = 0.f, acc = 0.f;
  if (mm != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float w = exp2f(lse[s] - mm);
      w_sum += w;
      acc += w * p.partial_out[(bh * p.num_splits + s) * HEAD_DIM + d];
    }
  }
  static_cast<__nv_bfloat16*>(p.out)[bh * HEAD_DIM + d] =
      __float2bfloat16_rn(w_sum > 0.f ? acc / w_sum : 0.f);
}

template <typename KV, int HEAD_DIM, int GROUP>
void launch(const ops::PagedDecodeParams& p, int page_shift, cudaStream_t stream) {
  const dim3 grid(p.batch, p.num_kv_heads, p.num_splits);
  paged_decode_kernel<KV, HEAD_DIM, GROUP><<<grid, kThreads, 0, stream>>>(p, page_shift);
  KV_CUDA_CHECK(cudaGetLastError());
  if (p.num_splits > 1) {
    merge_splits_kernel<HEAD_DIM><<<p.batch * p.num_q_heads, HEAD_DIM, 0, stream>>>(p);
    KV_CUDA_CHECK(cudaGetLastError());
  }
}

[[noreturn]] void unsupported(const char* what, int value) {
  detail::check_failed(__FILE__, __LINE__, what, std::string(), std::to_string(value));
}

// The one boundary where runtime values become template parameters.
template <typename KV, int HEAD_DIM>
void dispatch_group(const ops::PagedDecodeParams& p, int page_shift, cudaStream_t s) {
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0) {
    unsupported("paged decode: num_q_heads not a multiple of num_kv_heads", p.num_q_heads);
  }
  switch (p.num_q_heads / p.num_kv_heads) {
    case 1:
      return launch<KV, HEAD_DIM, 1>(p, page_shift, s);
    case 2:
      return launch<KV, HEAD_DIM, 2>(p, page_shift, s);
    case 3:
      return launch<KV, HEAD_DIM, 3>(p, page_shift, s);
    case 4:
      return launch<KV, HEAD_DIM, 4>(p, page_shift, s);
    case 5:
      return launch<KV, HEAD_DIM, 5>(p, page_shift, s);
    case 6:
      return launch<KV, HEAD_DIM, 6>(p, page_shift, s);
    case 7:
      return launch<KV, HEAD_DIM, 7>(p, page_shift, s);
    case 8:
      return launch<KV, HEAD_DIM, 8>(p, page_shift, s);
    default:
      unsupported("paged decode: GQA group size", p.num_q_heads / p.num_kv_heads);
  }
}

template <typename KV>
void dispatch_head_dim(const ops::PagedDecodeParams& p, int page_shift, cudaStream_t s) {
  switch (p.head_dim) {
    case 64:
      return dispatch_group<KV, 64>(p, page_shift, s);
    case 80:
      return dispatch_group<KV, 80>(p, page_shift, s);
    case 96:
      return dispatch_group<KV, 96>(p, page_shift, s);
    case 128:
      return dispatch_group<KV, 128>(p, page_shift, s);
    case 256:
      return dispatch_group<KV, 256>(p, page_shift, s);
    default:
      unsupported("paged decode: head_dim", p.head_dim);
  }
}

}  // namespace

int multiprocessor_count() {
  int device = 0;
  int count = 0;
  KV_CUDA_CHECK(cudaGetDevice(&device));
  KV_CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
  return count;
}

void paged_decode(const ops::PagedDecodeParams& p, StreamHandle stream) {
  if (p.batch == 0) return;
  int page_shift = 0;
  while ((1 << page_shift) < p.page_size)
    ++page_shift;
  if ((1 << page_shift) != p.page_size || page_shift > 7) {
    unsupported("paged decode: page size (a power of two up to 128)", p.page_size);
  }
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  switch (p.kv_dtype) {
    case DType::kBF16:
      return dispatch_head_dim<__nv_bfloat16>(p, page_shift, s);
    case DType::kFP8E4M3:
      return dispatch_head_dim<__nv_fp8_e4m3>(p, page_shift, s);
    case DType::kFP8E5M2:
      return dispatch_head_dim<__nv_fp8_e5m2>(p, page_shift, s);
    default:
      unsupported("paged decode: KV cache dtype (bf16, fp8_e4m3, fp8_e5m2)",
                  static_cast<int>(p.kv_dtype));
  }
}

}  // namespace kvserve::platform::cuda

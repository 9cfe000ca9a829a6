// Attention over contiguous K/V (varlen_attention_params.h) and the gather that builds that K/V
// from the paged pool: the cuda-ragged backend and Whisper's encoder self-attention.
//
// varlen_attention: one block of 64 threads per (query tile, head, sequence). A thread owns one
// query (q and its output accumulator in registers, f32) and one partition of the keys: with
// short query tiles (decode, short prompts) the block's threads split the keys of few queries
// (splits = 64 / queries per block) and merge their partial softmax states through shared memory
// at the end. K/V tiles of 32 keys are staged in shared memory as f32, rows padded by 4 floats so
// threads reading different keys hit different banks. Online softmax per key in the log2 domain
// (scores pre-scaled by scaling * log2(e)). Head dims 16, 32, 64, 80, 96, 128 and 256 and the
// element types are dispatched to templates at one boundary; shared memory is dynamic (head dim
// 256 needs 66 KB). A thread holds its query and accumulator in registers: at head dim 256 they
// spill to local memory (correct, not fast; cuda-ragged runs the paged kernels there).
// Sliding window (window_left >= 0): query i (position kv_len - q_len + i) skips keys below
// position - window_left, and a block starts at its first query's bound. Soft-capping
// (logit_softcap > 0): the query is pre-scaled by scaling / cap and a score becomes
// cap * log2(e) * tanh(score), a uniform branch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <string>

#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/kv_elem.cuh"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kThreads = 64;   // threads per block
constexpr int kTileKeys = 32;  // keys staged in shared memory at a time
constexpr int kRowPad = 4;     // floats of padding per staged row (bank spread, 16-byte aligned)
constexpr float kLog2e = 1.4426950408889634f;

cudaStream_t as_cuda(StreamHandle s) {
  return static_cast<cudaStream_t>(s.ptr);
}

template <int HD>
__host__ __device__ constexpr int smem_floats() {  // of the kernel's dynamic shared memory
  const int tiles = 2 * kTileKeys * (HD + kRowPad);
  const int merge = kThreads * (HD + 2);
  return tiles > merge ? tiles : merge;
}

// Keys visible to query `i` of a sequence with q_len queries and kv_len keys.
__device__ __forceinline__ int64_t visible_keys(bool causal, int64_t i, int64_t q_len,
                                                int64_t kv_len) {
  if (!causal) return kv_len;
  const int64_t v = kv_len - q_len + i + 1;
  return v < 0 ? 0 : (v > kv_len ? kv_len : v);
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads)
    varlen_attention_kernel(const __grid_constant__ ops::VarlenAttentionParams p, int splits) {
  const int qpb = kThreads / splits;  // queries per block
  const int s = blockIdx.z;
  const int h = blockIdx.y;
  int64_t q_begin = 0, q_len = p.num_q, kv_begin = 0, kv_len = p.num_kv;
  if (p.cu_q != nullptr) {
    q_begin = p.cu_q[s];
    q_len = p.cu_q[s + 1] - q_begin;
    kv_begin = p.cu_kv[s];
    kv_len = p.cu_kv[s + 1] - kv_begin;
  }
  const int64_t tile_q0 = static_cast<int64_t>(blockIdx.x) * qpb;
  if (tile_q0 >= q_len) return;  // a shorter sequence than the longest of the batch
  const int qi = threadIdx.x % qpb;
  const int part = threadIdx.x / qpb;
  const int64_t i = tile_q0 + qi;
  const bool active = i < q_len;
  const int kvh = h / (p.num_heads / p.num_kv_heads);
  const int64_t my_visible = active ? visible_keys(p.causal, i, q_len, kv_len) : 0;
  const int64_t last_q = (tile_q0 + qpb < q_len ? tile_q0 + qpb : q_len) - 1;
  const int64_t block_visible = visible_keys(p.causal, last_q, q_len, kv_len);
  // The window's first key of query i, and the block's (its first query's).
  auto window_lo = [&](int64_t qi_) -> int64_t {
    if (p.window_left < 0) return 0;
    const int64_t lo = kv_len - q_len + qi_ - p.window_left;
    return lo < 0 ? 0 : lo;
  };
  const int64_t my_lo = window_lo(i);
  const int64_t block_lo = window_lo(tile_q0);

  const bool capped = p.logit_softcap > 0.f;
  const float scale = capped ? p.scaling / p.logit_softcap : p.scaling * kLog2e;
  const float cap_l2 = p.logit_softcap * kLog2e;
  float q[HD];
  float acc[HD];
  {
    const T* qrow = static_cast<const T*>(p.q) + (q_begin + (active ? i : 0)) * p.q_stride +
                    static_cast<int64_t>(h) * HD;
#pragma unroll
    for (int d = 0; d < HD; ++d) {
      q[d] = active ? to_float(qrow[d]) * scale : 0.f;
      acc[d] = 0.f;
    }
  }
  float m = -INFINITY;
  float l = 0.f;

  extern __shared__ __align__(16) float smem[];  // smem_floats<HD>()
  float* ks = smem;
  float* vs = smem + kTileKeys * (HD + kRowPad);
  const T* kbase =
      static_cast<const T*>(p.k) + kv_begin * p.k_stride + static_cast<int64_t>(kvh) * HD;
  const T* vbase =
      static_cast<const T*>(p.v) + kv_begin * p.v_stride + static_cast<int64_t>(kvh) * HD;
  for (int64_t t0 = block_lo; t0 < block_visible; t0 += kTileKeys) {
    const int n = block_visible - t0 < kTileKeys ? static_cast<int>(block_visible - t0) : kTileKeys;
    __syncthreads();  // the previous tile is consumed
    for (int e = threadIdx.x; e < n * HD; e += kThreads) {
      const int r = e / HD;
      const int d = e % HD;
      ks[r * (HD + kRowPad) + d] = to_float(kbase[(t0 + r) * p.k_stride + d]);
      vs[r * (HD + kRowPad) + d] = to_float(vbase[(t0 + r) * p.v_stride + d]);
    }
    __syncthreads();
    for (int j = part; j < n && t0 + j < my_visible; j += splits) {
      if (t0 + j < my_lo) continue;  // below this query's window
      const float4* kr = reinterpret_cast<const float4*>(ks + j * (HD + kRowPad));
      float sc = 0.f;
#pragma unroll
      for (int d4 = 0; d4 < HD / 4; ++d4) {
        const float4 kk = kr[d4];
        sc += q[4 * d4] * kk.x + q[4 * d4 + 1] * kk.y + q[4 * d4 + 2] * kk.z + q[4 * d4 + 3] * kk.w;
      }
      if (capped) sc = cap_l2 * tanhf(sc);
      if (sc > m) {
        const float c = exp2f(m - sc);
        l *= c;
#pragma unroll
        for (int d = 0; d < HD; ++d)
          acc[d] *= c;
        m = sc;
      }
      const float pj = exp2f(sc - m);
      l += pj;
      const float4* vr = reinterpret_cast<const float4*>(vs + j * (HD + kRowPad));
#pragma unroll
      for (int d4 = 0; d4 < HD / 4; ++d4) {
        const float4 vv = vr[d4];
        acc[4 * d4] += pj * vv.x;
        acc[4 * d4 + 1] += pj * vv.y;
        acc[4 * d4 + 2] += pj * vv.z;
        acc[4 * d4 + 3] += pj * vv.w;
      }
    }
  }

  if (splits > 1) {
    // Merge the partitions of each query: every thread publishes (m, l, acc), partition 0 reads.
    __syncthreads();
    float* mine = smem + threadIdx.x * (HD + 2);
    mine[0] = m;
    mine[1] = l;
#pragma unroll
    for (int d = 0; d < HD; ++d)
      mine[2 + d] = acc[d];
    __syncthreads();
    if (part != 0) return;
    float mx = -INFINITY;
    for (int pp = 0; pp < splits; ++pp)
      mx = fmaxf(mx, smem[(pp * qpb + qi) * (HD + 2)]);
    l = 0.f;
#pragma unroll
    for (int d = 0; d < HD; ++d)
      acc[d] = 0.f;
    if (mx != -INFINITY) {
      for (int pp = 0; pp < splits; ++pp) {
        const float* other = smem + (pp * qpb + qi) * (HD + 2);
        if (other[0] == -INFINITY) continue;
        const float c = exp2f(other[0] - mx);
        l += other[1] * c;
#pragma unroll
        for (int d = 0; d < HD; ++d)
          acc[d] += other[2 + d] * c;
      }
    }
  }
  if (!active) return;
  T* out = static_cast<T*>(p.out) + (q_begin + i) * p.out_stride + static_cast<int64_t>(h) * HD;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: zeros
#pragma unroll
  for (int d = 0; d < HD; ++d)
    out[d] = from_float<T>(acc[d] * inv);
}

// One block per token copies its K row and V row; 16-byte pieces when rows allow it. A slot
// outside the pool (a bug upstream) yields zero rows rather than a wild read.
__global__ void gather_kv_kernel(const __grid_constant__ ops::GatherKvParams p, int64_t row_bytes) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slots[t];
  const bool valid = slot >= 0 && slot < p.num_slots;
  const auto* ksrc = static_cast<const char*>(p.k_cache) + (valid ? slot : 0) * row_bytes;
  const auto* vsrc = static_cast<const char*>(p.v_cache) + (valid ? slot : 0) * row_bytes;
  auto* kdst = static_cast<char*>(p.k_out) + t * row_bytes;
  auto* vdst = static_cast<char*>(p.v_out) + t * row_bytes;
  if (row_bytes % 16 == 0) {
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) {
      reinterpret_cast<uint4*>(kdst)[i] = valid ? reinterpret_cast<const uint4*>(ksrc)[i] : zero;
      reinterpret_cast<uint4*>(vdst)[i] = valid ? reinterpret_cast<const uint4*>(vsrc)[i] : zero;
    }
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x) {
      kdst[i] = valid ? ksrc[i] : 0;
      vdst[i] = valid ? vsrc[i] : 0;
    }
  }
}

// The fp8 cache's gather: one block per token widens its K and V rows into bf16 rows, times the
// layer's scale (value = stored * scale), 8 elements per thread and step.
template <typename KV>
__global__ void gather_kv_fp8_kernel(const __grid_constant__ ops::GatherKvParams p) {
  const int64_t t = blockIdx.x;
  const int64_t slot = p.slots[t];
  const bool valid = slot >= 0 && slot < p.num_slots;
  const auto* ksrc = static_cast<const uint8_t*>(p.k_cache) + (valid ? slot : 0) * p.row_elems;
  const auto* vsrc = static_cast<const uint8_t*>(p.v_cache) + (valid ? slot : 0) * p.row_elems;
  auto* kdst = static_cast<__nv_bfloat16*>(p.k_out) + t * p.row_elems;
  auto* vdst = static_cast<__nv_bfloat16*>(p.v_out) + t * p.row_elems;
  auto widen = [&](const uint8_t* src, __nv_bfloat16* dst, float scale, int64_t i) {
    const float2 f = valid ? fp8x2_to_float2<KV>(static_cast<uint16_t>(src[i] | src[i + 1] << 8))
                           : make_float2(0.f, 0.f);
    *reinterpret_cast<__nv_bfloat162*>(dst + i) = __floats2bfloat162_rn(f.x * scale, f.y * scale);
  };
  // row_elems is even (num_kv_heads * head_dim, head_dim even): pairs, bf16x2 stores.
  for (int64_t i = 2 * threadIdx.x; i < p.row_elems; i += 2 * blockDim.x) {
    widen(ksrc, kdst, p.k_scale, i);
    widen(vsrc, vdst, p.v_scale, i);
  }
}

[[noreturn]] void unsupported(const char* what, int value) {
  detail::check_failed(__FILE__, __LINE__, "varlen_attention", what, std::to_string(value));
}

template <typename T, int HD>
void launch_head_dim(const ops::VarlenAttentionParams& p, dim3 grid, int splits, cudaStream_t s) {
  constexpr int kBytes = smem_floats<HD>() * int{sizeof(float)};
  auto* kernel = varlen_attention_kernel<T, HD>;
  static const bool configured = [&] {
    KV_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
    return true;
  }();
  (void)configured;
  kernel<<<grid, kThreads, kBytes, s>>>(p, splits);
}

template <typename T>
void launch_for_type(const ops::VarlenAttentionParams& p, dim3 grid, int splits, cudaStream_t s) {
  switch (p.head_dim) {
    case 16:
      return launch_head_dim<T, 16>(p, grid, splits, s);
    case 32:
      return launch_head_dim<T, 32>(p, grid, splits, s);
    case 64:
      return launch_head_dim<T, 64>(p, grid, splits, s);
    case 80:
      return launch_head_dim<T, 80>(p, grid, splits, s);
    case 96:
      return launch_head_dim<T, 96>(p, grid, splits, s);
    case 128:
      return launch_head_dim<T, 128>(p, grid, splits, s);
    case 256:
      return launch_head_dim<T, 256>(p, grid, splits, s);
    default:
      unsupported("head_dim must be 16, 32, 64, 80, 96, 128 or 256", p.head_dim);
  }
}

}  // namespace

void varlen_attention(const ops::VarlenAttentionParams& p, StreamHandle stream) {
  if (p.max_q_len <= 0 || p.num_seqs <= 0) return;
  KV_CHECK_MSG(p.num_heads > 0 && p.num_kv_heads > 0 && p.num_heads % p.num_kv_heads == 0,
               "varlen_attention: num_heads must be a positive multiple of num_kv_heads");
  KV_CHECK_MSG((p.cu_q == nullptr) == (p.cu_kv == nullptr),
               "varlen_attention: give both cu_q and cu_kv or neither");
  KV_CHECK_MSG(p.num_seqs <= 65535, "varlen_attention: at most 65535 sequences per launch");
  // Queries per block: the longest sequence's, rounded up to a power of two, at most 64; the
  // block's other threads split the keys.
  int qpb = 1;
  while (qpb < kThreads && qpb < p.max_q_len)
    qpb *= 2;
  const int splits = kThreads / qpb;
  const dim3 grid(static_cast<unsigned>((p.max_q_len + qpb - 1) / qpb),
                  static_cast<unsigned>(p.num_heads), static_cast<unsigned>(p.num_seqs));
  const cudaStream_t s = as_cuda(stream);
  switch (p.dtype) {
    case DType::kBF16:
      launch_for_type<__nv_bfloat16>(p, grid, splits, s);
      break;
    case DType::kF16:
      launch_for_type<__half>(p, grid, splits, s);
      break;
    case DType::kF32:
      launch_for_type<float>(p, grid, splits, s);
      break;
    default:
      unsupported("dtype must be bf16, f16 or f32", static_cast<int>(p.dtype));
  }
  KV_CUDA_CHECK(cudaGetLastError());
}

void gather_kv(const ops::GatherKvParams& p, StreamHandle stream) {
  if (p.num_tokens == 0) return;
  if (is_float8(p.cache_dtype) && p.dtype != p.cache_dtype) {
    KV_CHECK_MSG(p.dtype == DType::kBF16 && p.row_elems % 2 == 0,
                 "gather_kv: an fp8 cache gathers into bf16 rows of an even width");
    const auto grid = static_cast<unsigned>(p.num_tokens);
    if (p.cache_dtype == DType::kFP8E4M3) {
      gather_kv_fp8_kernel<__nv_fp8_e4m3><<<grid, 128, 0, as_cuda(stream)>>>(p);
    } else {
      gather_kv_fp8_kernel<__nv_fp8_e5m2><<<grid, 128, 0, as_cuda(stream)>>>(p);
    }
    KV_CUDA_CHECK(cudaGetLastError());
    return;
  }
  const int64_t row_bytes = p.row_elems * static_cast<int64_t>(dtype_size(p.dtype));
  gather_kv_kernel<<<static_cast<unsigned>(p.num_tokens), 128, 0, as_cuda(stream)>>>(p, row_bytes);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

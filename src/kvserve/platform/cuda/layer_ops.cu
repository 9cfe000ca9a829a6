// CUDA kernels of the decoder-layer ops (layer_ops_params.h): bf16 (or f32) activations, f32
// arithmetic, results rounded once. The element type is dispatched to a template at one boundary
// (`dispatch_dtype`); each kernel is memory-bound and moves every byte once where it can.
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>
#include <string>

#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/pdl.cuh"

namespace kvserve::platform::cuda {
namespace {

using bf16 = __nv_bfloat16;

cudaStream_t as_cuda(StreamHandle s) {
  return static_cast<cudaStream_t>(s.ptr);
}

[[noreturn]] void unsupported(const char* op, DType t) {
  detail::check_failed(__FILE__, __LINE__, op, "dtype must be bf16 or f32",
                       std::to_string(static_cast<int>(t)));
}

// The one boundary where a runtime dtype becomes a template parameter.
template <typename F>
void dispatch_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kBF16:
      return f(bf16{});
    case DType::kF32:
      return f(float{});
    default:
      unsupported(op, t);
  }
}

// ---- embedding --------------------------------------------------------------------------------

// One block per token; rows are copied in 16-byte pieces when they allow it. An id outside the
// vocabulary (rejected at submission; never expected here) yields a zero row.
__global__ void embedding_kernel(const __grid_constant__ ops::EmbeddingParams p,
                                 int64_t row_bytes) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t t = blockIdx.x;
  const int64_t id = p.ids[t] - p.vocab_start;
  auto* out = static_cast<char*>(p.out) + t * row_bytes;
  const bool valid = id >= 0 && id < p.vocab;
  const auto* src = static_cast<const char*>(p.table) + static_cast<int64_t>(id) * row_bytes;
  if (row_bytes % 16 == 0) {
    for (int64_t i = threadIdx.x; i < row_bytes / 16; i += blockDim.x) {
      reinterpret_cast<uint4*>(out)[i] =
          valid ? reinterpret_cast<const uint4*>(src)[i] : make_uint4(0, 0, 0, 0);
    }
  } else {
    for (int64_t i = threadIdx.x; i < row_bytes; i += blockDim.x)
      out[i] = valid ? src[i] : 0;
  }
}

// Gemma's scaled embeddings: one block per token, out = table[id] * scale rounded to T (the scale
// is already a value of T, so this is transformers' product of two T values).
template <typename T>
__global__ void scaled_embedding_kernel(const __grid_constant__ ops::EmbeddingParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t t = blockIdx.x;
  const int64_t id = p.ids[t] - p.vocab_start;
  const bool valid = id >= 0 && id < p.vocab;
  const T* src = static_cast<const T*>(p.table) + static_cast<int64_t>(valid ? id : 0) * p.hidden;
  T* out = static_cast<T*>(p.out) + t * p.hidden;
  for (int64_t i = threadIdx.x; i < p.hidden; i += blockDim.x)
    out[i] = from_float<T>(valid ? to_float(src[i]) * p.scale : 0.f);
}

// ---- RMSNorm ----------------------------------------------------------------------------------

template <int THREADS>
__device__ float block_sum(float v) {
  __shared__ float warp_sums[THREADS / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < THREADS / 32; ++w)
    total += warp_sums[w];
  return total;
}

// One block per row. With a residual: residual = x + residual (rounded to T, as the model's
// dtype would), then the norm of that sum. `out` may alias `x`: each thread reads and writes
// only its own columns.
template <typename T, int THREADS>
__global__ void __launch_bounds__(THREADS)
    rms_norm_kernel(const __grid_constant__ ops::RmsNormParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  const T* res = p.residual ? static_cast<const T*>(p.residual) + r * p.cols : nullptr;
  // Where x + residual goes: residual_out, else residual in place (RmsNormParams).
  void* res_out_base = p.residual_out ? p.residual_out : p.residual;
  T* res_out = res_out_base ? static_cast<T*>(res_out_base) + r * p.cols : nullptr;
  T* out = static_cast<T*>(p.out) + r * p.cols;
  const T* w = static_cast<const T*>(p.weight);
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < p.cols; i += THREADS) {
    float v = to_float(x[i]);
    if (res_out != nullptr) {
      const T s = res != nullptr ? from_float<T>(v + to_float(res[i])) : x[i];
      res_out[i] = s;
      v = to_float(s);
    }
    sum += v * v;
  }
  const float inv = rsqrtf(block_sum<THREADS>(sum) / static_cast<float>(p.cols) + p.eps);
  for (int64_t i = threadIdx.x; i < p.cols; i += THREADS) {
    const float v = res_out != nullptr ? to_float(res_out[i]) : to_float(x[i]);
    out[i] = from_float<T>(v * inv * (to_float(w[i]) + p.weight_offset));
  }
}

// The bf16 fast path: 16-byte vectors of 8 elements, each thread keeping its vectors of the row
// in registers between the sum and the scaling (one read of x and residual, one write of each).
// Same arithmetic as rms_norm_kernel; only the order of the sum's terms differs.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 h[4];
};

__device__ __forceinline__ void load8(const bf16* p, float (&f)[8]) {
  const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(p);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const float2 x = __bfloat1622float2(v.h[e]);
    f[2 * e] = x.x;
    f[2 * e + 1] = x.y;
  }
}

__device__ __forceinline__ void store8(bf16* p, const float (&f)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int e = 0; e < 4; ++e)
    v.h[e] = __floats2bfloat162_rn(f[2 * e], f[2 * e + 1]);
  *reinterpret_cast<Bf16x8*>(p) = v;
}

// `out` may alias `x`: each thread reads its vectors before it writes them.
template <int THREADS, int VECS>
__global__ void __launch_bounds__(THREADS)
    rms_norm_bf16x8_kernel(const __grid_constant__ ops::RmsNormParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t r = blockIdx.x;
  const int n = static_cast<int>(p.cols / 8);
  const bf16* x = static_cast<const bf16*>(p.x) + r * p.x_stride;
  const bf16* res = p.residual ? static_cast<const bf16*>(p.residual) + r * p.cols : nullptr;
  void* res_out_base = p.residual_out ? p.residual_out : p.residual;
  bf16* res_out = res_out_base ? static_cast<bf16*>(res_out_base) + r * p.cols : nullptr;
  bf16* out = static_cast<bf16*>(p.out) + r * p.cols;
  const bf16* w = static_cast<const bf16*>(p.weight);
  float v[VECS][8];
  float sum = 0.f;
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * THREADS;
    if (i >= n) break;
    load8(x + 8 * i, v[j]);
    if (res != nullptr) {
      float rv[8];
      load8(res + 8 * i, rv);
#pragma unroll
      for (int e = 0; e < 8; ++e)  // rounded to bf16, as the scalar kernel's sum
        v[j][e] = __bfloat162float(__float2bfloat16_rn(v[j][e] + rv[e]));
    }
    if (res_out != nullptr) store8(res_out + 8 * i, v[j]);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      sum += v[j][e] * v[j][e];
  }
  const float inv = rsqrtf(block_sum<THREADS>(sum) / static_cast<float>(p.cols) + p.eps);
#pragma unroll
  for (int j = 0; j < VECS; ++j) {
    const int i = static_cast<int>(threadIdx.x) + j * THREADS;
    if (i >= n) break;
    float wv[8];
    load8(w + 8 * i, wv);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      v[j][e] = v[j][e] * inv * (wv[e] + p.weight_offset);
    store8(out + 8 * i, v[j]);
  }
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

// ---- rotary embedding -------------------------------------------------------------------------

// Token t's row of the inverse frequencies ([rows, half]; RopeParams).
__device__ __forceinline__ const float* inv_freq_row(const float* inv_freq, const int32_t* rows,
                                                     int64_t t, int half) {
  return inv_freq + (rows != nullptr ? static_cast<int64_t>(rows[t]) * half : 0);
}

// The rotated value of element d (< rotary_dim) of one head; angle = position * inv_freq in f32,
// as Hugging Face computes it, cos and sin times the attention factor.
template <typename T>
__device__ __forceinline__ float rotated(const T* head, int d, int half, float pos,
                                         const float* inv_freq, float attention_factor) {
  const int i = d < half ? d : d - half;
  float s, c;
  sincosf(pos * inv_freq[i], &s, &c);
  s *= attention_factor;
  c *= attention_factor;
  const float x1 = to_float(head[i]);
  const float x2 = to_float(head[i + half]);
  return d < half ? x1 * c - x2 * s : x2 * c + x1 * s;
}

// In place: one block per token; each thread owns pairs (i, i + half) so reads precede writes.
template <typename T>
__global__ void rope_kernel(const __grid_constant__ ops::RopeParams p) {
  const int64_t t = blockIdx.x;
  const int half = p.rotary_dim / 2;
  const float pos = static_cast<float>(p.positions[t]);
  const float* inv_freq = inv_freq_row(p.inv_freq, p.rope_rows, t, half);
  const int heads = p.num_heads + p.num_kv_heads;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx % half;
    T* x = h < p.num_heads
               ? static_cast<T*>(p.q) + t * p.q_stride + static_cast<int64_t>(h) * p.head_dim
               : static_cast<T*>(p.k) + t * p.k_stride +
                     static_cast<int64_t>(h - p.num_heads) * p.head_dim;
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    s *= p.attention_factor;
    c *= p.attention_factor;
    const float x1 = to_float(x[i]);
    const float x2 = to_float(x[i + half]);
    x[i] = from_float<T>(x1 * c - x2 * s);
    x[i + half] = from_float<T>(x2 * c + x1 * s);
  }
}

// Out of place: one block per token writes q, k (rotated) and v from the fused projection.
// Token t's k/v row: its cache slot with the fused store (a slot outside the pool traps, as the
// store kernels do), else t in the k / v activations.
__device__ __forceinline__ int64_t kv_destination_row(const ops::SplitQkvRopeParams& p, int64_t t) {
  if (p.k_cache == nullptr) return t;
  const int64_t slot = p.cache_loc[t];
  if (slot < 0 || slot >= p.num_slots) __trap();
  return slot;
}

template <typename T>
__global__ void split_qkv_rope_kernel(const __grid_constant__ ops::SplitQkvRopeParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t t = blockIdx.x;
  const int hd = p.head_dim;
  const int half = p.rotary_dim / 2;
  const int qd = p.num_heads * hd;
  const int kvd = p.num_kv_heads * hd;
  const float pos = static_cast<float>(p.positions[t]);
  const float* inv_freq = inv_freq_row(p.inv_freq, p.rope_rows, t, half);
  const T* src = static_cast<const T*>(p.qkv) + t * static_cast<int64_t>(qd + 2 * kvd);
  const int64_t kv_row = kv_destination_row(p, t);
  T* k_dst = static_cast<T*>(p.k_cache != nullptr ? p.k_cache : p.k) + kv_row * kvd;
  T* v_dst = static_cast<T*>(p.k_cache != nullptr ? p.v_cache : p.v) + kv_row * kvd;
  for (int idx = threadIdx.x; idx < qd + 2 * kvd; idx += blockDim.x) {
    const int d = idx % hd;
    const T* head = src + (idx - d);
    if (idx < qd + kvd) {
      const float v = d < p.rotary_dim ? rotated(head, d, half, pos, inv_freq, p.attention_factor)
                                       : to_float(src[idx]);
      if (idx < qd) {
        static_cast<T*>(p.q)[t * qd + idx] = from_float<T>(v);
      } else {
        k_dst[idx - qd] = from_float<T>(v);
      }
    } else {
      v_dst[idx - qd - kvd] = src[idx];
    }
  }
}

// The bf16 fast path (rotary_dim == head_dim, head_dim a multiple of 16, at most 256): one block
// per token; the token's cos/sin table (head_dim / 2 angles, the same f32 products and sincosf
// as above) is computed once into shared memory, then each thread rotates 8 pairs (i, i + half)
// of one head with two 16-byte loads and two stores, or copies 8 elements of v.
constexpr int kRopeThreads = 256;

__global__ void __launch_bounds__(kRopeThreads)
    split_qkv_rope_bf16x8_kernel(const __grid_constant__ ops::SplitQkvRopeParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  __shared__ float cos_t[128], sin_t[128];
  const int64_t t = blockIdx.x;
  const int hd = p.head_dim;
  const int half = hd / 2;
  const int qd = p.num_heads * hd;
  const int kvd = p.num_kv_heads * hd;
  const float pos = static_cast<float>(p.positions[t]);
  const float* inv_freq = inv_freq_row(p.inv_freq, p.rope_rows, t, half);
  for (int i = threadIdx.x; i < half; i += kRopeThreads) {
    float s, c;
    sincosf(pos * inv_freq[i], &s, &c);
    sin_t[i] = s * p.attention_factor;
    cos_t[i] = c * p.attention_factor;
  }
  __syncthreads();
  const bf16* src = static_cast<const bf16*>(p.qkv) + t * static_cast<int64_t>(qd + 2 * kvd);
  const int64_t kv_row = kv_destination_row(p, t);
  bf16* k_dst = static_cast<bf16*>(p.k_cache != nullptr ? p.k_cache : p.k) + kv_row * kvd;
  bf16* v_dst = static_cast<bf16*>(p.k_cache != nullptr ? p.v_cache : p.v) + kv_row * kvd;
  const int per_head = half / 8;
  const int rot_items = (p.num_heads + p.num_kv_heads) * per_head;
  const int items = rot_items + kvd / 8;
  for (int item = threadIdx.x; item < items; item += kRopeThreads) {
    if (item >= rot_items) {
      const int i = 8 * (item - rot_items);
      *reinterpret_cast<Bf16x8*>(v_dst + i) = *reinterpret_cast<const Bf16x8*>(src + qd + kvd + i);
      continue;
    }
    const int head = item / per_head;
    const int c = 8 * (item % per_head);
    float x1[8], x2[8], o1[8], o2[8];
    load8(src + head * hd + c, x1);
    load8(src + head * hd + c + half, x2);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float cs = cos_t[c + e], sn = sin_t[c + e];
      o1[e] = x1[e] * cs - x2[e] * sn;
      o2[e] = x2[e] * cs + x1[e] * sn;
    }
    bf16* dst = head < p.num_heads ? static_cast<bf16*>(p.q) + t * qd + head * hd
                                   : k_dst + (head - p.num_heads) * hd;
    store8(dst + c, o1);
    store8(dst + c + half, o2);
  }
}

// ---- gated activation and mul ---------------------------------------------------------------

// SiLU, or GELU's tanh approximation as torch computes it (gelu_pytorch_tanh), in f32.
__device__ __forceinline__ float gate_activation(float g, ops::GatedActivation act) {
  if (act == ops::GatedActivation::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
  }
  return g / (1.f + __expf(-g));
}

template <typename T>
__global__ void act_and_mul_kernel(const __grid_constant__ ops::ActAndMulParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t total = p.num_tokens * p.inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / p.inter;
    const int64_t i = idx % p.inter;
    const T* row = static_cast<const T*>(p.x) + t * 2 * p.inter;
    const float g = to_float(row[i]);
    const float u = to_float(row[p.inter + i]);
    static_cast<T*>(p.out)[idx] = from_float<T>(gate_activation(g, p.activation) * u);
  }
}

// The bf16 fast path (inter a multiple of 8): 8 outputs per thread, 16-byte loads and store.
__global__ void act_and_mul_bf16x8_kernel(const __grid_constant__ ops::ActAndMulParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t vecs_per_row = p.inter / 8;
  const int64_t total = p.num_tokens * vecs_per_row;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / vecs_per_row;
    const int64_t i = 8 * (idx % vecs_per_row);
    const bf16* row = static_cast<const bf16*>(p.x) + t * 2 * p.inter;
    float g[8], u[8], o[8];
    load8(row + i, g);
    load8(row + p.inter + i, u);
#pragma unroll
    for (int e = 0; e < 8; ++e)
      o[e] = gate_activation(g[e], p.activation) * u[e];
    store8(static_cast<bf16*>(p.out) + t * p.inter + i, o);
  }
}

// ---- logit soft-capping -----------------------------------------------------------------------

__global__ void softcap_kernel(const __grid_constant__ ops::SoftcapParams p) {
  const int64_t total = p.rows * p.cols;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p.x[idx] = tanhf(p.x[idx] / p.cap) * p.cap;
}

// ---- argmax -----------------------------------------------------------------------------------

constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const float* row = logits + blockIdx.x * vocab;
  float best = -FLT_MAX;
  int64_t best_i = vocab;  // NaNs never win; an all-NaN row gives index 0 below
  for (int64_t i = threadIdx.x; i < vocab; i += kArgmaxThreads) {
    const float v = row[i];
    if (v > best || (v == best && i < best_i)) {
      best = v;
      best_i = i;
    }
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, off);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, best_i, off);
    if (ov > best || (ov == best && oi < best_i)) {
      best = ov;
      best_i = oi;
    }
  }
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int64_t si[kArgmaxThreads / 32];
  if (threadIdx.x % 32 == 0) {
    sv[threadIdx.x / 32] = best;
    si[threadIdx.x / 32] = best_i;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) {
      if (sv[w] > best || (sv[w] == best && si[w] < best_i)) {
        best = sv[w];
        best_i = si[w];
      }
    }
    out[blockIdx.x] = static_cast<int32_t>(best_i < vocab ? best_i : 0);
  }
}

int grid_for(int64_t elements, int threads) {
  const int64_t blocks = (elements + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

}  // namespace

void embedding(const ops::EmbeddingParams& p, StreamHandle stream) {
  if (p.num_tokens == 0) return;
  if (p.scale != 1.0f) {
    dispatch_dtype(p.dtype, "embedding", [&](auto tag) {
      using T = decltype(tag);
      launch_pdl(scaled_embedding_kernel<T>, static_cast<unsigned>(p.num_tokens), 256, 0,
                 as_cuda(stream), p.pdl, p);
    });
    return;
  }
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(dtype_size(p.dtype));
  launch_pdl(embedding_kernel, static_cast<unsigned>(p.num_tokens), 256, 0, as_cuda(stream), p.pdl,
             p, row_bytes);
}

void rms_norm(const ops::RmsNormParams& p, StreamHandle stream) {
  if (p.rows == 0) return;
  const int64_t vecs = p.cols / 8;
  const auto grid = static_cast<unsigned>(p.rows);
  cudaStream_t s = as_cuda(stream);
  if (p.dtype == DType::kBF16 && p.cols % 8 == 0 && p.x_stride % 8 == 0 && vecs <= 4 * 512 &&
      aligned16(p.x) && aligned16(p.out) && aligned16(p.weight) &&
      (p.residual == nullptr || aligned16(p.residual)) &&
      (p.residual_out == nullptr || aligned16(p.residual_out))) {
    if (vecs <= 128) {
      launch_pdl(rms_norm_bf16x8_kernel<128, 1>, grid, 128, 0, s, p.pdl, p);
    } else if (vecs <= 512) {
      launch_pdl(rms_norm_bf16x8_kernel<512, 1>, grid, 512, 0, s, p.pdl, p);
    } else if (vecs <= 1024) {
      launch_pdl(rms_norm_bf16x8_kernel<512, 2>, grid, 512, 0, s, p.pdl, p);
    } else {
      launch_pdl(rms_norm_bf16x8_kernel<512, 4>, grid, 512, 0, s, p.pdl, p);
    }
  } else {
    dispatch_dtype(p.dtype, "rms_norm", [&](auto tag) {
      using T = decltype(tag);
      launch_pdl(rms_norm_kernel<T, 512>, grid, 512, 0, s, p.pdl, p);
    });
  }
}

void rope(const ops::RopeParams& p, StreamHandle stream) {
  if (p.num_tokens == 0) return;
  dispatch_dtype(p.dtype, "rope", [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<static_cast<unsigned>(p.num_tokens), 256, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
}

void split_qkv_rope(const ops::SplitQkvRopeParams& p, StreamHandle stream) {
  if (p.num_tokens == 0) return;
  const auto grid = static_cast<unsigned>(p.num_tokens);
  if (p.dtype == DType::kBF16 && p.rotary_dim == p.head_dim && p.head_dim % 16 == 0 &&
      p.head_dim <= 256 && aligned16(p.qkv) && aligned16(p.q) &&
      (p.k_cache != nullptr ? aligned16(p.k_cache) && aligned16(p.v_cache)
                            : aligned16(p.k) && aligned16(p.v))) {
    launch_pdl(split_qkv_rope_bf16x8_kernel, grid, kRopeThreads, 0, as_cuda(stream), p.pdl, p);
  } else {
    dispatch_dtype(p.dtype, "split_qkv_rope", [&](auto tag) {
      using T = decltype(tag);
      launch_pdl(split_qkv_rope_kernel<T>, grid, 512, 0, as_cuda(stream), p.pdl, p);
    });
  }
}

void act_and_mul(const ops::ActAndMulParams& p, StreamHandle stream) {
  if (p.num_tokens == 0) return;
  if (p.dtype == DType::kBF16 && p.inter % 8 == 0 && aligned16(p.x) && aligned16(p.out)) {
    launch_pdl(act_and_mul_bf16x8_kernel, grid_for(p.num_tokens * p.inter / 8, 256), 256, 0,
               as_cuda(stream), p.pdl, p);
  } else {
    dispatch_dtype(p.dtype, "act_and_mul", [&](auto tag) {
      using T = decltype(tag);
      launch_pdl(act_and_mul_kernel<T>, grid_for(p.num_tokens * p.inter, 256), 256, 0,
                 as_cuda(stream), p.pdl, p);
    });
  }
}

void softcap(const ops::SoftcapParams& p, StreamHandle stream) {
  if (p.rows * p.cols == 0) return;
  softcap_kernel<<<grid_for(p.rows * p.cols, 256), 256, 0, as_cuda(stream)>>>(p);
  KV_CUDA_CHECK(cudaGetLastError());
}

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, bool pdl,
                 StreamHandle stream) {
  if (rows == 0) return;
  launch_pdl(argmax_kernel, static_cast<unsigned>(rows), kArgmaxThreads, 0, as_cuda(stream), pdl,
             logits, vocab, out);
}

}  // namespace kvserve::platform::cuda

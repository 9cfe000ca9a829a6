// CUDA kernels of the decoder-layer ops (layer_ops_params.h): bf16 (or f32) activations, f32
// arithmetic, results rounded once. The element type is dispatched to a template at one boundary
// (`dispatch_dtype`); each kernel is memory-bound and moves every byte once where it can.
#include <cuda_bf16.h>

#include <cfloat>
#include <string>

#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"

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
  const int64_t t = blockIdx.x;
  const int32_t id = p.ids[t];
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
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  T* res = p.residual ? static_cast<T*>(p.residual) + r * p.cols : nullptr;
  T* out = static_cast<T*>(p.out) + r * p.cols;
  const T* w = static_cast<const T*>(p.weight);
  float sum = 0.f;
  for (int64_t i = threadIdx.x; i < p.cols; i += THREADS) {
    float v = to_float(x[i]);
    if (res != nullptr) {
      const T s = from_float<T>(v + to_float(res[i]));
      res[i] = s;
      v = to_float(s);
    }
    sum += v * v;
  }
  const float inv = rsqrtf(block_sum<THREADS>(sum) / static_cast<float>(p.cols) + p.eps);
  for (int64_t i = threadIdx.x; i < p.cols; i += THREADS) {
    const float v = res != nullptr ? to_float(res[i]) : to_float(x[i]);
    out[i] = from_float<T>(v * inv * to_float(w[i]));
  }
}

// ---- rotary embedding -------------------------------------------------------------------------

// The rotated value of element d (< rotary_dim) of one head; angle = position * inv_freq in f32,
// as Hugging Face computes it.
template <typename T>
__device__ __forceinline__ float rotated(const T* head, int d, int half, float pos,
                                         const float* inv_freq) {
  const int i = d < half ? d : d - half;
  float s, c;
  sincosf(pos * inv_freq[i], &s, &c);
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
  const int heads = p.num_heads + p.num_kv_heads;
  for (int idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half;
    const int i = idx % half;
    T* x = h < p.num_heads
               ? static_cast<T*>(p.q) + t * p.q_stride + static_cast<int64_t>(h) * p.head_dim
               : static_cast<T*>(p.k) + t * p.k_stride +
                     static_cast<int64_t>(h - p.num_heads) * p.head_dim;
    float s, c;
    sincosf(pos * p.inv_freq[i], &s, &c);
    const float x1 = to_float(x[i]);
    const float x2 = to_float(x[i + half]);
    x[i] = from_float<T>(x1 * c - x2 * s);
    x[i + half] = from_float<T>(x2 * c + x1 * s);
  }
}

// Out of place: one block per token writes q, k (rotated) and v from the fused projection.
template <typename T>
__global__ void split_qkv_rope_kernel(const __grid_constant__ ops::SplitQkvRopeParams p) {
  const int64_t t = blockIdx.x;
  const int hd = p.head_dim;
  const int half = p.rotary_dim / 2;
  const int qd = p.num_heads * hd;
  const int kvd = p.num_kv_heads * hd;
  const float pos = static_cast<float>(p.positions[t]);
  const T* src = static_cast<const T*>(p.qkv) + t * static_cast<int64_t>(qd + 2 * kvd);
  for (int idx = threadIdx.x; idx < qd + 2 * kvd; idx += blockDim.x) {
    const int d = idx % hd;
    const T* head = src + (idx - d);
    if (idx < qd + kvd) {
      const float v =
          d < p.rotary_dim ? rotated(head, d, half, pos, p.inv_freq) : to_float(src[idx]);
      if (idx < qd) {
        static_cast<T*>(p.q)[t * qd + idx] = from_float<T>(v);
      } else {
        static_cast<T*>(p.k)[t * kvd + idx - qd] = from_float<T>(v);
      }
    } else {
      static_cast<T*>(p.v)[t * kvd + idx - qd - kvd] = src[idx];
    }
  }
}

// ---- SiLU and mul -----------------------------------------------------------------------------

template <typename T>
__global__ void silu_and_mul_kernel(const __grid_constant__ ops::SiluAndMulParams p) {
  const int64_t total = p.num_tokens * p.inter;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = idx / p.inter;
    const int64_t i = idx % p.inter;
    const T* row = static_cast<const T*>(p.x) + t * 2 * p.inter;
    const float g = to_float(row[i]);
    const float u = to_float(row[p.inter + i]);
    static_cast<T*>(p.out)[idx] = from_float<T>(g / (1.f + __expf(-g)) * u);
  }
}

// ---- argmax -----------------------------------------------------------------------------------

constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* logits, int64_t vocab, int32_t* out) {
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
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(dtype_size(p.dtype));
  embedding_kernel<<<static_cast<unsigned>(p.num_tokens), 256, 0, as_cuda(stream)>>>(p, row_bytes);
  KV_CUDA_CHECK(cudaGetLastError());
}

void rms_norm(const ops::RmsNormParams& p, StreamHandle stream) {
  if (p.rows == 0) return;
  dispatch_dtype(p.dtype, "rms_norm", [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T, 512><<<static_cast<unsigned>(p.rows), 512, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
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
  dispatch_dtype(p.dtype, "split_qkv_rope", [&](auto tag) {
    using T = decltype(tag);
    split_qkv_rope_kernel<T><<<static_cast<unsigned>(p.num_tokens), 512, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
}

void silu_and_mul(const ops::SiluAndMulParams& p, StreamHandle stream) {
  if (p.num_tokens == 0) return;
  dispatch_dtype(p.dtype, "silu_and_mul", [&](auto tag) {
    using T = decltype(tag);
    silu_and_mul_kernel<T><<<grid_for(p.num_tokens * p.inter, 256), 256, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
}

void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out,
                 StreamHandle stream) {
  if (rows == 0) return;
  argmax_kernel<<<static_cast<unsigned>(rows), kArgmaxThreads, 0, as_cuda(stream)>>>(logits, vocab,
                                                                                     out);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

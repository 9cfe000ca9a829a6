// CUDA kernels of Whisper's layer ops (whisper_ops_params.h): f32, f16 or bf16 storage, f32
// arithmetic, each result rounded once. The element type is dispatched to a template at one
// boundary (`dispatch_dtype`). conv1d is an im2col kernel into the caller's workspace followed by
// a cuBLASLt GEMM on the same stream. (The encoder's attention is varlen_attention.cu.)
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>

#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kNormThreads = 256;

cudaStream_t as_cuda(StreamHandle s) {
  return static_cast<cudaStream_t>(s.ptr);
}

[[noreturn]] void unsupported(const char* op, DType t) {
  detail::check_failed(__FILE__, __LINE__, op, "dtype must be bf16, f16 or f32",
                       std::to_string(static_cast<int>(t)));
}

// The one boundary where a runtime dtype becomes a template parameter.
template <typename F>
void dispatch_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::kBF16:
      return f(__nv_bfloat16{});
    case DType::kF16:
      return f(__half{});
    case DType::kF32:
      return f(float{});
    default:
      unsupported(op, t);
  }
}

int grid_for(int64_t elements, int threads) {
  const int64_t blocks = (elements + threads - 1) / threads;
  return static_cast<int>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

// The sum over the block; every thread gets it. Safe to call repeatedly.
__device__ float block_sum(float v) {
  __shared__ float warp_sums[kNormThreads / 32];
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, off);
  __syncthreads();  // a previous call's readers are done
  if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = v;
  __syncthreads();
  float total = 0.f;
#pragma unroll
  for (int w = 0; w < kNormThreads / 32; ++w)
    total += warp_sums[w];
  return total;
}

// ---- LayerNorm ---------------------------------------------------------------------------------

// One block per row: the mean, then the biased variance of the deviations (two passes, as the
// CPU kernel), then the output. With a residual: residual = x + residual rounded to T first.
// `out` may alias `x`: each thread reads and writes only its own columns.
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    layer_norm_kernel(const __grid_constant__ ops::LayerNormParams p) {
  const int64_t r = blockIdx.x;
  const T* x = static_cast<const T*>(p.x) + r * p.x_stride;
  T* res = p.residual != nullptr ? static_cast<T*>(p.residual) + r * p.cols : nullptr;
  T* out = static_cast<T*>(p.out) + r * p.cols;
  const T* w = static_cast<const T*>(p.weight);
  const T* b = static_cast<const T*>(p.bias);
  const T* src = res != nullptr ? res : x;
  float sum = 0.f;
  for (int64_t c = threadIdx.x; c < p.cols; c += kNormThreads) {
    float v = to_float(x[c]);
    if (res != nullptr) {
      const T s = from_float<T>(v + to_float(res[c]));
      res[c] = s;
      v = to_float(s);
    }
    sum += v;
  }
  const float mean = block_sum(sum) / static_cast<float>(p.cols);
  float sq = 0.f;
  for (int64_t c = threadIdx.x; c < p.cols; c += kNormThreads) {
    const float d = to_float(src[c]) - mean;
    sq += d * d;
  }
  const float inv = rsqrtf(block_sum(sq) / static_cast<float>(p.cols) + p.eps);
  for (int64_t c = threadIdx.x; c < p.cols; c += kNormThreads) {
    const float v = (to_float(src[c]) - mean) * inv * to_float(w[c]);
    out[c] = from_float<T>(b != nullptr ? v + to_float(b[c]) : v);
  }
}

// ---- GELU, position embedding, im2col ----------------------------------------------------------

template <typename T>
__global__ void gelu_kernel(const __grid_constant__ ops::GeluParams p) {
  constexpr float kInvSqrt2 = 0.70710678118654752f;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = to_float(static_cast<const T*>(p.x)[i]);
    static_cast<T*>(p.out)[i] = from_float<T>(0.5f * v * (1.f + erff(v * kInvSqrt2)));
  }
}

template <typename T>
__global__ void add_position_embedding_kernel(
    const __grid_constant__ ops::AddPositionEmbeddingParams p) {
  const int64_t total = p.rows * p.cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / p.cols;
    const int64_t pos = p.positions != nullptr ? p.positions[r] : r;
    if (pos < 0 || pos >= p.num_positions) continue;  // rejected upstream; never read outside
    T* x = static_cast<T*>(p.x) + i;
    const T e = static_cast<const T*>(p.table)[pos * p.cols + i % p.cols];
    *x = from_float<T>(to_float(*x) + to_float(e));
  }
}

// col[t, c * kernel_size + j] = x(t * stride + j - padding, c), zero outside the input.
template <typename T>
__global__ void im2col_kernel(const __grid_constant__ ops::Conv1dParams p, int64_t out_len) {
  const int64_t cols = p.in_channels * p.kernel_size;
  const int64_t total = out_len * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / cols;
    const int64_t c = (i % cols) / p.kernel_size;
    const int64_t j = i % p.kernel_size;
    const int64_t s = t * p.stride + j - p.padding;
    static_cast<T*>(p.workspace)[i] =
        s >= 0 && s < p.in_len ? static_cast<const T*>(p.x)[s * p.x_t_stride + c * p.x_c_stride]
                               : from_float<T>(0.f);
  }
}

}  // namespace

void layer_norm(const ops::LayerNormParams& p, StreamHandle stream) {
  if (p.rows == 0) return;
  KV_CHECK_MSG(p.cols > 0, "layer_norm: no columns");
  dispatch_dtype(p.dtype, "layer_norm", [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(p.rows), kNormThreads, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
}

void gelu(const ops::GeluParams& p, StreamHandle stream) {
  if (p.n == 0) return;
  dispatch_dtype(p.dtype, "gelu", [&](auto tag) {
    using T = decltype(tag);
    gelu_kernel<T><<<grid_for(p.n, 256), 256, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
}

void add_position_embedding(const ops::AddPositionEmbeddingParams& p, StreamHandle stream) {
  if (p.rows == 0) return;
  KV_CHECK_MSG(p.positions != nullptr || p.rows <= p.num_positions,
               "add_position_embedding: more rows than positions");
  dispatch_dtype(p.dtype, "add_position_embedding", [&](auto tag) {
    using T = decltype(tag);
    add_position_embedding_kernel<T>
        <<<grid_for(p.rows * p.cols, 256), 256, 0, as_cuda(stream)>>>(p);
  });
  KV_CUDA_CHECK(cudaGetLastError());
}

void conv1d(const ops::Conv1dParams& p, StreamHandle stream) {
  KV_CHECK_MSG(p.kernel_size >= 1 && p.stride >= 1 && p.padding >= 0, "conv1d: bad geometry");
  const int64_t out_len = p.out_len();
  KV_CHECK_MSG(out_len > 0, "conv1d: the input is shorter than the kernel");
  KV_CHECK_MSG(p.workspace != nullptr, "conv1d: no im2col workspace");
  const int64_t cols = p.in_channels * p.kernel_size;
  dispatch_dtype(p.dtype, "conv1d", [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<grid_for(out_len * cols, 256), 256, 0, as_cuda(stream)>>>(p, out_len);
  });
  KV_CUDA_CHECK(cudaGetLastError());
  // out[out_len, out_channels] = col[out_len, cols] . weight[out_channels, cols]^T (+ bias)
  gemm({.a = p.workspace,
        .b = p.weight,
        .bias = p.bias,
        .c = p.out,
        .dtype = p.dtype,
        .m = out_len,
        .n = p.out_channels,
        .k = cols,
        .lda = cols,
        .ldb = cols,
        .ldc = p.out_channels},
       stream);
}

}  // namespace kvserve::platform::cuda

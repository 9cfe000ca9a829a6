// Skinny GEMM for batch-1 decode: C[m, n] = A[m, k] . B[n, k]^T (+ bias[n]), small m, bf16 or
// f16 inputs, f32 accumulation, output in the input dtype or f32.
//
// At m = 1 a linear layer is a read of its weight: 2 * n * k bytes against 2 * m * n * k FLOPs,
// far below the tensor cores' balance point, so the kernel's only job is to keep HBM busy.
// cuBLASLt's kernels for these shapes are tiled for larger m and leave bandwidth unused (the
// 8B-shape batch-1 decode ran its GEMMs at about 70 % of the copy bandwidth). Here every warp owns
// kRows weight rows and streams them with 16-byte loads, kUnroll loads per row in flight, L1
// bypassed (each weight byte is read once per forward); the activation rows are small and stay in
// L1/L2 (read through the read-only path by every warp). Partial sums are reduced across the warp
// with shuffles. Shapes it cannot take (k or a leading dimension not a multiple of 8, a pointer not
// 16-byte aligned, f32 inputs) go to cuBLASLt: see skinny_gemm_applies.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kvserve/core/check_base.h"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/pdl.cuh"
#include "kvserve/platform/cuda/skinny_gemm.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kWarps = 4;   // per block
constexpr int kRows = 2;    // weight rows (outputs) per warp
constexpr int kUnroll = 4;  // 16-byte loads per row in flight per lane
constexpr int kVec = 8;     // elements per 16-byte load
constexpr int kThreads = kWarps * 32;

// Weights are read once per forward: do not let them evict the activation rows from L1.
__device__ __forceinline__ uint4 load_streaming(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <typename T>
__device__ __forceinline__ float2 to_float2(uint32_t bits);
template <>
__device__ __forceinline__ float2 to_float2<__nv_bfloat16>(uint32_t bits) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bits));
}
template <>
__device__ __forceinline__ float2 to_float2<__half>(uint32_t bits) {
  return __half22float2(*reinterpret_cast<const __half2*>(&bits));
}

// sum += dot(a[0:8], w[0:8]) with a already in f32.
template <typename T>
__device__ __forceinline__ float dot8(const float (&a)[kVec], const uint4& w, float sum) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = to_float2<T>(words[i]);
    sum = fmaf(a[2 * i], f.x, sum);
    sum = fmaf(a[2 * i + 1], f.y, sum);
  }
  return sum;
}

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  return static_cast<float>(x);
}

template <int M, typename T, typename Out, bool kBias>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(ops::GemmParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t{blockIdx.x} * kWarps + warp) * kRows;
  if (n0 >= p.n) return;  // warp-uniform: no shuffle below runs with missing lanes

  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)  // past the last row: re-read it, never store the result
    rows[r] = b + min(n0 + r, p.n - 1) * p.ldb;

  float acc[M][kRows] = {};
  constexpr int64_t kStep = int64_t{32} * kVec;  // elements a warp covers per load
  for (int64_t k0 = int64_t{lane} * kVec; k0 < p.k; k0 += kStep * kUnroll) {
    uint4 w[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * kStep;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        w[u][r] = kk < p.k ? load_streaming(rows[r] + kk) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * kStep;
      if (kk >= p.k) break;
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        const uint4 av = __ldg(reinterpret_cast<const uint4*>(a + mi * p.lda + kk));
        const uint32_t words[4] = {av.x, av.y, av.z, av.w};
        float af[kVec];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = to_float2<T>(words[i]);
          af[2 * i] = f.x;
          af[2 * i + 1] = f.y;
        }
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          acc[mi][r] = dot8<T>(af, w[u][r], acc[mi][r]);
      }
    }
  }

#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float s = acc[mi][r];
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, off);
      acc[mi][r] = s;
    }
  }
  // Lane mi * kRows + r stores (mi, r): the stores of a warp go out together.
  const int mi = lane / kRows;
  const int r = lane % kRows;
  if (mi < M && n0 + r < p.n) {
    float v = 0;
#pragma unroll
    for (int i = 0; i < M; ++i) {
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        if (i == mi && j == r) v = acc[i][j];
      }
    }
    if constexpr (kBias) v += to_float(static_cast<const T*>(p.bias)[n0 + r]);
    static_cast<Out*>(p.c)[mi * p.ldc + n0 + r] = static_cast<Out>(v);
  }
}

template <int M, typename T, typename Out, bool kBias>
void launch(const ops::GemmParams& p, cudaStream_t stream) {
  const int64_t rows_per_block = int64_t{kWarps} * kRows;
  const int64_t blocks = (p.n + rows_per_block - 1) / rows_per_block;
  launch_pdl(skinny_gemm_kernel<M, T, Out, kBias>, static_cast<unsigned>(blocks), kThreads, 0,
             stream, p.pdl, p);
}

// m is a template parameter (the accumulators live in registers); only the m that pays is built
// (skinny_gemm.h: kSkinnyGemmMaxM).
template <typename T, typename Out, bool kBias>
void launch_m(const ops::GemmParams& p, cudaStream_t stream) {
  static_assert(kSkinnyGemmMaxM == 1, "instantiate the new m values here");
  launch<1, T, Out, kBias>(p, stream);
}

template <typename T>
void launch_t(const ops::GemmParams& p, cudaStream_t stream) {
  if (p.c_f32) return launch_m<T, float, false>(p, stream);  // logits: never a bias
  if (p.bias != nullptr) return launch_m<T, T, true>(p, stream);
  return launch_m<T, T, false>(p, stream);
}

bool aligned16(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}

}  // namespace

bool skinny_gemm_applies(const ops::GemmParams& p) {
  return p.m >= 1 && p.m <= kSkinnyGemmMaxM && p.n >= 1 &&
         (p.dtype == DType::kBF16 || p.dtype == DType::kF16) && p.k % kVec == 0 &&
         p.lda % kVec == 0 && p.ldb % kVec == 0 && aligned16(p.a) && aligned16(p.b) &&
         (!p.c_f32 || p.bias == nullptr);
}

void skinny_gemm(const ops::GemmParams& p, StreamHandle stream) {
  if (!skinny_gemm_applies(p)) {
    detail::check_failed(
        __FILE__, __LINE__, "skinny_gemm_applies(p)", "unsupported GEMM",
        "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  }
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  if (p.dtype == DType::kBF16) return launch_t<__nv_bfloat16>(p, s);
  return launch_t<__half>(p, s);
}

}  // namespace kvserve::platform::cuda

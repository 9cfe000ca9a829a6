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
#include "kvserve/platform/cuda/convert.cuh"
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

// One launch's operands: a plain GEMM (ops::GemmParams) or the norm and gated forms of
// ops::NormedLinearParams, in one shape. n counts weight rows (a gated launch's outputs are n / 2).
struct SkinnyArgs {
  const void* a = nullptr;
  const void* b = nullptr;
  const void* bias = nullptr;
  void* c = nullptr;
  int64_t n = 0;
  int64_t k = 0;
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;
  // kNorm: v = a + residual_in (rounded to T), written to residual_out by one warp, and the
  // product taken over v * (norm_weight + weight_offset), scaled by 1 / rms(v) at the end.
  const void* residual_in = nullptr;
  void* residual_out = nullptr;
  const void* norm_weight = nullptr;
  float eps = 0.0f;
  float weight_offset = 0.0f;
  ops::GatedActivation activation = ops::GatedActivation::kSilu;  // kGated
};

template <typename T>
__device__ __forceinline__ void load_f32(const T* p, float (&f)[kVec]) {
  const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
  const uint32_t words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 x = to_float2<T>(words[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}

template <typename T>
__device__ __forceinline__ void store_t(T* p, const float (&f)[kVec]) {
  alignas(16) T v[kVec];
#pragma unroll
  for (int i = 0; i < kVec; ++i)
    v[i] = from_float<T>(f[i]);
  *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(v);
}

template <typename T>
__device__ __forceinline__ float round_to(float x) {
  return to_float(from_float<T>(x));
}

// kNorm and kGated: ops::NormedLinearParams' fused form (its header says what it computes). A
// gated warp's kRows = 2 rows are one output's gate row and up row.
template <int M, typename T, typename Out, bool kBias, bool kNorm, bool kGated>
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const __grid_constant__ SkinnyArgs p) {
  static_assert(!kGated || kRows == 2, "a gated warp reads one gate row and one up row");
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t warp_id = int64_t{blockIdx.x} * kWarps + warp;
  const int64_t outs = kGated ? p.n / 2 : p.n;
  const int64_t n0 = kGated ? warp_id : warp_id * kRows;  // the warp's first output
  if (n0 >= outs) return;  // warp-uniform: no shuffle below runs with missing lanes

  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {  // past the last row: re-read it, never store the result
    rows[r] = kGated ? b + (n0 + r * outs) * p.ldb : b + min(n0 + r, p.n - 1) * p.ldb;
  }
  // The residual stream is written by the one warp that is sure to exist.
  const bool writes_residual = kNorm && p.residual_out != nullptr && warp_id == 0;

  float acc[M][kRows] = {};
  float sumsq[M] = {};
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
      float scale[kVec];  // kNorm: norm_weight + weight_offset
      if constexpr (kNorm) {
        load_f32(static_cast<const T*>(p.norm_weight) + kk, scale);
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          scale[i] += p.weight_offset;
      }
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        float af[kVec];
        load_f32(a + mi * p.lda + kk, af);
        if constexpr (kNorm) {
          if (p.residual_in != nullptr) {
            float rf[kVec];
            load_f32(static_cast<const T*>(p.residual_in) + mi * p.lda + kk, rf);
#pragma unroll
            for (int i = 0; i < kVec; ++i)  // rounded as rms_norm rounds the residual sum
              af[i] = round_to<T>(af[i] + rf[i]);
          }
          if (writes_residual) store_t(static_cast<T*>(p.residual_out) + mi * p.lda + kk, af);
#pragma unroll
          for (int i = 0; i < kVec; ++i) {
            sumsq[mi] = fmaf(af[i], af[i], sumsq[mi]);
            af[i] *= scale[i];
          }
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
    if constexpr (kNorm) {
      float s = sumsq[mi];
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, off);
      const float inv = rsqrtf(s / static_cast<float>(p.k) + p.eps);
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        acc[mi][r] *= inv;
    }
  }
  if constexpr (kGated) {
    // Lane mi stores row mi's output: gate and up rounded to T first, as act_and_mul reads them.
    if (lane < M) {
      float v = 0;
#pragma unroll
      for (int i = 0; i < M; ++i) {
        if (i == lane) {
          v = gate_activation(round_to<T>(acc[i][0]), p.activation) * round_to<T>(acc[i][1]);
        }
      }
      static_cast<Out*>(p.c)[lane * p.ldc + n0] = static_cast<Out>(v);
    }
    return;
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

template <int M, typename T, typename Out, bool kBias, bool kNorm, bool kGated>
void launch(const SkinnyArgs& p, bool pdl, cudaStream_t stream) {
  const int64_t outs_per_block = kGated ? kWarps : int64_t{kWarps} * kRows;
  const int64_t outs = kGated ? p.n / 2 : p.n;
  const int64_t blocks = (outs + outs_per_block - 1) / outs_per_block;
  launch_pdl(skinny_gemm_kernel<M, T, Out, kBias, kNorm, kGated>, static_cast<unsigned>(blocks),
             kThreads, 0, stream, pdl, p);
}

// m is a template parameter (the accumulators live in registers); only the m that pays is built
// (skinny_gemm.h: kSkinnyGemmMaxM).
template <typename T, typename Out, bool kBias, bool kNorm, bool kGated>
void launch_m(const SkinnyArgs& p, int64_t m, bool pdl, cudaStream_t stream) {
  static_assert(kSkinnyGemmMaxM == 1, "instantiate the new m values here");
  (void)m;
  launch<1, T, Out, kBias, kNorm, kGated>(p, pdl, stream);
}

template <typename T>
void launch_t(const ops::GemmParams& p, cudaStream_t stream) {
  const SkinnyArgs args{.a = p.a,
                        .b = p.b,
                        .bias = p.bias,
                        .c = p.c,
                        .n = p.n,
                        .k = p.k,
                        .lda = p.lda,
                        .ldb = p.ldb,
                        .ldc = p.ldc};
  if (p.c_f32) return launch_m<T, float, false, false, false>(args, p.m, p.pdl, stream);
  if (p.bias != nullptr) return launch_m<T, T, true, false, false>(args, p.m, p.pdl, stream);
  return launch_m<T, T, false, false, false>(args, p.m, p.pdl, stream);
}

template <typename T>
void launch_normed(const ops::NormedLinearParams& p, cudaStream_t stream) {
  const SkinnyArgs args{.a = p.x,
                        .b = p.w,
                        .bias = p.bias,
                        .c = p.out,
                        .n = p.n,
                        .k = p.k,
                        .lda = p.k,
                        .ldb = p.k,
                        .ldc = p.gated ? p.n / 2 : p.n,
                        .residual_in = p.residual_in,
                        .residual_out = p.residual_out,
                        .norm_weight = p.norm_weight,
                        .eps = p.eps,
                        .weight_offset = p.weight_offset,
                        .activation = p.activation};
  if (p.gated) return launch_m<T, T, false, true, true>(args, p.m, p.pdl, stream);
  if (p.bias != nullptr) return launch_m<T, T, true, true, false>(args, p.m, p.pdl, stream);
  return launch_m<T, T, false, true, false>(args, p.m, p.pdl, stream);
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

bool skinny_normed_linear_applies(const ops::NormedLinearParams& p) {
  return p.m >= 1 && p.m <= kSkinnyGemmMaxM && p.n >= (p.gated ? 2 : 1) &&
         (p.dtype == DType::kBF16 || p.dtype == DType::kF16) && p.k % kVec == 0 && aligned16(p.x) &&
         aligned16(p.w) && aligned16(p.norm_weight) &&
         (p.residual_in == nullptr || aligned16(p.residual_in)) &&
         (p.residual_out == nullptr || aligned16(p.residual_out)) &&
         (!p.gated || (p.n % 2 == 0 && p.bias == nullptr));
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

void skinny_normed_linear(const ops::NormedLinearParams& p, StreamHandle stream) {
  if (!skinny_normed_linear_applies(p)) {
    detail::check_failed(
        __FILE__, __LINE__, "skinny_normed_linear_applies(p)", "unsupported normed linear",
        "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k));
  }
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  if (p.dtype == DType::kBF16) return launch_normed<__nv_bfloat16>(p, s);
  return launch_normed<__half>(p, s);
}

}  // namespace kvserve::platform::cuda

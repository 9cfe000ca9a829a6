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
//
// The same loop is ops::NormedLinearParams' fused form (skinny_normed_kernel): a decoder's
// residual add and RMSNorm before the qkv / gate_up projection, and the gated activation after
// it, in the one launch, the normed row built once per block of a persistent grid.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "kvserve/core/check_base.h"
#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/pdl.cuh"
#include "kvserve/platform/cuda/skinny_gemm.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kWarps = 4;   // per block
constexpr int kRows = 2;    // weight rows (outputs) per warp
constexpr int kUnroll = 4;  // 16-byte loads per row in flight per lane
constexpr int kVec = 8;     // elements per 16-byte load
constexpr int kThreads = kWarps * 32;
// The normed kernel's activations in shared memory, m * k f32 values: within the 48 KiB a launch
// takes without opting in (a hidden size of up to 12288 at m = 1).
constexpr int64_t kNormedMaxActivations = 48 * 1024 / sizeof(float);

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
  // skinny_normed_kernel's: v = a + residual_in (rounded to T), written to residual_out by block
  // 0, and the product taken over v * (norm_weight + weight_offset), scaled by 1 / rms(v) at the
  // end; a gated kernel's activation.
  const void* residual_in = nullptr;
  void* residual_out = nullptr;
  const void* norm_weight = nullptr;
  float eps = 0.0f;
  float weight_offset = 0.0f;
  ops::GatedActivation activation = ops::GatedActivation::kSilu;
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

// The warp's partial dot products of its kRows weight rows with M activation rows, over the
// lane's slices of k (reduced across the warp by reduce_and_store): acc[mi][r] += act(mi, kk) .
// rows[r][kk : kk + 8], where load_act(mi, kk, f) gives row mi's 8 activations at kk in f32.
template <int M, typename T, typename LoadAct>
__device__ __forceinline__ void stream_rows(const T* const (&rows)[kRows], int64_t k, int lane,
                                            const LoadAct& load_act, float (&acc)[M][kRows]) {
  constexpr int64_t kStep = int64_t{32} * kVec;  // elements a warp covers per load
  for (int64_t k0 = int64_t{lane} * kVec; k0 < k; k0 += kStep * kUnroll) {
    uint4 w[kUnroll][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * kStep;
#pragma unroll
      for (int r = 0; r < kRows; ++r)
        w[u][r] = kk < k ? load_streaming(rows[r] + kk) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t kk = k0 + u * kStep;
      if (kk >= k) break;
#pragma unroll
      for (int mi = 0; mi < M; ++mi) {
        float af[kVec];
        load_act(mi, kk, af);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
          acc[mi][r] = dot8<T>(af, w[u][r], acc[mi][r]);
      }
    }
  }
}

// Sums acc across the warp, scales row mi by scale[mi] and stores the warp's outputs: rows n0 and
// n0 + 1 of C (those below n), or with kGated the one output n0 = act(gate) * up, both rounded to
// T first as act_and_mul reads them. Lane mi * kRows + r stores (mi, r): a warp's stores go out
// together.
template <int M, typename T, typename Out, bool kBias, bool kGated>
__device__ __forceinline__ void reduce_and_store(const SkinnyArgs& p, int64_t n0, int lane,
                                                 float (&acc)[M][kRows], const float (&scale)[M]) {
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float s = acc[mi][r];
#pragma unroll
      for (int off = 16; off > 0; off /= 2)
        s += __shfl_xor_sync(0xffffffffu, s, off);
      acc[mi][r] = s * scale[mi];
    }
  }
  if constexpr (kGated) {
    static_assert(kRows == 2, "a gated warp reads one gate row and one up row");
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
  } else {
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
}

// ops::GemmParams: one warp per kRows output rows, the activations read through L1.
template <int M, typename T, typename Out, bool kBias>
__global__ void __launch_bounds__(kThreads)
    skinny_gemm_kernel(const __grid_constant__ SkinnyArgs p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int lane = threadIdx.x % 32;
  const int64_t n0 = (int64_t{blockIdx.x} * kWarps + threadIdx.x / 32) * kRows;
  if (n0 >= p.n) return;  // warp-uniform: no shuffle below runs with missing lanes
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const T* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)  // past the last row: re-read it, never store the result
    rows[r] = b + min(n0 + r, p.n - 1) * p.ldb;
  float acc[M][kRows] = {};
  stream_rows<M, T>(
      rows, p.k, lane,
      [&](int mi, int64_t kk, float(&f)[kVec]) { load_f32(a + mi * p.lda + kk, f); }, acc);
  float one[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi)
    one[mi] = 1.0f;
  reduce_and_store<M, T, Out, kBias, false>(p, n0, lane, acc, one);
}

// ops::NormedLinearParams' fused form (its header says what it computes), on a persistent grid.
// Each block first builds the normed activations once in shared memory, [M][k] f32:
// v * (norm_weight + weight_offset) with v = a (+ residual_in, rounded to T as rms_norm rounds
// the sum; block 0 writes it to residual_out), and the block's sum of v^2 gives 1 / rms, applied
// to the dot products at the end. Then its warps take outputs in turn (kRows rows each; gated:
// one output's gate row and up row) and stream them as the plain kernel does, the activations
// from shared memory. The weights are never written by a forward pass, so the first rows' fetch
// into L2 is queued before the wait for the preceding kernel (pdl.cuh).
template <int M, typename T, bool kBias, bool kGated>
__global__ void __launch_bounds__(kThreads)
    skinny_normed_kernel(const __grid_constant__ SkinnyArgs p) {
  extern __shared__ float4 normed_smem[];  // [M][k]
  float* act = reinterpret_cast<float*>(normed_smem);
  __shared__ float warp_sumsq[kWarps][M];
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t outs = kGated ? p.n / 2 : p.n;
  constexpr int64_t kOutsPerWarp = kGated ? 1 : kRows;
  const int64_t warp_stride = int64_t{gridDim.x} * kWarps * kOutsPerWarp;
  const T* b = static_cast<const T*>(p.b);
  auto row = [&](int64_t n0, int r) {  // past the last row: re-read it, never store the result
    return kGated ? b + (n0 + r * outs) * p.ldb : b + min(n0 + r, p.n - 1) * p.ldb;
  };
  int64_t n0 = (int64_t{blockIdx.x} * kWarps + warp) * kOutsPerWarp;
  if (n0 < outs) {
    constexpr int64_t kStep = int64_t{32} * kVec;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t kk = int64_t{lane} * kVec + u * kStep;
        if (kk < p.k) asm volatile("prefetch.global.L2 [%0];" ::"l"(row(n0, r) + kk));
      }
    }
  }
  pdl_enter();

  const T* a = static_cast<const T*>(p.a);
  float sumsq[M] = {};
  for (int64_t kk = int64_t{threadIdx.x} * kVec; kk < p.k; kk += int64_t{kThreads} * kVec) {
    float scale[kVec];
    load_f32(static_cast<const T*>(p.norm_weight) + kk, scale);
#pragma unroll
    for (int mi = 0; mi < M; ++mi) {
      float v[kVec];
      load_f32(a + mi * p.lda + kk, v);
      if (p.residual_in != nullptr) {
        float rv[kVec];
        load_f32(static_cast<const T*>(p.residual_in) + mi * p.lda + kk, rv);
#pragma unroll
        for (int i = 0; i < kVec; ++i)
          v[i] = round_to<T>(v[i] + rv[i]);
      }
      if (blockIdx.x == 0 && p.residual_out != nullptr) {
        store_t(static_cast<T*>(p.residual_out) + mi * p.lda + kk, v);
      }
      float out[kVec];
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        sumsq[mi] = fmaf(v[i], v[i], sumsq[mi]);
        out[i] = v[i] * (scale[i] + p.weight_offset);
      }
      float4* dst = reinterpret_cast<float4*>(act + mi * p.k + kk);
      dst[0] = make_float4(out[0], out[1], out[2], out[3]);
      dst[1] = make_float4(out[4], out[5], out[6], out[7]);
    }
  }
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    float s = sumsq[mi];
#pragma unroll
    for (int off = 16; off > 0; off /= 2)
      s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) warp_sumsq[warp][mi] = s;
  }
  __syncthreads();  // also publishes `act`
  float inv_rms[M];
#pragma unroll
  for (int mi = 0; mi < M; ++mi) {
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      s += warp_sumsq[w][mi];
    inv_rms[mi] = rsqrtf(s / static_cast<float>(p.k) + p.eps);
  }

  for (; n0 < outs; n0 += warp_stride) {  // warp-uniform
    const T* rows[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r)
      rows[r] = row(n0, r);
    float acc[M][kRows] = {};
    stream_rows<M, T>(
        rows, p.k, lane,
        [&](int mi, int64_t kk, float(&f)[kVec]) {
          const float4* src = reinterpret_cast<const float4*>(act + mi * p.k + kk);
          const float4 lo = src[0];
          const float4 hi = src[1];
          f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w;
          f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
        },
        acc);
    reduce_and_store<M, T, T, kBias, kGated>(p, n0, lane, acc, inv_rms);
  }
}

template <int M, typename T, typename Out, bool kBias>
void launch(const SkinnyArgs& p, bool pdl, cudaStream_t stream) {
  constexpr int64_t kOutsPerBlock = int64_t{kWarps} * kRows;
  const int64_t blocks = (p.n + kOutsPerBlock - 1) / kOutsPerBlock;
  launch_pdl(skinny_gemm_kernel<M, T, Out, kBias>, static_cast<unsigned>(blocks), kThreads, 0,
             stream, pdl, p);
}

// Blocks of `kernel` with `smem` bytes of dynamic shared memory that one SM holds at once, asked
// of the runtime once per (kernel, smem).
int resident_blocks(const void* kernel, size_t smem) {
  struct Entry {
    const void* kernel;
    size_t smem;
    int blocks;
  };
  static std::mutex mu;
  static std::vector<Entry> cache;
  const std::lock_guard<std::mutex> lock(mu);
  for (const Entry& e : cache) {
    if (e.kernel == kernel && e.smem == smem) return e.blocks;
  }
  int blocks = 0;
  KV_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, kThreads, smem));
  cache.push_back({kernel, smem, blocks});
  return blocks;
}

template <int M, typename T, bool kBias, bool kGated>
void launch_normed(const SkinnyArgs& p, bool pdl, cudaStream_t stream) {
  auto* kernel = skinny_normed_kernel<M, T, kBias, kGated>;
  const size_t smem = sizeof(float) * M * static_cast<size_t>(p.k);
  constexpr int64_t kOutsPerBlock = int64_t{kWarps} * (kGated ? 1 : kRows);
  const int64_t outs = kGated ? p.n / 2 : p.n;
  const int64_t wanted = (outs + kOutsPerBlock - 1) / kOutsPerBlock;
  const int64_t resident = int64_t{resident_blocks(reinterpret_cast<const void*>(kernel), smem)} *
                           multiprocessor_count();
  const int64_t blocks = std::max<int64_t>(1, std::min(wanted, resident));
  launch_pdl(kernel, static_cast<unsigned>(blocks), kThreads, smem, stream, pdl, p);
}

// m is a template parameter (the accumulators live in registers); only the m that pays is built
// (skinny_gemm.h: kSkinnyGemmMaxM), and skinny_*_applies admit no other.
static_assert(kSkinnyGemmMaxM == 1, "instantiate the new m values in launch_t and launch_normed_t");

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
  if (p.c_f32) return launch<1, T, float, false>(args, p.pdl, stream);
  if (p.bias != nullptr) return launch<1, T, T, true>(args, p.pdl, stream);
  return launch<1, T, T, false>(args, p.pdl, stream);
}

template <typename T>
void launch_normed_t(const ops::NormedLinearParams& p, cudaStream_t stream) {
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
  if (p.gated) return launch_normed<1, T, false, true>(args, p.pdl, stream);
  if (p.bias != nullptr) return launch_normed<1, T, true, false>(args, p.pdl, stream);
  return launch_normed<1, T, false, false>(args, p.pdl, stream);
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
         p.m * p.k <= kNormedMaxActivations &&
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

bool fused_normed_linear(const ops::NormedLinearParams& p, StreamHandle stream) {
  if (!skinny_normed_linear_applies(p)) return false;
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  if (p.dtype == DType::kBF16) {
    launch_normed_t<__nv_bfloat16>(p, s);
  } else {
    launch_normed_t<__half>(p, s);
  }
  return true;
}

}  // namespace kvserve::platform::cuda

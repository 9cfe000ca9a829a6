// The KV staging gather / scatter (ops/kv_staging_params.h) and copy_runs
// (ops/copy_runs_params.h): the two device halves of a KV transfer.
//
// kv_staging: one block per (token, layer * 2 + K/V); its threads stride over the token's head
// slice. Equal dtypes copy 4-byte words when the slice's bytes and both addresses allow (every
// real head_dim), else bytes; different dtypes (f32/f16/bf16) convert through f32, dispatched to a
// template pair at one boundary. A slot outside the pool is a bug upstream: trap.
// copy_runs: blocks stride over the runs; a run copies 16-byte words (several loads in flight per
// thread) when its source, destination and length are 16-byte aligned, else bytes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kThreads = 128;

struct RowPointers {
  uint8_t* pool_row;
  uint8_t* staging_row;
};

__device__ __forceinline__ RowPointers row_pointers(const ops::KvStagingParams& p, size_t pool_elem,
                                                    size_t staging_elem) {
  const int32_t t = blockIdx.x;
  const int32_t lv = blockIdx.y;  // layer * 2 + v
  const int32_t layer = lv >> 1;
  const int32_t v = lv & 1;
  const int32_t slot = p.slots[t];
  if (slot < 0 || slot >= p.pool_slots) __trap();
  const size_t row = static_cast<size_t>(p.num_heads) * p.head_dim;
  uint8_t* buffer = static_cast<uint8_t*>(p.pool) +
                    static_cast<int64_t>(v * p.num_layers + layer) * p.buffer_stride;
  RowPointers r;
  r.pool_row =
      buffer + (static_cast<size_t>(slot) * p.pool_heads + p.head_begin) * p.head_dim * pool_elem;
  r.staging_row =
      static_cast<uint8_t*>(p.staging) +
      (static_cast<size_t>(t) * 2 * static_cast<size_t>(p.num_layers) + lv) * row * staging_elem;
  return r;
}

__global__ void kv_staging_copy_kernel(const __grid_constant__ ops::KvStagingParams p, size_t elem,
                                       bool words) {
  const RowPointers r = row_pointers(p, elem, elem);
  const size_t bytes = static_cast<size_t>(p.num_heads) * p.head_dim * elem;
  uint8_t* dst = p.scatter ? r.pool_row : r.staging_row;
  const uint8_t* src = p.scatter ? r.staging_row : r.pool_row;
  if (words) {
    auto* d = reinterpret_cast<uint32_t*>(dst);
    const auto* s = reinterpret_cast<const uint32_t*>(src);
    for (size_t i = threadIdx.x; i < bytes / 4; i += blockDim.x)
      d[i] = s[i];
  } else {
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x)
      dst[i] = src[i];
  }
}

template <typename PoolT, typename StagingT>
__global__ void kv_staging_convert_kernel(const __grid_constant__ ops::KvStagingParams p) {
  const RowPointers r = row_pointers(p, sizeof(PoolT), sizeof(StagingT));
  const int n = p.num_heads * p.head_dim;
  auto* pool = reinterpret_cast<PoolT*>(r.pool_row);
  auto* staged = reinterpret_cast<StagingT*>(r.staging_row);
  for (int i = threadIdx.x; i < n; i += blockDim.x) {
    if (p.scatter) {
      pool[i] = from_float<PoolT>(to_float(staged[i]));
    } else {
      staged[i] = from_float<StagingT>(to_float(pool[i]));
    }
  }
}

template <typename PoolT>
void launch_convert(const ops::KvStagingParams& p, dim3 grid, cudaStream_t stream) {
  switch (p.staging_dtype) {
    case DType::kF32:
      kv_staging_convert_kernel<PoolT, float><<<grid, kThreads, 0, stream>>>(p);
      return;
    case DType::kF16:
      kv_staging_convert_kernel<PoolT, __half><<<grid, kThreads, 0, stream>>>(p);
      return;
    case DType::kBF16:
      kv_staging_convert_kernel<PoolT, __nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
      return;
    default:
      KV_CHECK_MSG(false, "kv_staging: staging dtype must be f32, f16 or bf16 to convert");
  }
}

// Four 16-byte loads in flight per thread before their stores: the source is not written while
// the kernel runs (the sender's KV, after the forward's event), so the loads take the read-only
// path and need not wait for the stores (one load at a time moved ~700 GB/s on an H200).
constexpr int kCopyUnroll = 4;

__device__ __forceinline__ uint4 load_nc(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

__global__ void copy_runs_kernel(const __grid_constant__ ops::CopyRunsParams p) {
  for (int32_t r = blockIdx.x; r < p.num_runs; r += gridDim.x) {
    const uint64_t so = p.runs[3 * r];
    const uint64_t d_o = p.runs[3 * r + 1];
    const uint64_t n = p.runs[3 * r + 2];
    const uint8_t* __restrict__ src = p.src + so;
    uint8_t* __restrict__ dst = p.dst + d_o;
    const bool vec =
        ((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst) | n) & 15) == 0;
    if (vec) {
      const auto* s = reinterpret_cast<const uint4*>(src);
      auto* d = reinterpret_cast<uint4*>(dst);
      const uint64_t words = n / 16;
      const uint64_t stride = blockDim.x;
      for (uint64_t i = threadIdx.x; i < words; i += stride * kCopyUnroll) {
        uint4 v[kCopyUnroll];
#pragma unroll
        for (int u = 0; u < kCopyUnroll; ++u) {
          if (i + u * stride < words) v[u] = load_nc(s + i + u * stride);
        }
#pragma unroll
        for (int u = 0; u < kCopyUnroll; ++u) {
          if (i + u * stride < words) d[i + u * stride] = v[u];
        }
      }
    } else {
      for (uint64_t i = threadIdx.x; i < n; i += blockDim.x)
        dst[i] = src[i];
    }
  }
}

}  // namespace

void kv_staging(const ops::KvStagingParams& p, StreamHandle stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle.ptr);
  const dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_layers * 2));
  if (p.pool_dtype == p.staging_dtype) {
    const size_t elem = dtype_size(p.pool_dtype);
    const size_t bytes = static_cast<size_t>(p.num_heads) * p.head_dim * elem;
    const size_t head_offset = static_cast<size_t>(p.head_begin) * p.head_dim * elem;
    const size_t token_bytes = static_cast<size_t>(p.pool_heads) * p.head_dim * elem;
    const bool words =
        ((bytes | head_offset | token_bytes | static_cast<size_t>(p.buffer_stride) |
          reinterpret_cast<uintptr_t>(p.pool) | reinterpret_cast<uintptr_t>(p.staging)) &
         3) == 0;
    kv_staging_copy_kernel<<<grid, kThreads, 0, stream>>>(p, elem, words);
  } else {
    switch (p.pool_dtype) {
      case DType::kF32:
        launch_convert<float>(p, grid, stream);
        break;
      case DType::kF16:
        launch_convert<__half>(p, grid, stream);
        break;
      case DType::kBF16:
        launch_convert<__nv_bfloat16>(p, grid, stream);
        break;
      default:
        KV_CHECK_MSG(false, "kv_staging: pool dtype must be f32, f16 or bf16 to convert");
    }
  }
  KV_CUDA_CHECK(cudaGetLastError());
}

void copy_runs(const ops::CopyRunsParams& p, StreamHandle stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle.ptr);
  const unsigned blocks = static_cast<unsigned>(p.num_runs < 1024 ? p.num_runs : 1024);
  copy_runs_kernel<<<blocks, 256, 0, stream>>>(p);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

// CUDA KV store: one block per token writes its K and V rows at loc[t].
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <string>

#include "kvserve/platform/cuda/convert.cuh"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/pdl.cuh"

namespace kvserve::platform::cuda {
namespace {

[[noreturn]] void unsupported(const char* what, DType t) {
  detail::check_failed(__FILE__, __LINE__, what, std::string(), std::string(dtype_name(t)));
}

// fp8 storage is a byte; the format is a template tag so one kernel serves both.
struct E4M3 {};
struct E5M2 {};
template <typename Tag>
struct Fp8 {
  __nv_fp8_storage_t bits;
};

template <typename T>
struct Store {
  __device__ __forceinline__ static void put(void* base, int64_t i, float x) {
    static_cast<T*>(base)[i] = from_float<T>(x);
  }
};
template <>
struct Store<Fp8<E4M3>> {
  __device__ __forceinline__ static void put(void* base, int64_t i, float x) {
    static_cast<__nv_fp8_storage_t*>(base)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
  }
};
template <>
struct Store<Fp8<E5M2>> {
  __device__ __forceinline__ static void put(void* base, int64_t i, float x) {
    static_cast<__nv_fp8_storage_t*>(base)[i] = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
  }
};

template <typename Src, typename Dst>
__global__ void store_kv_convert_kernel(const __grid_constant__ ops::KvStoreParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t t = blockIdx.x;
  const int64_t slot = p.loc[t];
  if (slot < 0 || slot >= p.num_slots) __trap();  // a bad slot is a bug upstream
  const Src* k = static_cast<const Src*>(p.k) + t * p.row_elems;
  const Src* v = static_cast<const Src*>(p.v) + t * p.row_elems;
  const int64_t base = slot * p.row_elems;
  for (int64_t i = threadIdx.x; i < p.row_elems; i += blockDim.x) {
    Store<Dst>::put(p.k_cache, base + i, to_float(k[i]) * p.k_scale_inv);
    Store<Dst>::put(p.v_cache, base + i, to_float(v[i]) * p.v_scale_inv);
  }
}

// Same dtype, no scale: a row copy in 16-byte words.
__global__ void store_kv_copy_kernel(const __grid_constant__ ops::KvStoreParams p,
                                     int64_t row_words) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  const int64_t t = blockIdx.x;
  const int64_t slot = p.loc[t];
  if (slot < 0 || slot >= p.num_slots) __trap();
  const uint4* k = static_cast<const uint4*>(p.k) + t * row_words;
  const uint4* v = static_cast<const uint4*>(p.v) + t * row_words;
  uint4* kc = static_cast<uint4*>(p.k_cache) + slot * row_words;
  uint4* vc = static_cast<uint4*>(p.v_cache) + slot * row_words;
  for (int64_t i = threadIdx.x; i < row_words; i += blockDim.x) {
    kc[i] = k[i];
    vc[i] = v[i];
  }
}

template <typename Src, typename Dst>
void launch_convert(const ops::KvStoreParams& p, cudaStream_t stream) {
  const int threads = static_cast<int>(std::min<int64_t>(256, (p.row_elems + 31) / 32 * 32));
  launch_pdl(store_kv_convert_kernel<Src, Dst>, static_cast<unsigned>(p.num_tokens), threads, 0,
             stream, p.pdl, p);
}

template <typename Src>
void dispatch_cache_dtype(const ops::KvStoreParams& p, cudaStream_t stream) {
  switch (p.cache_dtype) {
    case DType::kF32:
      return launch_convert<Src, float>(p, stream);
    case DType::kF16:
      return launch_convert<Src, __half>(p, stream);
    case DType::kBF16:
      return launch_convert<Src, __nv_bfloat16>(p, stream);
    case DType::kFP8E4M3:
      return launch_convert<Src, Fp8<E4M3>>(p, stream);
    case DType::kFP8E5M2:
      return launch_convert<Src, Fp8<E5M2>>(p, stream);
    default:
      unsupported("KV cache dtype", p.cache_dtype);
  }
}

}  // namespace

void store_kv(const ops::KvStoreParams& p, StreamHandle stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle.ptr);
  const size_t row_bytes = static_cast<size_t>(p.row_elems) * dtype_size(p.cache_dtype);
  const bool aligned = reinterpret_cast<uintptr_t>(p.k) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.v) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.k_cache) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(p.v_cache) % 16 == 0 && row_bytes % 16 == 0;
  if (p.src_dtype == p.cache_dtype && p.k_scale_inv == 1.0f && p.v_scale_inv == 1.0f && aligned) {
    const int64_t words = static_cast<int64_t>(row_bytes / 16);
    const int threads = static_cast<int>(std::min<int64_t>(256, (words + 31) / 32 * 32));
    launch_pdl(store_kv_copy_kernel, static_cast<unsigned>(p.num_tokens), threads, 0, stream, p.pdl,
               p, words);
  } else {
    switch (p.src_dtype) {
      case DType::kF32:
        dispatch_cache_dtype<float>(p, stream);
        break;
      case DType::kF16:
        dispatch_cache_dtype<__half>(p, stream);
        break;
      case DType::kBF16:
        dispatch_cache_dtype<__nv_bfloat16>(p, stream);
        break;
      default:
        unsupported("K/V source dtype", p.src_dtype);
    }
  }
}

}  // namespace kvserve::platform::cuda

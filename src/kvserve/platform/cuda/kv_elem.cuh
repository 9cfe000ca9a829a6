// KV cache element types of the attention kernels: bf16, or fp8 (e4m3 / e5m2) bytes that the
// kernels widen after loading. fp8 halves the bytes a bandwidth-bound decode reads; every e4m3 and
// e5m2 value is exactly a bf16 value, so the widening itself loses nothing and the tensor-core
// kernels can feed the same bf16 mma after it. The layer's scale (value = stored * scale) is not
// applied per element: kernels fold k_scale into the softmax scale and v_scale into the output.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

namespace kvserve::platform::cuda {

template <typename KV>
inline constexpr bool kIsFp8 =
    std::is_same_v<KV, __nv_fp8_e4m3> || std::is_same_v<KV, __nv_fp8_e5m2>;

template <typename KV>
inline constexpr __nv_fp8_interpretation_t kFp8Kind =
    std::is_same_v<KV, __nv_fp8_e5m2> ? __NV_E5M2 : __NV_E4M3;

// Two fp8 values (low byte first) -> two floats (hardware cvt to f16x2 on sm_89+, then exact).
template <typename KV>
__device__ __forceinline__ float2 fp8x2_to_float2(uint16_t pair) {
  const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, kFp8Kind<KV>));
  return __half22float2(h);
}

// Eight fp8 values (8 bytes) -> eight bf16 (16 bytes, the layout of an 8-element bf16 chunk).
template <typename KV>
__device__ __forceinline__ uint4 fp8x8_to_bf16x8(uint2 raw) {
  uint4 out;
  const auto* pairs = reinterpret_cast<const uint16_t*>(&raw);
  auto* dst = reinterpret_cast<__nv_bfloat162*>(&out);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    dst[i] = __float22bfloat162_rn(fp8x2_to_float2<KV>(pairs[i]));
  return out;
}

}  // namespace kvserve::platform::cuda

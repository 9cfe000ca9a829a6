// Element conversions of CUDA kernels: every kernel loads 16-bit or f32 storage as f32, computes,
// and rounds once on the store (round to nearest even). And the element functions that two
// kernels must compute alike.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kvserve/platform/ops/layer_ops_params.h"

namespace kvserve::platform::cuda {

__device__ __forceinline__ float to_float(float x) {
  return x;
}
__device__ __forceinline__ float to_float(__half x) {
  return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// The gated MLP's activation of the gate (ops::GatedActivation): SiLU, or GELU's tanh
// approximation as torch computes it (gelu_pytorch_tanh), in f32. Shared by act_and_mul and the
// skinny GEMM's gated epilogue so that both give the same bits.
__device__ __forceinline__ float gate_activation(float g, ops::GatedActivation act) {
  if (act == ops::GatedActivation::kGeluTanh) {
    constexpr float kSqrt2OverPi = 0.7978845608028654f;
    return 0.5f * g * (1.f + tanhf(kSqrt2OverPi * (g + 0.044715f * g * g * g)));
  }
  return g / (1.f + __expf(-g));
}

}  // namespace kvserve::platform::cuda

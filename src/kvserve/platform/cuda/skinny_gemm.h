// The skinny GEMM for small-batch decode (skinny_gemm.cu), beside cuBLASLt in gemm.cpp.
// fmt-free and CUDA-type-free: both the .cu and gemm.cpp include it.
#pragma once

#include <cstdint>

#include "kvserve/platform/handles.h"
#include "kvserve/platform/ops/gemm_params.h"

namespace kvserve::platform::cuda {

// The largest m it serves. Measured on the H200 (8B shape, one decode step; docs/perf/
// 2026-12-01-skinny-gemm.md): m = 1 4.94 ms against cuBLASLt's 5.20, m = 2 even (5.28 / 5.25),
// m = 4 slower (5.94 / 5.33). The kernel is written for any m up to 4; only m = 1 pays.
inline constexpr int64_t kSkinnyGemmMaxM = 1;

// Whether `p` fits the kernel: 1 <= m <= kSkinnyGemmMaxM, bf16 or f16 inputs, k, lda and ldb
// multiples of 8 and A, B 16-byte aligned (16-byte loads), no bias with an f32 output.
bool skinny_gemm_applies(const ops::GemmParams& p);
// Queues it on `stream`; CHECKs skinny_gemm_applies.
void skinny_gemm(const ops::GemmParams& p, StreamHandle stream);

}  // namespace kvserve::platform::cuda

// GEMM for linear layers: C[m, n] = A[m, k] . B[n, k]^T (+ bias[n]), row-major with leading
// dimensions (elements). B is a weight in Hugging Face layout [out_features, in_features].
#pragma once

#include <cstdint>

#include "kvserve/platform/ops/gemm_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

void gemm(platform::Platform& platform, const GemmParams& params,
          platform::StreamHandle stream = {});

namespace cpu {
void gemm(const GemmParams& params);  // OpenBLAS cblas_sgemm, multithreaded
}  // namespace cpu

}  // namespace kvserve::ops

// GEMM for linear layers: C[m, n] = A[m, k] . B[n, k]^T (+ bias[n]), row-major with leading
// dimensions (elements). B is a weight in Hugging Face layout [out_features, in_features].
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

struct GemmParams {
  const void* a = nullptr;     // [m, k], row stride lda
  const void* b = nullptr;     // [n, k], row stride ldb
  const void* bias = nullptr;  // [n] or null
  void* c = nullptr;           // [m, n], row stride ldc
  DType dtype = DType::kF32;   // of a, b, bias and c (the CPU platform computes f32)
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;
};

void gemm(platform::Platform& platform, const GemmParams& params,
          platform::StreamHandle stream = {});

namespace cpu {
void gemm(const GemmParams& params);  // OpenBLAS cblas_sgemm, multithreaded
}  // namespace cpu

}  // namespace kvserve::ops

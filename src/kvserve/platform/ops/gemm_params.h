// Parameters of the linear-layer GEMM (fmt-free: CUDA sources include it).
// C[m, n] = A[m, k] . B[n, k]^T (+ bias[n]), row-major with leading dimensions (elements). B is a
// weight in Hugging Face layout [out_features, in_features]. Accumulation is in f32.
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

struct GemmParams {
  const void* a = nullptr;     // [m, k], row stride lda
  const void* b = nullptr;     // [n, k], row stride ldb
  const void* bias = nullptr;  // [n] or null
  void* c = nullptr;           // [m, n], row stride ldc
  DType dtype = DType::kF32;   // of a, b, bias and c (the CPU platform computes f32)
  bool c_f32 = false;          // c is f32 whatever `dtype` is (logits from bf16 weights; no bias)
  int64_t m = 0;
  int64_t n = 0;
  int64_t k = 0;
  int64_t lda = 0;
  int64_t ldb = 0;
  int64_t ldc = 0;
  // The skinny-M kernel where it applies (CUDA; skinny_gemm.h), else cuBLASLt only; and PDL for
  // it. The op dispatch sets both from the platform's KernelSwitches.
  bool skinny = true;
  bool pdl = true;
};

}  // namespace kvserve::ops

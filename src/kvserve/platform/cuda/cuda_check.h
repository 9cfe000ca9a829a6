// CUDA runtime error checks (fmt-free: CUDA sources include it). Include only inside platform/.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "kvserve/core/check_base.h"

// A CUDA call that must not fail: failure is a bug (or a dead device), reported with file:line.
#define KV_CUDA_CHECK(call)                                                                      \
  do {                                                                                           \
    const cudaError_t kv_cuda_err_ = (call);                                                     \
    if (kv_cuda_err_ != cudaSuccess) [[unlikely]] {                                              \
      ::kvserve::detail::check_failed(__FILE__, __LINE__, #call, cudaGetErrorName(kv_cuda_err_), \
                                      cudaGetErrorString(kv_cuda_err_));                         \
    }                                                                                            \
  } while (0)

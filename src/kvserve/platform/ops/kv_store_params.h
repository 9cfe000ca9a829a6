// Parameters of the KV store op (fmt-free: CUDA sources include it).
//   k_cache[loc[t]] = k[t] * k_scale_inv   (and the same for V), t < num_tokens
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

struct KvStoreParams {
  const void* k = nullptr;  // [num_tokens, row_elems] in src_dtype
  const void* v = nullptr;  // [num_tokens, row_elems] in src_dtype
  DType src_dtype = DType::kF32;
  void* k_cache = nullptr;  // [num_slots, row_elems] in cache_dtype
  void* v_cache = nullptr;  // [num_slots, row_elems] in cache_dtype
  DType cache_dtype = DType::kF32;
  const int32_t* loc = nullptr;  // [num_tokens] destination slots, on the same device
  int64_t num_tokens = 0;
  int64_t row_elems = 0;  // num_kv_heads * head_dim
  int64_t num_slots = 0;  // rows of k_cache / v_cache, for bounds checks
  float k_scale_inv = 1.0f;
  float v_scale_inv = 1.0f;
  // Programmatic dependent launch (platform/cuda/pdl.cuh); the op dispatch sets it from the
  // platform's KernelSwitches::pdl.
  bool pdl = true;
};

}  // namespace kvserve::ops

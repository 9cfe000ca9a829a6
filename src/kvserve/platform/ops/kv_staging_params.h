// Parameters of the KV staging ops (fmt-free: CUDA sources include it): moving the K and V of a
// list of token slots between a paged KV pool and a contiguous staging region, the two halves of a
// KV transfer between pools whose layouts differ (page size, KV dtype, head slice: issue 18, seed
// 002's staging buffer).
//
// The pool: 2 * num_layers buffers, K of every layer then V of every layer
// (MHATokenToKVPool), buffer b at pool + b * buffer_stride bytes, each [slots, pool_heads,
// head_dim] of pool_dtype. The staging region: token-major, then layer, then K before V, then
// the head slice:
//   staging[((t * num_layers + layer) * 2 + v) * num_heads * head_dim + h * head_dim + d]
// of staging_dtype, for pool heads [head_begin, head_begin + num_heads). Token-major, so tokens
// [a, b) of a prompt are one contiguous piece wherever the prompt is cut into chunks.
//   gather  (scatter false): staging[t, layer, v, h, d] = pool[v * L + layer][slots[t],
//                            head_begin + h, d]
//   scatter (scatter true):  pool[v * L + layer][slots[t], head_begin + h, d] =
//                            staging[t, layer, v, h, d]
// Equal dtypes copy bytes (fp8 included); otherwise both are f32, f16 or bf16 and each element
// goes through f32, rounded to nearest even once.
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

struct KvStagingParams {
  void* pool = nullptr;
  int64_t buffer_stride = 0;  // bytes between two buffers of the pool
  int64_t pool_slots = 0;     // rows per buffer (for bounds checks)
  int32_t num_layers = 0;
  int32_t pool_heads = 0;
  int32_t head_dim = 0;
  DType pool_dtype = DType::kBF16;
  int32_t head_begin = 0;
  int32_t num_heads = 0;
  void* staging = nullptr;  // device memory, or pinned host memory the device can reach
  DType staging_dtype = DType::kBF16;
  const int32_t* slots = nullptr;  // [num_tokens], memory the op's device reads
  int32_t num_tokens = 0;
  bool scatter = false;
};

}  // namespace kvserve::ops

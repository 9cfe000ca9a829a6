#include "kvserve/platform/ops/kv_staging.h"

#include <cstring>

#include "kvserve/core/check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/dispatch.h"

namespace kvserve::ops {
namespace {

bool is_16_or_32(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16;
}

void check_params(const KvStagingParams& p) {
  KV_CHECK(kv_staging_converts(p.pool_dtype, p.staging_dtype), "kv_staging: {} <-> {}",
           dtype_name(p.pool_dtype), dtype_name(p.staging_dtype));
  KV_CHECK(p.num_layers > 0 && p.head_dim > 0 && p.num_heads > 0 && p.head_begin >= 0 &&
               p.head_begin + p.num_heads <= p.pool_heads,
           "kv_staging: heads [{}, {}) of {}", p.head_begin, p.head_begin + p.num_heads,
           p.pool_heads);
  KV_CHECK(p.num_tokens >= 0);
}

}  // namespace

bool kv_staging_converts(DType from, DType to) {
  return from == to || (is_16_or_32(from) && is_16_or_32(to));
}

namespace cpu {

void kv_staging(const KvStagingParams& p) {
  check_params(p);
  const size_t pool_elem = dtype_size(p.pool_dtype);
  const size_t staging_elem = dtype_size(p.staging_dtype);
  const size_t row = static_cast<size_t>(p.num_heads) * p.head_dim;  // elements per token
  const size_t pool_token_bytes = static_cast<size_t>(p.pool_heads) * p.head_dim * pool_elem;
  const size_t head_offset = static_cast<size_t>(p.head_begin) * p.head_dim * pool_elem;
  for (int32_t layer = 0; layer < p.num_layers; ++layer) {
    for (int32_t v = 0; v < 2; ++v) {
      auto* buffer = static_cast<uint8_t*>(p.pool) + (v * p.num_layers + layer) * p.buffer_stride;
      const size_t lv = static_cast<size_t>(layer) * 2 + static_cast<size_t>(v);
      for (int32_t t = 0; t < p.num_tokens; ++t) {
        const int32_t slot = p.slots[t];
        KV_CHECK(slot >= 0 && slot < p.pool_slots, "kv_staging: slot {} of {}", slot, p.pool_slots);
        uint8_t* pool_row = buffer + static_cast<size_t>(slot) * pool_token_bytes + head_offset;
        uint8_t* staging_row =
            static_cast<uint8_t*>(p.staging) +
            (static_cast<size_t>(t) * 2 * static_cast<size_t>(p.num_layers) + lv) * row *
                staging_elem;
        if (p.pool_dtype == p.staging_dtype) {
          if (p.scatter) {
            std::memcpy(pool_row, staging_row, row * pool_elem);
          } else {
            std::memcpy(staging_row, pool_row, row * pool_elem);
          }
        } else if (p.scatter) {
          convert_elements(staging_row, p.staging_dtype, pool_row, p.pool_dtype, row);
        } else {
          convert_elements(pool_row, p.pool_dtype, staging_row, p.staging_dtype, row);
        }
      }
    }
  }
}

}  // namespace cpu

void kv_staging(platform::Platform& platform, const KvStagingParams& params,
                platform::StreamHandle stream) {
  if (params.num_tokens == 0) return;
  check_params(params);
  dispatch(platform, params, stream, &cpu::kv_staging, &platform::cuda::kv_staging);
}

}  // namespace kvserve::ops

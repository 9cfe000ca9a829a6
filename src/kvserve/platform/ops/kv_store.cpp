#include "kvserve/platform/ops/kv_store.h"

#include "kvserve/platform/cuda/ops.h"

namespace kvserve::ops {

namespace cpu {

void store_kv(const KvStoreParams& p) {
  KV_CHECK(is_floating(p.src_dtype) && !is_float8(p.src_dtype), "K/V source dtype {}",
           dtype_name(p.src_dtype));
  KV_CHECK(is_floating(p.cache_dtype), "KV cache dtype {}", dtype_name(p.cache_dtype));
  const size_t src_row = static_cast<size_t>(p.row_elems) * dtype_size(p.src_dtype);
  const size_t dst_row = static_cast<size_t>(p.row_elems) * dtype_size(p.cache_dtype);
  const auto* k = static_cast<const uint8_t*>(p.k);
  const auto* v = static_cast<const uint8_t*>(p.v);
  auto* kc = static_cast<uint8_t*>(p.k_cache);
  auto* vc = static_cast<uint8_t*>(p.v_cache);
  for (int64_t t = 0; t < p.num_tokens; ++t) {
    const int64_t slot = p.loc[t];
    KV_CHECK(slot >= 0 && slot < p.num_slots, "token {}: slot {} outside the pool of {}", t, slot,
             p.num_slots);
    convert_elements(k + t * src_row, p.src_dtype, kc + slot * dst_row, p.cache_dtype, p.row_elems,
                     p.k_scale_inv);
    convert_elements(v + t * src_row, p.src_dtype, vc + slot * dst_row, p.cache_dtype, p.row_elems,
                     p.v_scale_inv);
  }
}

}  // namespace cpu

void store_kv(platform::Platform& platform, const KvStoreParams& params,
              platform::StreamHandle stream) {
  if (params.num_tokens == 0) return;
  switch (platform.device().kind) {
    case DeviceKind::kCpu:
      cpu::store_kv(params);
      return;
    case DeviceKind::kCuda:
      if (params.pdl != platform.kernel_switches().pdl) {
        KvStoreParams q = params;
        q.pdl = platform.kernel_switches().pdl;
        platform::cuda::store_kv(q, platform.resolve(stream));
        return;
      }
      platform::cuda::store_kv(params, platform.resolve(stream));
      return;
  }
}

}  // namespace kvserve::ops

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "kvserve/attention/backend.h"
#include "kvserve/attention/capabilities.h"
#include "kvserve/attention/cpu_backends.h"
#include "kvserve/attention/cuda_backends.h"

namespace kvserve::attention {

Result<std::unique_ptr<AttentionBackend>> create_attention_backend(AttentionBackendKind kind,
                                                                   platform::Platform& platform) {
  const AttentionCapabilities& c = capabilities(kind);
  const Device device = platform.device();
  if (c.device != device.kind) {
    return make_status(StatusCode::kUnimplemented,
                       "attention backend '{}' runs on {}, not on {} (available: {})", c.name,
                       c.device == DeviceKind::kCpu ? "the CPU" : "CUDA", device.to_string(),
                       fmt::join(attention_backend_names(device.kind), ", "));
  }
  switch (kind) {
    case AttentionBackendKind::kCpu:
      return make_cpu_paged_backend(platform);
    case AttentionBackendKind::kNative:
      return make_native_backend(platform);
    case AttentionBackendKind::kCudaPaged:
      return make_cuda_paged_backend(platform);
    case AttentionBackendKind::kCudaRagged:
      return make_cuda_ragged_backend(platform);
  }
  return invalid_argument("unknown attention backend kind {}", static_cast<int>(kind));
}

Result<std::unique_ptr<AttentionBackend>> create_attention_backend(std::string_view name,
                                                                   platform::Platform& platform) {
  KV_ASSIGN_OR_RETURN(const AttentionBackendKind kind, parse_attention_backend(name));
  return create_attention_backend(kind, platform);
}

void save_kv_to_pool(const AttentionIO& io, const AttentionLayer& layer,
                     const mem::ForwardBatch& batch) {
  if (io.k == nullptr) return;  // cross-attention over an already cached encoder
  const std::vector<int32_t>& slots =
      layer.is_cross_attention ? batch.encoder_out_cache_loc : batch.out_cache_loc;
  const auto n = static_cast<int64_t>(slots.size());
  if (n == 0) return;
  const Device dev = batch.kv_pool->k_buffer(0).device();
  // The out_cache_loc vector is host memory; on the CPU platform it is also device memory.
  KV_CHECK(dev.is_cpu(), "save_kv_to_pool: host loc on {}", dev.to_string());
  const TensorView loc(const_cast<int32_t*>(slots.data()), DType::kI32, {n}, dev);
  const TensorView k(const_cast<void*>(io.k), io.dtype, {n, layer.num_kv_heads, layer.head_dim},
                     dev);
  const TensorView v(const_cast<void*>(io.v), io.dtype, {n, layer.num_kv_heads, layer.head_dim},
                     dev);
  batch.kv_pool->set_kv_buffer(layer.layer_id, loc, k, v);
}

}  // namespace kvserve::attention

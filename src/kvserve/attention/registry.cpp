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

namespace {

// Stores `n` new K/V rows of the layer at `slots` (platform memory).
void store_rows(const AttentionIO& io, const AttentionLayer& layer, const mem::ForwardBatch& batch,
                const int32_t* slots, int64_t n) {
  const Device dev = batch.kv_pool->k_buffer(0).device();
  const TensorView loc(const_cast<int32_t*>(slots), DType::kI32, {n}, dev);
  const TensorView k(const_cast<void*>(io.k), io.dtype, {n, layer.num_kv_heads, layer.head_dim},
                     dev);
  const TensorView v(const_cast<void*>(io.v), io.dtype, {n, layer.num_kv_heads, layer.head_dim},
                     dev);
  batch.kv_pool->set_kv_buffer(layer.layer_id, loc, k, v);
}

// The new K/V rows of the layer in this forward (cross-attention over a cached encoder: none).
int64_t new_kv_rows(const AttentionLayer& layer, const mem::ForwardBatch& batch) {
  return static_cast<int64_t>(layer.is_cross_attention ? batch.encoder_out_cache_loc.size()
                                                       : batch.out_cache_loc.size());
}

}  // namespace

void save_kv_to_pool(const AttentionIO& io, const AttentionLayer& layer,
                     const mem::ForwardBatch& batch) {
  const int64_t n = new_kv_rows(layer, batch);
  if (n == 0) return;
  // The out_cache_loc vector is host memory; on the CPU platform it is also device memory.
  KV_CHECK(batch.kv_pool->k_buffer(0).device().is_cpu(), "save_kv_to_pool: host slots on {}",
           batch.kv_pool->k_buffer(0).device().to_string());
  store_rows(
      io, layer, batch,
      layer.is_cross_attention ? batch.encoder_out_cache_loc.data() : batch.out_cache_loc.data(),
      n);
}

void store_kv(const AttentionBackend& backend, const AttentionIO& io, const AttentionLayer& layer,
              const mem::ForwardBatch& batch) {
  if (backend.kv_store() != KvStore::kCaller) return;
  const int64_t n = new_kv_rows(layer, batch);
  if (n == 0) return;
  const int32_t* slots = backend.store_slots(layer.is_cross_attention);
  KV_CHECK(slots != nullptr, "{} stores through the caller but exposes no slots", backend.name());
  store_rows(io, layer, batch, slots, n);
}

}  // namespace kvserve::attention

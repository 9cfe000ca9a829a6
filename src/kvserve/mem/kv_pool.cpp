#include "kvserve/mem/kv_pool.h"

#include "kvserve/platform/ops/kv_store.h"

namespace kvserve::mem {

size_t KvPoolConfig::bytes_per_token() const {
  return 2ull * num_layers * num_kv_heads * head_dim * dtype_size(dtype);
}

Result<std::unique_ptr<MHATokenToKVPool>> MHATokenToKVPool::create(platform::Platform& platform,
                                                                   const KvPoolConfig& config) {
  if (config.num_layers <= 0 || config.num_kv_heads <= 0 || config.head_dim <= 0 ||
      config.size <= 0 || config.page_size <= 0) {
    return invalid_argument("KV pool: layers {}, kv heads {}, head_dim {}, size {}, page size {}",
                            config.num_layers, config.num_kv_heads, config.head_dim, config.size,
                            config.page_size);
  }
  if (!is_floating(config.dtype)) {
    return invalid_argument("KV cache dtype {} is not a floating type", dtype_name(config.dtype));
  }
  const size_t bytes =
      config.bytes_per_token() * static_cast<size_t>(config.size + config.page_size);
  KV_ASSIGN_OR_RETURN(Buffer storage, platform.allocate_buffer(bytes));
  platform.memset(storage.data(), 0, bytes);
  platform.synchronize();
  return std::unique_ptr<MHATokenToKVPool>(
      new MHATokenToKVPool(platform, config, std::move(storage)));
}

MHATokenToKVPool::MHATokenToKVPool(platform::Platform& platform, const KvPoolConfig& config,
                                   Buffer storage)
    : platform_(&platform),
      config_(config),
      storage_(std::move(storage)),
      k_scale_(config.num_layers, 1.0f),
      v_scale_(config.num_layers, 1.0f) {}

size_t MHATokenToKVPool::slot_bytes() const {
  return static_cast<size_t>(config_.num_kv_heads) * config_.head_dim * dtype_size(config_.dtype);
}

void* MHATokenToKVPool::buffer(bool value, int32_t layer) const {
  KV_CHECK(layer >= 0 && layer < config_.num_layers, "layer {} of {}", layer, config_.num_layers);
  const size_t layer_bytes = slot_bytes() * static_cast<size_t>(num_slots());
  const size_t index = (value ? config_.num_layers : 0) + static_cast<size_t>(layer);
  return static_cast<uint8_t*>(storage_.data()) + index * layer_bytes;
}

TensorView MHATokenToKVPool::k_buffer(int32_t layer) const {
  return TensorView(buffer(false, layer), config_.dtype,
                    {num_slots(), config_.num_kv_heads, config_.head_dim}, storage_.device());
}

TensorView MHATokenToKVPool::v_buffer(int32_t layer) const {
  return TensorView(buffer(true, layer), config_.dtype,
                    {num_slots(), config_.num_kv_heads, config_.head_dim}, storage_.device());
}

void MHATokenToKVPool::set_kv_buffer(int32_t layer, const TensorView& loc, const TensorView& k,
                                     const TensorView& v, platform::StreamHandle stream) {
  const Device dev = storage_.device();
  KV_CHECK(loc.device() == dev && k.device() == dev && v.device() == dev,
           "set_kv_buffer: tensors on {} / {} / {}, pool on {}", loc.device().to_string(),
           k.device().to_string(), v.device().to_string(), dev.to_string());
  KV_CHECK(loc.dtype() == DType::kI32 && loc.ndim() == 1, "loc must be a 1-d i32 tensor");
  const int64_t n = loc.dim(0);
  const int64_t row = static_cast<int64_t>(config_.num_kv_heads) * config_.head_dim;
  KV_CHECK(k.numel() == n * row && v.numel() == n * row && k.dtype() == v.dtype(),
           "set_kv_buffer: k {} v {} for {} slots of {} heads x {}", k.shape_string(),
           v.shape_string(), n, config_.num_kv_heads, config_.head_dim);
  ops::KvStoreParams p{
      .k = k.data(),
      .v = v.data(),
      .src_dtype = k.dtype(),
      .k_cache = buffer(false, layer),
      .v_cache = buffer(true, layer),
      .cache_dtype = config_.dtype,
      .loc = loc.data_as<const int32_t>(),
      .num_tokens = n,
      .row_elems = row,
      .num_slots = num_slots(),
      .k_scale_inv = 1.0f / k_scale_[layer],
      .v_scale_inv = 1.0f / v_scale_[layer],
  };
  ops::store_kv(*platform_, p, stream);
}

void MHATokenToKVPool::set_kv_scales(int32_t layer, float k_scale, float v_scale) {
  KV_CHECK(layer >= 0 && layer < config_.num_layers, "layer {}", layer);
  KV_CHECK(k_scale > 0 && v_scale > 0, "KV scales must be positive: {} {}", k_scale, v_scale);
  k_scale_[layer] = k_scale;
  v_scale_[layer] = v_scale;
}

std::vector<KvBufferInfo> MHATokenToKVPool::get_contiguous_buf_infos() const {
  std::vector<KvBufferInfo> infos;
  const size_t layer_bytes = slot_bytes() * static_cast<size_t>(num_slots());
  for (const bool value : {false, true}) {
    for (int32_t l = 0; l < config_.num_layers; ++l) {
      infos.push_back({buffer(value, l), layer_bytes, slot_bytes() * config_.page_size});
    }
  }
  return infos;
}

}  // namespace kvserve::mem

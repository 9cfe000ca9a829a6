#include "kvserve/attention/device_metadata.h"

#include <algorithm>
#include <cstring>

namespace kvserve::attention {

int64_t DeviceMetadata::append(std::span<const int32_t> values) {
  const auto at = static_cast<int64_t>(host_.size());
  host_.insert(host_.end(), values.begin(), values.end());
  return at;
}

int64_t DeviceMetadata::append_zeros(int64_t n) {
  const auto at = static_cast<int64_t>(host_.size());
  host_.resize(host_.size() + static_cast<size_t>(n), 0);
  return at;
}

void DeviceMetadata::upload() {
  const size_t bytes = host_.size() * sizeof(int32_t);
  if (bytes > buffer_.bytes() || buffer_.empty()) {
    auto grown = platform_.allocate_buffer(std::max({bytes, buffer_.bytes() * 2, size_t{256}}));
    KV_CHECK(grown.is_ok(), "{} metadata of {} bytes: {}", owner_, bytes,
             grown.status().to_string());
    buffer_ = std::move(*grown);
  }
  platform_.copy(buffer_.data(), host_.data(), bytes, platform::CopyKind::kHostToDevice);
  device_ = buffer_.data_as<const int32_t>();
}

int64_t DeviceMetadata::stage(int32_t* host, int64_t capacity, const int32_t* device) {
  const int64_t n = size();
  KV_CHECK(n <= capacity, "{} graph metadata: {} integers for a buffer of {}", owner_, n, capacity);
  std::memcpy(host, host_.data(), static_cast<size_t>(n) * sizeof(int32_t));
  device_ = device;
  return n;
}

void store_kv_from_device(platform::Platform& platform, const AttentionIO& io,
                          const AttentionLayer& layer, const model::ForwardBatch& batch,
                          const int32_t* loc, const int32_t* encoder_loc) {
  if (io.k == nullptr) return;  // cross-attention over an already cached encoder
  const bool cross = layer.is_cross_attention;
  const auto n =
      static_cast<int64_t>(cross ? batch.encoder_out_cache_loc.size() : batch.out_cache_loc.size());
  if (n == 0) return;
  const Device dev = platform.device();
  const TensorView slots(const_cast<int32_t*>(cross ? encoder_loc : loc), DType::kI32, {n}, dev);
  const TensorView k(const_cast<void*>(io.k), io.dtype, {n, layer.num_kv_heads, layer.head_dim},
                     dev);
  const TensorView v(const_cast<void*>(io.v), io.dtype, {n, layer.num_kv_heads, layer.head_dim},
                     dev);
  batch.kv_pool->set_kv_buffer(layer.layer_id, slots, k, v);
}

}  // namespace kvserve::attention

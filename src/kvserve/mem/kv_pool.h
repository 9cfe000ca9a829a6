// MHATokenToKVPool: the K and V buffers of every layer (seed 000; sglang-notes §1.2-1.3).
//
// Per layer, K and V are [size + page_size, num_kv_heads, head_dim] in the cache dtype; slot s of
// a layer is row s. Page 0 (slots [0, page_size)) is the padding page: padded batch entries
// write there and nothing reads it as data. Storage lives on the platform the pool was created
// for, in one allocation: all layers' K, then all layers' V. fp8 caches store bytes and keep a
// per-layer scale (stored = value / scale; attention multiplies back).
#pragma once

#include <memory>
#include <vector>

#include "kvserve/core/tensor.h"
#include "kvserve/platform/platform.h"

namespace kvserve::mem {

struct KvPoolConfig {
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int64_t size = 0;  // usable slots (the allocator's size)
  int32_t page_size = 1;
  DType dtype = DType::kBF16;

  // Bytes of K and V of one token over all layers: what one slot costs.
  size_t bytes_per_token() const;
};

// One contiguous region of the pool, for registering with a KV transfer engine.
struct KvBufferInfo {
  void* ptr = nullptr;
  size_t bytes = 0;
  size_t page_bytes = 0;  // one page of this layer: slot bytes * page_size
};

class MHATokenToKVPool {
 public:
  // Allocates and zeroes the buffers; kOutOfMemory when the platform cannot hold them.
  static Result<std::unique_ptr<MHATokenToKVPool>> create(platform::Platform& platform,
                                                          const KvPoolConfig& config);

  const KvPoolConfig& config() const { return config_; }
  int64_t num_slots() const { return config_.size + config_.page_size; }  // rows per buffer
  size_t slot_bytes() const;  // one token, one layer, K or V
  platform::Platform& platform() const { return *platform_; }

  TensorView k_buffer(int32_t layer) const;
  TensorView v_buffer(int32_t layer) const;

  // Writes k[t], v[t] (each [num_kv_heads, head_dim], any float dtype but fp8) to slot loc[t] of
  // `layer`, converting to the cache dtype (dividing by the layer's scale for fp8). `loc` is i32
  // and every tensor is on this pool's device.
  void set_kv_buffer(int32_t layer, const TensorView& loc, const TensorView& k, const TensorView& v,
                     platform::StreamHandle stream = {});

  void set_kv_scales(int32_t layer, float k_scale, float v_scale);
  float k_scale(int32_t layer) const { return k_scale_.at(layer); }
  float v_scale(int32_t layer) const { return v_scale_.at(layer); }

  // K of every layer, then V of every layer.
  std::vector<KvBufferInfo> get_contiguous_buf_infos() const;

 private:
  MHATokenToKVPool(platform::Platform& platform, const KvPoolConfig& config, Buffer storage);
  void* buffer(bool value, int32_t layer) const;

  platform::Platform* platform_;
  KvPoolConfig config_;
  Buffer storage_;
  std::vector<float> k_scale_;
  std::vector<float> v_scale_;
};

}  // namespace kvserve::mem

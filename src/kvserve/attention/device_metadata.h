// What the device attention backends (cuda-paged, cuda-ragged) share: the per-forward metadata
// (store slots, page or slot lists, lengths) built on the host as one int32 vector and sent to
// the device in one copy, and the store of a layer's new K/V through slots already there.
//
// Eager forwards upload into a device buffer of the backend's that grows geometrically. A decode
// graph (model/decode_graph_runner.h) instead stages the same integers into the caller's fixed
// buffer: stage() copies them into the caller's host staging, and device() then points at the
// caller's device twin of it, which the caller fills (one copy for the model's integers and the
// backend's) before the kernels run.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/core/tensor.h"
#include "kvserve/platform/platform.h"

namespace kvserve::attention {

class DeviceMetadata {
 public:
  DeviceMetadata(platform::Platform& platform, std::string owner)
      : platform_(platform), owner_(std::move(owner)) {}

  // Starts a new forward's integers (the device side keeps the previous ones until upload/stage).
  void clear() { host_.clear(); }
  // Appends `values` and returns their offset.
  int64_t append(std::span<const int32_t> values);
  // Appends `n` zeros and returns their offset (filled through host()).
  int64_t append_zeros(int64_t n);
  std::vector<int32_t>& host() { return host_; }
  int64_t size() const { return static_cast<int64_t>(host_.size()); }

  // Eager: one copy into the owned device buffer (grown to twice its size when short).
  void upload();
  // Graph: copies the integers into `host[0, size())` (CHECKing capacity) and points device() at
  // `device`, the caller's buffer that will hold them; returns size().
  int64_t stage(int32_t* host, int64_t capacity, const int32_t* device);

  // The device address of the integer at `offset`, after upload() or stage().
  const int32_t* device(int64_t offset = 0) const { return device_ + offset; }

 private:
  platform::Platform& platform_;
  std::string owner_;  // for errors: "cuda-paged"
  std::vector<int32_t> host_;
  Buffer buffer_;
  const int32_t* device_ = nullptr;
};

// Stores the layer's new K/V (self-attention: at batch.out_cache_loc, whose device copy is `loc`;
// cross-attention K/V computed in this forward: at batch.encoder_out_cache_loc, `encoder_loc`).
// Nothing for cross-attention over an already cached encoder (io.k == nullptr).
void store_kv_from_device(platform::Platform& platform, const AttentionIO& io,
                          const AttentionLayer& layer, const model::ForwardBatch& batch,
                          const int32_t* loc, const int32_t* encoder_loc);

}  // namespace kvserve::attention

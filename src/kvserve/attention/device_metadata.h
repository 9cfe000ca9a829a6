// What the device attention backends (cuda-paged, cuda-ragged) share: the per-forward metadata
// (store slots, page or slot lists, lengths) built on the host as one int32 vector and sent to
// the device in one copy, and the req_to_token mirror's write.
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
#include "kvserve/mem/device_req_to_token.h"
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

  // Eager: one copy into the owned device buffer (grown to twice its size when short; running
  // out of device memory is kOutOfMemory, and nothing is copied).
  Status upload();
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

// One forward's write into the device mirror of req_to_token (mem/device_req_to_token.h): the
// offsets, inside a DeviceMetadata, of its ops::WriteReqToTokenParams arrays. Request b writes
// [prefix | new] into its row: new slots (its out_cache_loc segment, already on the device) from
// position kv_start + seq_len - extend_len; for an extend, the prefix is the host row's
// [0, that position) (the encoder region and any cached prefix: rewritten every time, so the
// mirror never depends on history); for a decode step, only what the host rewrote below it since
// the last forward, usually nothing: both are ForwardBatch::row_rewrites, taken by the batch's
// builder (nothing here touches the host table).
enum class MirrorWriteMode {
  kAll,         // eager forwards
  kNewOnly,     // what a decode graph captures: fixed O(batch) integers, no prefixes
  kPrefixOnly,  // a decode graph's eager prologue: the host rewrites, no new slots
};
struct MirrorWrite {
  int32_t batch = 0;  // 0: nothing to write
  int64_t rows = 0;
  int64_t prefix_indptr = -1;  // -1: no prefixes
  int64_t prefix_start = 0;
  int64_t prefix_slots = 0;
  int64_t new_indptr = 0;
  int64_t new_start = 0;
  int64_t new_slots = 0;
};
// Appends the write's integers to `meta`; `rows` and `loc` are the offsets of the batch's
// req_pool_indices and out_cache_loc already in it. kAll and kPrefixOnly copy the batch's
// row_rewrites. Host work only.
MirrorWrite plan_mirror_write(const mem::ForwardBatch& batch, DeviceMetadata& meta, int64_t rows,
                              int64_t loc, MirrorWriteMode mode);
// Queues the write on the platform's current stream; `meta` is meta.device() once uploaded/staged.
void write_mirror(platform::Platform& platform, mem::DeviceReqToToken& mirror,
                  const MirrorWrite& write, const int32_t* meta);

// One set of ranges of the mirror's rows (self-attention: [kv_start, kv_start + seq_len); cross:
// [0, encoder_len)) and where its page ids / slots go: ops::build_kv_indices's arrays in a
// DeviceMetadata, the output at an offset of the backend's device index buffer.
struct KvIndexSet {
  int64_t starts = -1;  // [batch] first positions; -1: all 0
  int64_t indptr = 0;   // [batch + 1] entries per request, prefix sums (host-computed)
  int64_t out = 0;      // offset of the entries in the index buffer
  int64_t entries = 0;  // indptr[batch]
};
// Appends indptr for `lens` (ceil(len / page_size) entries each) and `starts` (when not empty),
// and reserves `entries` at `*out_size` (advanced). `indptr` receives the host copy.
KvIndexSet plan_kv_indices(DeviceMetadata& meta, std::span<const int32_t> starts,
                           std::span<const int32_t> lens, int32_t page_size, int64_t* out_size,
                           std::vector<int32_t>& indptr);
// Queues ops::build_kv_indices of `set` over the mirror rows at meta[rows] into out.
void build_kv_indices(platform::Platform& platform, const mem::DeviceReqToToken& mirror,
                      const KvIndexSet& set, int32_t batch, int32_t page_size, const int32_t* meta,
                      int64_t rows, int32_t* out);

}  // namespace kvserve::attention

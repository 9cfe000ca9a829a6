// The staging buffer (issue 18, seed 002): a KV transfer between pools whose layouts differ (page
// size, KV dtype, a head slice when tensor-parallel sizes differ). The sender gathers a chunk's
// token slots into a contiguous staging region (layer-major, K before V, token order: the layout of
// ops/kv_staging_params.h), one bulk write moves it into the receiver's staging region, and the
// receiver scatters it into its own slots. Written against the platform's streams and events, so
// the CPU and CUDA share this code: only the op differs.
//
// On CUDA the staging region can be device memory (cuda-ipc, loopback) or pinned host memory (the
// ucx backend, which reaches only host memory here): the kernels read and write pinned host memory
// directly, so the ucx path costs one pass over PCIe each side and no extra copy.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kvserve/core/status.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/platform/platform.h"

namespace kvserve::disagg {

// What both sides agree on at bootstrap: the staging region's element type and shape per token.
struct StagingFormat {
  int32_t num_layers = 0;
  int32_t num_heads = 0;  // the head slice each token carries
  int32_t head_dim = 0;
  DType dtype = DType::kBF16;

  uint64_t token_bytes() const;  // K and V of every layer for one token
  uint64_t bytes(int64_t tokens) const { return token_bytes() * static_cast<uint64_t>(tokens); }
  bool operator==(const StagingFormat&) const = default;
};

enum class StagingMemory { kDevice, kPinnedHost };

class KvStager {
 public:
  // A stager of `pool` whose staging slice is pool heads [head_begin, head_begin +
  // format.num_heads), for chunks of up to `max_tokens` tokens. kInvalidArgument when the format
  // does not fit the pool (layers, head_dim, heads) or the op cannot convert between the pool's
  // dtype and the format's; kOutOfMemory when the staging region cannot be allocated.
  static Result<std::unique_ptr<KvStager>> create(mem::MHATokenToKVPool& pool,
                                                  const StagingFormat& format, int32_t head_begin,
                                                  int64_t max_tokens, StagingMemory memory);
  ~KvStager();
  KvStager(const KvStager&) = delete;
  KvStager& operator=(const KvStager&) = delete;

  const StagingFormat& format() const { return format_; }
  int64_t max_tokens() const { return max_tokens_; }
  // The staging region (what a transport registers) and the device a transport sees it on
  // (pinned host memory is Device{} for a transport).
  void* staging() const { return staging_; }
  uint64_t staging_bytes() const { return format_.bytes(max_tokens_); }
  Device staging_device() const;

  // Queues the gather of `slots` (token order) into the staging region on the stager's stream,
  // after `after` (the forward that wrote them; null: nothing to wait for). Returns the event
  // that marks the staging region filled: the ready event of the transfer's post. The first
  // format().bytes(slots.size()) bytes of the region are the chunk. kInvalidArgument for more
  // slots than max_tokens or a slot outside the pool. One chunk at a time: a call waits for the
  // stager's previous one, and the caller gathers the next chunk only after the transfer of this
  // one has ended (the region and the returned event are reused).
  Result<platform::EventHandle> gather(std::span<const int32_t> slots,
                                       platform::EventHandle after = {});
  // Queues the scatter of the staging region's first slots.size() tokens into `slots`, after
  // `after`; returns the event that marks the pool written.
  Result<platform::EventHandle> scatter(std::span<const int32_t> slots,
                                        platform::EventHandle after = {});

 private:
  KvStager(mem::MHATokenToKVPool& pool, const StagingFormat& format, int32_t head_begin,
           int64_t max_tokens, StagingMemory memory);
  Result<platform::EventHandle> run(std::span<const int32_t> slots, platform::EventHandle after,
                                    bool scatter);

  mem::MHATokenToKVPool* pool_;
  platform::Platform* platform_;
  StagingFormat format_;
  int32_t head_begin_;
  int64_t max_tokens_;
  StagingMemory memory_;
  void* staging_ = nullptr;
  Buffer device_staging_;
  void* host_slots_ = nullptr;  // pinned: the slot list's way to the device
  Buffer device_slots_;
  platform::StreamHandle stream_;
  platform::EventHandle done_;
  bool in_flight_ = false;
};

}  // namespace kvserve::disagg

// The staging buffer (issue 18, seed 002): a KV transfer between pools whose layouts differ (page
// size, KV dtype, a head slice when tensor-parallel sizes differ). The sender gathers a chunk's
// token slots into a contiguous staging region (token-major, then layer, K before V: the layout of
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

// A staging region a stager works in without owning it (the engine's, registered with its
// transport once): `bytes` at `base`, device memory of the pool's platform when `device`, else
// host memory (pinned on CUDA). Chunks go at byte offsets into it.
struct StagingRegion {
  void* base = nullptr;
  uint64_t bytes = 0;
  bool device = false;
};

class KvStager {
 public:
  // A stager of `pool` whose staging slice is pool heads [head_begin, head_begin +
  // format.num_heads), for chunks of up to `max_tokens` tokens. kInvalidArgument when the format
  // does not fit the pool (layers, head_dim, heads) or the op cannot convert between the pool's
  // dtype and the format's; kOutOfMemory when the staging region cannot be allocated.
  static Result<std::unique_ptr<KvStager>> create(mem::MHATokenToKVPool& pool,
                                                  const StagingFormat& format, int32_t head_begin,
                                                  int64_t max_tokens, StagingMemory memory);
  // A stager in `region` (not owned; it must outlive the stager): chunks of up to `max_tokens`
  // tokens at any byte offset that keeps them inside the region.
  static Result<std::unique_ptr<KvStager>> create(mem::MHATokenToKVPool& pool,
                                                  const StagingFormat& format, int32_t head_begin,
                                                  int64_t max_tokens, const StagingRegion& region);
  ~KvStager();
  KvStager(const KvStager&) = delete;
  KvStager& operator=(const KvStager&) = delete;

  const StagingFormat& format() const { return format_; }
  int64_t max_tokens() const { return max_tokens_; }
  // The staging region (what a transport registers) and the device a transport sees it on
  // (pinned host memory is Device{} for a transport).
  void* staging() const { return staging_; }
  uint64_t staging_bytes() const { return staging_bytes_; }
  Device staging_device() const;

  // Queues the gather of `slots` (token order) into the staging region at byte `offset` on the
  // stager's stream, after `after` (the forward that wrote them; null: nothing to wait for).
  // Returns the event that marks the chunk staged: the ready event of the transfer's post. The
  // chunk is format().bytes(slots.size()) bytes from `offset`. kInvalidArgument for more slots
  // than max_tokens, a slot outside the pool or a chunk outside the region. One chunk at a time: a
  // call waits for the stager's previous one, and the caller reuses a piece of the region only
  // after the transfer that read it has ended (the returned event is reused too).
  Result<platform::EventHandle> gather(std::span<const int32_t> slots,
                                       platform::EventHandle after = {}, uint64_t offset = 0);
  // Queues the scatter of the slots.size() tokens staged at byte `offset` into `slots`, after
  // `after`; returns the event that marks the pool written.
  Result<platform::EventHandle> scatter(std::span<const int32_t> slots,
                                        platform::EventHandle after = {}, uint64_t offset = 0);

 private:
  KvStager(mem::MHATokenToKVPool& pool, const StagingFormat& format, int32_t head_begin,
           int64_t max_tokens, StagingMemory memory);
  static Status check(const mem::MHATokenToKVPool& pool, const StagingFormat& format,
                      int32_t head_begin, int64_t max_tokens);
  // The slot list's buffers, the stream and the event.
  Status init_queue();
  Result<platform::EventHandle> run(std::span<const int32_t> slots, platform::EventHandle after,
                                    uint64_t offset, bool scatter);

  mem::MHATokenToKVPool* pool_;
  platform::Platform* platform_;
  StagingFormat format_;
  int32_t head_begin_;
  int64_t max_tokens_;
  StagingMemory memory_;
  void* staging_ = nullptr;
  uint64_t staging_bytes_ = 0;
  bool owned_ = true;  // staging_ is ours (else a StagingRegion's)
  bool staging_on_device_ = false;
  Buffer device_staging_;
  void* host_slots_ = nullptr;  // pinned: the slot list's way to the device
  Buffer device_slots_;
  platform::StreamHandle stream_;
  platform::EventHandle done_;
  bool in_flight_ = false;
};

}  // namespace kvserve::disagg

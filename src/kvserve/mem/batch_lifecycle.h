// One batch's memory lifecycle, shared by everything that runs batches (the Scheduler, offline
// generate, bench-one-batch, Whisper's generation, the test sessions):
//
//   prepare_extend / prepare_decode  rows and slots allocated in one transaction (evicting from
//                                    the prefix cache when short), the rows written as
//                                    [reused prefix | new slots], and the ForwardBatch built from
//                                    them (make_forward_batch: new slots, row rewrites);
//   runner.forward*(batch)           the caller's;
//   FreeGroup + release_kv_cache     finished requests give their KV to the prefix cache (or
//                                    back to the allocator), their slots freed as one group.
//
// Running out (rows or slots) is kOutOfMemory with every pool and request as it was.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/forward_batch.h"

namespace kvserve::mem {

// One request of a batch: its memory state and the tokens this forward computes.
struct BatchEntry {
  KvReqState* kv = nullptr;
  // Extend: the ids at the positions after kv->prefix_indices; decode: the one id at the request's
  // last position (its newest token).
  std::vector<int32_t> new_tokens;
  // Encoder-decoder rows: encoder positions at the head of the row (0: none). The decoder region
  // starts after encoder_reserved_len(encoder_len) positions (EncoderSplit's page size and layout).
  int32_t encoder_len = 0;
};

// How an encoder-decoder batch lays out its rows' encoder regions (model/whisper_runner.h).
struct EncoderSplit {
  int32_t page_size = 1;
  EncoderKvLayout layout = EncoderKvLayout::kAligned;
};

// An extend (prefill, a chunk of one, or a recomputation after retraction): request i gets a row
// if it has none and slots for its new positions; kv_allocated_len and kv_committed_len become the
// row's length. With `encoder` (encoder-decoder rows, no prefix reuse), each row is
// [encoder region | decoder prompt]: the encoder's slots go to batch.encoder_out_cache_loc, its
// positions to batch.encoder_lens, the decoder region's start to batch.self_kv_start. The caller
// has locked each request's matched prefix (inc_lock_ref).
Result<ForwardBatch> prepare_extend(const KvMemory& mem, std::span<const BatchEntry> entries,
                                    const std::optional<EncoderSplit>& encoder = std::nullopt);

// A decode step: one slot per request at position kv_allocated_len, written into its row; the
// batch computes each request's new_tokens[0] there. `encoder` as for the extend that made the
// rows (the decoder region's start; cross-attention over the cached encoder region).
Result<ForwardBatch> prepare_decode(const KvMemory& mem, std::span<const BatchEntry> entries,
                                    const std::optional<EncoderSplit>& encoder = std::nullopt);

// Frees made inside its scope return to the allocator as one group (cheaper for page > 1).
class FreeGroup {
 public:
  explicit FreeGroup(BaseTokenToKVPoolAllocator& allocator) : allocator_(allocator) {
    allocator_.free_group_begin();
  }
  ~FreeGroup() { allocator_.free_group_end(); }
  FreeGroup(const FreeGroup&) = delete;
  FreeGroup& operator=(const FreeGroup&) = delete;

 private:
  BaseTokenToKVPoolAllocator& allocator_;
};

}  // namespace kvserve::mem

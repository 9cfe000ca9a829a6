// Batch allocation helpers: rows + slots + req_to_token writes (seed 000; sglang-notes §2.4, §3).
//
// One extend or decode batch allocates in one transaction: a row for each request that has none,
// slots for its new positions (evicting from the prefix cache first when short), then the rows
// are written as [reused prefix slots | new slots]. Running out (rows or slots) returns
// kOutOfMemory and leaves every pool and request exactly as it was.
#pragma once

#include <span>
#include <vector>

#include "kvserve/mem/allocator.h"
#include "kvserve/mem/prefix_cache.h"
#include "kvserve/mem/req_to_token_pool.h"

namespace kvserve::mem {

// The metadata side of one model instance's KV memory.
struct KvMemory {
  ReqToTokenPool& req_to_token;
  BaseTokenToKVPoolAllocator& allocator;
  PrefixCache& tree_cache;
};

// Evicts from the prefix cache until `num_slots` slots are available (or nothing is evictable).
void evict_from_tree_cache(const KvMemory& mem, int64_t num_slots);

// Extend (prefill) of a batch. Request i reuses req->prefix_indices for [0, prefix_len) and gets
// new slots for [prefix_len, seq_lens[i]); its kv_allocated_len and kv_committed_len become
// seq_lens[i]. The new slots go to `out_cache_loc`, request-major (the order the model writes
// K/V in). A request keeps its row across chunks; the prefix part is rewritten every time.
// The caller has locked each request's matched prefix (inc_lock_ref) so eviction cannot take it.
Status alloc_for_extend(const KvMemory& mem, std::span<KvReqState* const> reqs,
                        std::span<const int32_t> seq_lens, std::vector<int32_t>& out_cache_loc);

// Decode step: one slot per request for position kv_allocated_len, written into its row; both
// lengths grow by one.
Status alloc_for_decode(const KvMemory& mem, std::span<KvReqState* const> reqs,
                        std::vector<int32_t>& out_cache_loc);

// row[0, prefix_len) = prefixes[i]; row[prefix_len, seq_lens[i]) = the next slots of
// out_cache_loc (consumed request after request).
void write_cache_indices(ReqToTokenPool& req_to_token, std::span<const int32_t> rows,
                         std::span<const std::span<const int32_t>> prefixes,
                         std::span<const int32_t> seq_lens, std::span<const int32_t> out_cache_loc);

// A request is done (finished, aborted or retracted): its committed whole pages go into the
// prefix cache when `insert`, everything else back to the allocator, and its row is freed.
void release_kv_cache(const KvMemory& mem, KvReqState& req, std::span<const int32_t> token_ids,
                      bool insert = true);

}  // namespace kvserve::mem

// The prefix-cache interface (sglang-notes §4) and the memory-side state of a request.
//
// Two implementations: RadixCache (page-aligned radix tree, LRU/LFU eviction) and ChunkCache
// (--disable-radix-cache: nothing is shared; it only carries a chunked request's KV between
// chunks). Both own what they cache: the slots in a RadixCache node belong to the tree until
// eviction returns them to the allocator. Engine-thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/mem/common.h"

namespace kvserve::mem {

// A node of a prefix cache; opaque outside the cache. Lock it to keep its path from eviction.
struct CacheNode;

// What the memory system knows about one request. The scheduler's Req holds one; the helpers in
// allocation.h and the prefix caches update it.
//   row[0, cache_protected_len)              slots owned by the prefix cache (locked: last_node)
//   row[cache_protected_len, kv_allocated_len) slots owned by this request
// cache_protected_len is always a multiple of the page size.
struct KvReqState {
  int32_t row = kNoRow;          // req_to_token row
  int32_t kv_committed_len = 0;  // positions whose KV this request has computed (or is computing)
  int32_t kv_allocated_len = 0;  // positions with a slot in the row
  int32_t cache_protected_len = 0;
  CacheNode* last_node = nullptr;  // the locked node whose path covers [0, cache_protected_len)
  // Slots of positions [0, prefix_len) that the next extend reuses: a prefix-cache hit, or the
  // earlier chunks of a chunked prefill.
  std::vector<int32_t> prefix_indices;
};

struct MatchResult {
  std::vector<int32_t> indices;    // KV slots of the matched prefix (whole pages)
  CacheNode* last_node = nullptr;  // deepest node of the match; the root when nothing matched
};

// One node of a prefix cache as the invariant checker and tests see it.
struct CachedRun {
  std::span<const int32_t> path;   // every token from the root through the end of this node
  int32_t start = 0;               // this node covers path[start, path.size())
  std::span<const int32_t> slots;  // KV slots of path[start, path.size())
  int32_t lock_ref = 0;
  uint64_t last_access = 0;  // logical clock of the last match or insert through it
};

struct CacheSizes {
  int64_t evictable = 0;   // cached tokens no request holds
  int64_t protected_ = 0;  // cached tokens on a locked path
};

class PrefixCache {
 public:
  virtual ~PrefixCache() = default;

  virtual int32_t page_size() const = 0;
  // False for ChunkCache: matching always misses and nothing is evictable.
  virtual bool enabled() const = 0;

  // Longest cached prefix of `key`, truncated to whole pages. May split a node so that the match
  // ends on a node boundary, and refreshes the access time of the matched path. The caller caps
  // `key` (at len - 1, so at least one token is computed for logits).
  virtual MatchResult match_prefix(std::span<const int32_t> key) = 0;

  // Lock counts walk from `node` to the root; a locked path is never evicted.
  virtual void inc_lock_ref(CacheNode* node) = 0;
  virtual void dec_lock_ref(CacheNode* node) = 0;

  // Evicts unlocked leaves (LRU by default) until at least `num_tokens` slots were returned to
  // the allocator or nothing evictable is left; returns the slots freed. evict(0) does nothing.
  virtual int64_t evict(int64_t num_tokens) = 0;

  // A finished (or retracted, insert == false) request: cache its first kv_committed_len tokens
  // (whole pages) or free them, free the rest of its slots and its row, drop its lock.
  // `token_ids` is the request's input followed by its output (at least kv_committed_len long).
  virtual void cache_finished_req(KvReqState& req, std::span<const int32_t> token_ids,
                                  bool insert = true) = 0;
  // A request that goes on (after a prefill chunk, or a prefill that continues to decode):
  // cache the whole pages of `fill_ids` now, so other requests can share them; its row is
  // rewritten with the canonical slots and prefix_indices set for its next extend.
  virtual void cache_unfinished_req(KvReqState& req, std::span<const int32_t> fill_ids) = 0;

  // The parent of a node (null for the root and for caches without nodes): lets schedulers walk
  // the tree (dfs-weight) without seeing its internals.
  virtual const CacheNode* parent_of(const CacheNode* node) const = 0;

  virtual CacheSizes sizes() const = 0;
  int64_t evictable_size() const { return sizes().evictable; }
  int64_t protected_size() const { return sizes().protected_; }

  // Drops every cached token (back to the allocator). Only with no request holding a lock.
  virtual void reset() = 0;

  // Introspection for the invariant checker: the slots of every node, and the internal
  // consistency of the cache's own bookkeeping.
  virtual void for_each_cached_run(const std::function<void(const CachedRun&)>& fn) const = 0;
  virtual Status check_consistency() const = 0;
};

}  // namespace kvserve::mem

// HostKvMemory: the scheduler's side of one model instance's KV memory (sglang-notes §1-§4): the
// request-to-token table, the slot allocator and the prefix cache over them, owned together by
// whoever schedules (the Scheduler, offline generate, bench-one-batch). The runner owns the
// device side (the KV pool the slots index, the table's device mirror); KvMemoryShape is what the
// two agree on (ModelRunner::kv_shape).
#pragma once

#include <cstdint>
#include <memory>

#include "kvserve/mem/allocation.h"
#include "kvserve/mem/allocator.h"
#include "kvserve/mem/prefix_cache.h"
#include "kvserve/mem/radix_cache.h"
#include "kvserve/mem/req_to_token_pool.h"

namespace kvserve::mem {

struct KvMemoryShape {
  int32_t max_running_requests = 1;  // table rows (the padding row 0 comes on top)
  int32_t row_len = 1;               // positions per row
  int64_t max_total_tokens = 1;      // KV slots (a multiple of page_size)
  int32_t page_size = 1;
};

enum class PrefixCacheKind {
  kRadix,  // RadixCache: prefixes shared between requests
  kChunk,  // ChunkCache (--disable-radix-cache): nothing shared
};

class HostKvMemory {
 public:
  explicit HostKvMemory(const KvMemoryShape& shape, PrefixCacheKind cache = PrefixCacheKind::kRadix,
                        EvictionPolicy eviction = EvictionPolicy::kLru);
  HostKvMemory(HostKvMemory&&) noexcept = default;
  HostKvMemory& operator=(HostKvMemory&&) noexcept = default;

  const KvMemoryShape& shape() const { return shape_; }
  ReqToTokenPool& req_to_token() { return *req_to_token_; }
  const ReqToTokenPool& req_to_token() const { return *req_to_token_; }
  BaseTokenToKVPoolAllocator& allocator() { return *allocator_; }
  const BaseTokenToKVPoolAllocator& allocator() const { return *allocator_; }
  PrefixCache& cache() { return *cache_; }
  const PrefixCache& cache() const { return *cache_; }
  // The three as allocation.h's view.
  KvMemory view() const { return {*req_to_token_, *allocator_, *cache_}; }
  // Every row and slot free: nothing held by a request (the cache may hold evictable tokens).
  bool all_rows_free() const { return req_to_token_->available_size() == req_to_token_->size(); }

 private:
  KvMemoryShape shape_;
  // Heap-held so the cache's references to the table and the allocator survive a move.
  std::unique_ptr<ReqToTokenPool> req_to_token_;
  std::unique_ptr<BaseTokenToKVPoolAllocator> allocator_;
  std::unique_ptr<PrefixCache> cache_;
};

}  // namespace kvserve::mem

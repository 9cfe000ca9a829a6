#include "kvserve/mem/host_kv_memory.h"

#include "kvserve/mem/chunk_cache.h"

namespace kvserve::mem {

HostKvMemory::HostKvMemory(const KvMemoryShape& shape, PrefixCacheKind cache,
                           EvictionPolicy eviction)
    : shape_(shape),
      req_to_token_(std::make_unique<ReqToTokenPool>(shape.max_running_requests, shape.row_len)),
      allocator_(make_allocator(shape.max_total_tokens, shape.page_size)) {
  if (cache == PrefixCacheKind::kRadix) {
    cache_ = std::make_unique<RadixCache>(*req_to_token_, *allocator_, eviction);
  } else {
    cache_ = std::make_unique<ChunkCache>(*req_to_token_, *allocator_);
  }
}

}  // namespace kvserve::mem

// ChunkCache: the prefix cache of --disable-radix-cache (sglang-notes §4.2, "Disabled radix
// cache"). Nothing is shared between requests: matching always misses and nothing is evictable.
// It still carries a chunked request's KV from one chunk to the next (cache_unfinished_req), and
// frees a finished request's slots and row.
#pragma once

#include "kvserve/mem/allocator.h"
#include "kvserve/mem/prefix_cache.h"
#include "kvserve/mem/req_to_token_pool.h"

namespace kvserve::mem {

class ChunkCache final : public PrefixCache {
 public:
  ChunkCache(ReqToTokenPool& req_to_token, BaseTokenToKVPoolAllocator& allocator)
      : req_to_token_(req_to_token), allocator_(allocator) {}

  int32_t page_size() const override { return allocator_.page_size(); }
  bool enabled() const override { return false; }

  MatchResult match_prefix(std::span<const int32_t> /*key*/) override { return {}; }
  void inc_lock_ref(CacheNode* /*node*/) override {}
  void dec_lock_ref(CacheNode* /*node*/) override {}
  int64_t evict(int64_t /*num_tokens*/) override { return 0; }

  void cache_finished_req(KvReqState& req, std::span<const int32_t> token_ids,
                          bool insert = true) override;
  void cache_unfinished_req(KvReqState& req, std::span<const int32_t> fill_ids) override;

  const CacheNode* parent_of(const CacheNode* /*node*/) const override { return nullptr; }
  CacheSizes sizes() const override { return {}; }
  void reset() override {}
  void for_each_cached_run(const std::function<void(const CachedRun&)>& /*fn*/) const override {}
  Status check_consistency() const override { return Status::ok(); }

 private:
  ReqToTokenPool& req_to_token_;
  BaseTokenToKVPoolAllocator& allocator_;
};

}  // namespace kvserve::mem

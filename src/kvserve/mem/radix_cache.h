// RadixCache: the page-aligned radix tree prefix cache (sglang-notes §4; DESIGN invariants 2-5).
//
// Every node holds a run of whole pages: `key` token ids and the KV slots (`value`) that hold
// them. A child is keyed by its first page, so matching and insertion compare whole pages and a
// match is always a multiple of page_size. The root is permanently locked. A node is evictable
// when it is an unlocked leaf; evictable leaves are kept in an ordered set (LRU by a logical
// clock, or LFU by hit count then time), so eviction never scans the tree.
#pragma once

#include <memory>
#include <set>
#include <string_view>
#include <unordered_map>

#include "kvserve/mem/allocator.h"
#include "kvserve/mem/prefix_cache.h"
#include "kvserve/mem/req_to_token_pool.h"

namespace kvserve::mem {

enum class EvictionPolicy { kLru, kLfu };
Result<EvictionPolicy> parse_eviction_policy(std::string_view name);  // "lru" | "lfu"

class RadixCache final : public PrefixCache {
 public:
  RadixCache(ReqToTokenPool& req_to_token, BaseTokenToKVPoolAllocator& allocator,
             EvictionPolicy policy = EvictionPolicy::kLru);
  ~RadixCache() override;

  int32_t page_size() const override { return page_size_; }
  bool enabled() const override { return true; }

  MatchResult match_prefix(std::span<const int32_t> key) override;
  // Inserts key -> value (both whole pages). Returns how many leading tokens were already
  // cached: the caller still owns its slots for them and must free its duplicates.
  int64_t insert(std::span<const int32_t> key, std::span<const int32_t> value);

  void inc_lock_ref(CacheNode* node) override;
  void dec_lock_ref(CacheNode* node) override;
  int64_t evict(int64_t num_tokens) override;

  void cache_finished_req(KvReqState& req, std::span<const int32_t> token_ids,
                          bool insert = true) override;
  void cache_unfinished_req(KvReqState& req, std::span<const int32_t> fill_ids) override;

  const CacheNode* parent_of(const CacheNode* node) const override;
  CacheSizes sizes() const override { return {evictable_size_, protected_size_}; }
  int64_t total_size() const { return evictable_size_ + protected_size_; }
  void reset() override;

  CacheNode* root() const { return root_.get(); }
  int64_t node_count() const { return node_count_; }
  void for_each_cached_run(const std::function<void(const CachedRun&)>& fn) const override;
  Status check_consistency() const override;

 private:
  struct EvictOrder {
    EvictionPolicy policy;
    bool operator()(const CacheNode* a, const CacheNode* b) const;
  };

  struct Walk {
    CacheNode* node;  // deepest node whose whole path matches key
    size_t matched;   // tokens of key matched (whole pages)
  };
  // Follows `key` from the root, splitting the node where a match ends inside it, and refreshes
  // the access time of every node on the path (one clock tick per walk). Appends the matched
  // slots to `slots` when given.
  Walk walk(std::span<const int32_t> key, std::vector<int32_t>* slots);
  CacheNode* find_child(const CacheNode* node, std::span<const int32_t> key) const;
  uint64_t child_key(std::span<const int32_t> key) const;
  int64_t match_len(std::span<const int32_t> a, std::span<const int32_t> b) const;
  CacheNode* split(CacheNode* child, int64_t split_len);
  void touch(CacheNode* node, uint64_t now);
  void update_evictable(CacheNode* node);
  void delete_leaf(CacheNode* leaf);

  ReqToTokenPool& req_to_token_;
  BaseTokenToKVPoolAllocator& allocator_;
  const int32_t page_size_;
  const EvictionPolicy policy_;
  std::unique_ptr<CacheNode> root_;
  std::set<CacheNode*, EvictOrder> evictable_leaves_;
  int64_t evictable_size_ = 0;
  int64_t protected_size_ = 0;
  int64_t node_count_ = 0;
  uint64_t clock_ = 0;
  uint64_t next_id_ = 0;
};

}  // namespace kvserve::mem

#include "kvserve/mem/radix_cache.h"

#include <algorithm>
#include <limits>

namespace kvserve::mem {

struct CacheNode {
  CacheNode* parent = nullptr;
  std::vector<int32_t> key;    // token ids, whole pages (empty for the root)
  std::vector<int32_t> value;  // KV slots of those tokens
  // Children keyed by a hash of their first page; a hash hit is confirmed by comparing tokens.
  std::unordered_multimap<uint64_t, std::unique_ptr<CacheNode>> children;
  int32_t lock_ref = 0;
  uint64_t last_access = 0;
  uint64_t hit_count = 0;
  uint64_t id = 0;
  bool in_evictable_set = false;

  int64_t size() const { return static_cast<int64_t>(key.size()); }
};

Result<EvictionPolicy> parse_eviction_policy(std::string_view name) {
  if (name == "lru") return EvictionPolicy::kLru;
  if (name == "lfu") return EvictionPolicy::kLfu;
  return invalid_argument("unknown radix eviction policy '{}' (expected lru or lfu)", name);
}

bool RadixCache::EvictOrder::operator()(const CacheNode* a, const CacheNode* b) const {
  if (policy == EvictionPolicy::kLfu && a->hit_count != b->hit_count) {
    return a->hit_count < b->hit_count;
  }
  if (a->last_access != b->last_access) return a->last_access < b->last_access;
  return a->id < b->id;
}

RadixCache::RadixCache(ReqToTokenPool& req_to_token, BaseTokenToKVPoolAllocator& allocator,
                       EvictionPolicy policy)
    : req_to_token_(req_to_token),
      allocator_(allocator),
      page_size_(allocator.page_size()),
      policy_(policy),
      evictable_leaves_(EvictOrder{policy}) {
  root_ = std::make_unique<CacheNode>();
  root_->lock_ref = 1;  // the root is never evictable
  root_->id = next_id_++;
}

RadixCache::~RadixCache() = default;

uint64_t RadixCache::child_key(std::span<const int32_t> key) const {
  KV_CHECK_GE(key.size(), static_cast<size_t>(page_size_));
  if (page_size_ == 1) return static_cast<uint32_t>(key[0]);
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (int32_t i = 0; i < page_size_; ++i) {
    h ^= static_cast<uint32_t>(key[i]);
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  }
  return h;
}

CacheNode* RadixCache::find_child(const CacheNode* node, std::span<const int32_t> key) const {
  if (key.size() < static_cast<size_t>(page_size_)) return nullptr;
  const auto [begin, end] = node->children.equal_range(child_key(key));
  for (auto it = begin; it != end; ++it) {
    const CacheNode* child = it->second.get();
    if (std::equal(key.begin(), key.begin() + page_size_, child->key.begin())) {
      return it->second.get();
    }
  }
  return nullptr;
}

int64_t RadixCache::match_len(std::span<const int32_t> a, std::span<const int32_t> b) const {
  const size_t n = std::min(a.size(), b.size());
  const auto diff = std::mismatch(a.begin(), a.begin() + n, b.begin());
  return floor_align(diff.first - a.begin(), page_size_);
}

void RadixCache::touch(CacheNode* node, uint64_t now) {
  const bool in_set = node->in_evictable_set;
  if (in_set) evictable_leaves_.erase(node);
  node->last_access = now;
  ++node->hit_count;
  if (in_set) evictable_leaves_.insert(node);
}

void RadixCache::update_evictable(CacheNode* node) {
  const bool want = node != root_.get() && node->children.empty() && node->lock_ref == 0;
  if (want == node->in_evictable_set) return;
  if (want) {
    evictable_leaves_.insert(node);
  } else {
    evictable_leaves_.erase(node);
  }
  node->in_evictable_set = want;
}

CacheNode* RadixCache::split(CacheNode* child, int64_t split_len) {
  KV_CHECK(split_len > 0 && split_len < child->size() && split_len % page_size_ == 0,
           "split of a {}-token node at {}", child->size(), split_len);
  CacheNode* parent = child->parent;
  auto node = std::make_unique<CacheNode>();
  node->parent = parent;
  node->key.assign(child->key.begin(), child->key.begin() + split_len);
  node->value.assign(child->value.begin(), child->value.begin() + split_len);
  node->lock_ref = child->lock_ref;
  node->last_access = child->last_access;
  node->hit_count = child->hit_count;
  node->id = next_id_++;
  child->key.erase(child->key.begin(), child->key.begin() + split_len);
  child->value.erase(child->value.begin(), child->value.begin() + split_len);

  // The parent's entry keeps its hash (same first page) and now owns the new node.
  std::unique_ptr<CacheNode>* owner = nullptr;
  const auto [begin, end] = parent->children.equal_range(child_key(node->key));
  for (auto it = begin; it != end; ++it) {
    if (it->second.get() == child) owner = &it->second;
  }
  KV_CHECK(owner != nullptr, "node {} is missing from its parent's children", child->id);
  std::unique_ptr<CacheNode> child_owned = std::move(*owner);
  CacheNode* raw = node.get();
  *owner = std::move(node);
  child_owned->parent = raw;
  raw->children.emplace(child_key(child_owned->key), std::move(child_owned));
  ++node_count_;
  return raw;
}

RadixCache::Walk RadixCache::walk(std::span<const int32_t> key, std::vector<int32_t>* slots) {
  const uint64_t now = ++clock_;
  CacheNode* node = root_.get();
  node->last_access = now;
  size_t pos = 0;
  while (pos < key.size()) {
    CacheNode* child = find_child(node, key.subspan(pos));
    if (child == nullptr) break;
    const int64_t n = match_len(child->key, key.subspan(pos));
    // A mismatch inside the child: split so the walk ends on a node boundary. The remainder's
    // first page differs from key[pos + n:], so the next find_child misses and the walk ends.
    if (n < child->size()) child = split(child, n);
    if (slots != nullptr) slots->insert(slots->end(), child->value.begin(), child->value.end());
    touch(child, now);
    node = child;
    pos += n;
  }
  return {node, pos};
}

MatchResult RadixCache::match_prefix(std::span<const int32_t> key) {
  MatchResult result;
  key = key.first(floor_align(static_cast<int64_t>(key.size()), page_size_));
  result.last_node = walk(key, &result.indices).node;
  return result;
}

int64_t RadixCache::insert(std::span<const int32_t> key, std::span<const int32_t> value) {
  KV_CHECK_EQ(key.size(), value.size());
  KV_CHECK_EQ(key.size() % page_size_, 0u, "insert of a partial page");
  const auto [node, pos] = walk(key, nullptr);
  if (pos < key.size()) {
    auto leaf = std::make_unique<CacheNode>();
    leaf->parent = node;
    leaf->key.assign(key.begin() + pos, key.end());
    leaf->value.assign(value.begin() + pos, value.end());
    leaf->last_access = clock_;
    leaf->hit_count = 1;
    leaf->id = next_id_++;
    CacheNode* raw = leaf.get();
    node->children.emplace(child_key(raw->key), std::move(leaf));
    evictable_size_ += raw->size();
    ++node_count_;
    update_evictable(node);
    update_evictable(raw);
  }
  return static_cast<int64_t>(pos);
}

void RadixCache::inc_lock_ref(CacheNode* node) {
  for (CacheNode* n = node; n != nullptr && n != root_.get(); n = n->parent) {
    if (n->lock_ref == 0) {
      evictable_size_ -= n->size();
      protected_size_ += n->size();
    }
    ++n->lock_ref;
    update_evictable(n);
  }
}

void RadixCache::dec_lock_ref(CacheNode* node) {
  for (CacheNode* n = node; n != nullptr && n != root_.get(); n = n->parent) {
    KV_CHECK_GT(n->lock_ref, 0, "unlock of unlocked node {}", n->id);
    if (n->lock_ref == 1) {
      evictable_size_ += n->size();
      protected_size_ -= n->size();
    }
    --n->lock_ref;
    update_evictable(n);
  }
}

void RadixCache::delete_leaf(CacheNode* leaf) {
  KV_CHECK(leaf->children.empty() && leaf->lock_ref == 0 && leaf != root_.get(),
           "node {} is not an unlocked leaf", leaf->id);
  if (leaf->in_evictable_set) evictable_leaves_.erase(leaf);
  evictable_size_ -= leaf->size();
  allocator_.free(leaf->value);
  CacheNode* parent = leaf->parent;
  const auto [begin, end] = parent->children.equal_range(child_key(leaf->key));
  for (auto it = begin; it != end; ++it) {
    if (it->second.get() == leaf) {
      parent->children.erase(it);  // destroys `leaf`
      break;
    }
  }
  --node_count_;
  update_evictable(parent);
}

int64_t RadixCache::evict(int64_t num_tokens) {
  int64_t freed = 0;
  while (freed < num_tokens && !evictable_leaves_.empty()) {
    CacheNode* leaf = *evictable_leaves_.begin();
    freed += leaf->size();
    delete_leaf(leaf);
  }
  return freed;
}

void RadixCache::cache_finished_req(KvReqState& req, std::span<const int32_t> token_ids,
                                    bool insert_tokens) {
  KV_CHECK_NE(req.row, kNoRow, "cache_finished_req of a request without a row");
  const int64_t committed = req.kv_committed_len;
  KV_CHECK(committed <= req.kv_allocated_len && static_cast<int64_t>(token_ids.size()) >= committed,
           "committed {} allocated {} tokens {}", committed, req.kv_allocated_len,
           token_ids.size());
  const int64_t aligned = floor_align(committed, page_size_);
  const auto row = req_to_token_.row(req.row);
  int64_t free_from = req.cache_protected_len;
  if (insert_tokens) {
    const int64_t cached = insert(token_ids.first(aligned), row.first(aligned));
    KV_CHECK_GE(cached, req.cache_protected_len, "the locked prefix vanished from the tree");
    // Our slots for [protected, cached) duplicate what the tree already had; from `aligned` on,
    // the slots are an unaligned tail (or over-allocation) the tree never takes.
    allocator_.free(row.subspan(free_from, cached - free_from));
    free_from = aligned;
  }
  allocator_.free(row.subspan(free_from, req.kv_allocated_len - free_from));
  dec_lock_ref(req.last_node);
  req_to_token_.free(req.row);
  req = KvReqState{};
}

void RadixCache::cache_unfinished_req(KvReqState& req, std::span<const int32_t> fill_ids) {
  KV_CHECK_NE(req.row, kNoRow, "cache_unfinished_req of a request without a row");
  const int64_t len = static_cast<int64_t>(fill_ids.size());
  KV_CHECK_LE(len, req.kv_committed_len, "fill_ids longer than the committed KV");
  const int64_t aligned = floor_align(len, page_size_);
  const int64_t protected_len = req.cache_protected_len;
  const auto row = req_to_token_.row(req.row);

  const int64_t cached = insert(fill_ids.first(aligned), row.first(aligned));
  KV_CHECK_GE(cached, protected_len, "the locked prefix vanished from the tree");
  allocator_.free(row.subspan(protected_len, cached - protected_len));

  // Point the row at the tree's slots (ours for [protected, cached) were just freed).
  MatchResult match = match_prefix(fill_ids.first(aligned));
  KV_CHECK_EQ(static_cast<int64_t>(match.indices.size()), aligned);
  req_to_token_.write(req.row, static_cast<int32_t>(protected_len),
                      std::span<const int32_t>(match.indices).subspan(protected_len));
  inc_lock_ref(match.last_node);
  dec_lock_ref(req.last_node);

  req.prefix_indices = std::move(match.indices);
  req.prefix_indices.insert(req.prefix_indices.end(), row.begin() + aligned, row.begin() + len);
  req.cache_protected_len = static_cast<int32_t>(aligned);
  req.last_node = match.last_node;
}

const CacheNode* RadixCache::parent_of(const CacheNode* node) const {
  return node == nullptr ? nullptr : node->parent;
}

void RadixCache::reset() {
  KV_CHECK_EQ(protected_size_, 0, "reset() while requests hold locks");
  evict(std::numeric_limits<int64_t>::max());
  KV_CHECK(root_->children.empty() && evictable_size_ == 0);
}

void RadixCache::for_each_cached_run(const std::function<void(const CachedRun&)>& fn) const {
  std::vector<int32_t> path;
  // Iterative DFS: (node, path length before it).
  std::vector<std::pair<const CacheNode*, size_t>> stack;
  for (const auto& [hash, child] : root_->children)
    stack.emplace_back(child.get(), 0);
  while (!stack.empty()) {
    const auto [node, depth] = stack.back();
    stack.pop_back();
    path.resize(depth);
    path.insert(path.end(), node->key.begin(), node->key.end());
    fn(CachedRun{path, static_cast<int32_t>(depth), node->value, node->lock_ref,
                 node->last_access});
    for (const auto& [hash, child] : node->children)
      stack.emplace_back(child.get(), path.size());
  }
}

Status RadixCache::check_consistency() const {
  int64_t evictable = 0;
  int64_t protected_tokens = 0;
  int64_t nodes = 0;
  size_t leaves_in_set = 0;
  std::vector<const CacheNode*> stack{root_.get()};
  while (!stack.empty()) {
    const CacheNode* node = stack.back();
    stack.pop_back();
    int64_t child_locks = 0;
    for (const auto& [hash, child] : node->children) {
      if (child->parent != node)
        return make_status(StatusCode::kInternal, "node {}: bad parent", child->id);
      if (child->key.empty() || hash != child_key(child->key)) {
        return make_status(StatusCode::kInternal,
                           "node {}: child key does not match its first page", child->id);
      }
      child_locks += child->lock_ref;
      stack.push_back(child.get());
    }
    if (node == root_.get()) continue;
    ++nodes;
    if (node->key.size() != node->value.size() || node->key.size() % page_size_ != 0) {
      return make_status(StatusCode::kInternal, "node {}: {} tokens, {} slots, page size {}",
                         node->id, node->key.size(), node->value.size(), page_size_);
    }
    for (size_t i = 0; i < node->value.size(); ++i) {
      const int32_t first = node->value[i - i % page_size_];
      if (first % page_size_ != 0 ||
          node->value[i] != first + static_cast<int32_t>(i % page_size_)) {
        return make_status(StatusCode::kInternal, "node {}: slot {} breaks page contiguity",
                           node->id, node->value[i]);
      }
    }
    if (node->lock_ref < child_locks) {
      return make_status(StatusCode::kInternal, "node {}: lock_ref {} below its children's {}",
                         node->id, node->lock_ref, child_locks);
    }
    (node->lock_ref == 0 ? evictable : protected_tokens) += node->size();
    const bool should = node->children.empty() && node->lock_ref == 0;
    if (should != node->in_evictable_set) {
      return make_status(StatusCode::kInternal, "node {}: evictable-set membership is {}", node->id,
                         node->in_evictable_set);
    }
    leaves_in_set += node->in_evictable_set;
  }
  if (evictable != evictable_size_ || protected_tokens != protected_size_) {
    return make_status(StatusCode::kInternal,
                       "sizes: evictable {} (counted {}), protected {} (counted {})",
                       evictable_size_, evictable, protected_size_, protected_tokens);
  }
  if (nodes != node_count_ || leaves_in_set != evictable_leaves_.size()) {
    return make_status(StatusCode::kInternal, "node count {} (counted {}), evictable set {} ({})",
                       node_count_, nodes, evictable_leaves_.size(), leaves_in_set);
  }
  return Status::ok();
}

}  // namespace kvserve::mem

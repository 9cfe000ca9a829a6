// RadixCache: page-aligned insert/match/split, lock accounting, LRU/LFU eviction and the
// request-side operations (cache_finished_req, cache_unfinished_req) against a real allocator and
// req_to_token pool. Most tests run for page sizes 1, 4 and 16; lengths are written in pages.
#include "kvserve/mem/radix_cache.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "kvserve/mem/allocation.h"

namespace {

using namespace kvserve;
using namespace kvserve::mem;

using Ids = std::vector<int32_t>;

constexpr int64_t kAll = std::numeric_limits<int64_t>::max();

// n consecutive ids starting at `first`.
Ids seq(int32_t first, int32_t n) {
  Ids v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}
Ids cat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
Ids slice(const Ids& v, int64_t from, int64_t to) {
  return Ids(v.begin() + from, v.begin() + to);
}
Ids head(const Ids& v, int64_t n) {
  return slice(v, 0, n);
}

struct Run {
  int32_t start = 0;
  Ids slots;
  int32_t lock_ref = 0;
};

// Every node of the cache, keyed by its full path from the root.
std::map<Ids, Run> runs_of(const PrefixCache& cache) {
  std::map<Ids, Run> runs;
  cache.for_each_cached_run([&](const CachedRun& r) {
    Ids path(r.path.begin(), r.path.end());
    EXPECT_EQ(runs.count(path), 0u);
    runs[path] = Run{r.start, Ids(r.slots.begin(), r.slots.end()), r.lock_ref};
  });
  return runs;
}

class RadixCacheTest : public ::testing::Test {
 protected:
  static constexpr int32_t kPages = 64;
  static constexpr int32_t kRows = 8;

  void init(int32_t ps, EvictionPolicy policy = EvictionPolicy::kLru) {
    ps_ = ps;
    cache_.reset();
    pool_ = std::make_unique<ReqToTokenPool>(kRows, 16 * ps);
    alloc_ = make_allocator(int64_t{kPages} * ps, ps);
    cache_ = std::make_unique<RadixCache>(*pool_, *alloc_, policy);
  }

  // `n` slots (whole pages) straight from the allocator.
  Ids take(int64_t n) {
    Ids out;
    EXPECT_TRUE(alloc_->alloc(n, out).is_ok());
    return out;
  }
  void give(const Ids& slots) { alloc_->free(slots); }
  Ids match(const Ids& key) { return cache_->match_prefix(key).indices; }
  int64_t avail() const { return alloc_->available_size(); }
  int64_t total() const { return alloc_->size(); }
  bool page_free(int32_t slot) const { return alloc_->is_page_free(slot / ps_); }
  void expect_all_free(const Ids& slots, bool want) const {
    for (const int32_t s : slots)
      EXPECT_EQ(page_free(s), want) << "slot " << s;
  }
  void expect_consistent() const {
    const Status s = cache_->check_consistency();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  void expect_sizes(int64_t evictable, int64_t protected_tokens) const {
    EXPECT_EQ(cache_->evictable_size(), evictable);
    EXPECT_EQ(cache_->protected_size(), protected_tokens);
    EXPECT_EQ(cache_->total_size(), evictable + protected_tokens);
  }
  int32_t lock_of(const Ids& path) const {
    const auto runs = runs_of(*cache_);
    return runs.count(path) == 0 ? -1 : runs.at(path).lock_ref;
  }
  KvMemory mem() { return KvMemory{*pool_, *alloc_, *cache_}; }

  // A request that computed positions [0, committed) itself (no cached prefix) and holds slots
  // for [0, allocated): a row, whole pages from the allocator, the row written.
  KvReqState own_req(int32_t committed, int32_t allocated) {
    KvReqState r;
    r.row = pool_->alloc_one().value();
    const Ids slots = take((allocated + ps_ - 1) / ps_ * ps_);
    pool_->write(r.row, 0, std::span<const int32_t>(slots).first(allocated));
    r.kv_committed_len = committed;
    r.kv_allocated_len = allocated;
    return r;
  }
  // Admission as the scheduler does it: match the prompt capped at len - 1 and lock the match.
  KvReqState admit(const Ids& prompt) {
    KvReqState r;
    MatchResult m = cache_->match_prefix(head(prompt, static_cast<int64_t>(prompt.size()) - 1));
    cache_->inc_lock_ref(m.last_node);
    r.cache_protected_len = static_cast<int32_t>(m.indices.size());
    r.prefix_indices = std::move(m.indices);
    r.last_node = m.last_node;
    return r;
  }
  Status extend(KvReqState& r, int32_t seq_len) {
    KvReqState* reqs[] = {&r};
    const int32_t lens[] = {seq_len};
    std::vector<int32_t> out;
    return alloc_for_extend(mem(), reqs, lens, out);
  }
  Ids row_of(const KvReqState& r, int32_t len) const {
    const auto s = pool_->row(r.row, 0, len);
    return Ids(s.begin(), s.end());
  }
  static void expect_reset(const KvReqState& r) {
    EXPECT_TRUE(r.row == kNoRow && r.kv_committed_len == 0 && r.kv_allocated_len == 0 &&
                r.cache_protected_len == 0 && r.last_node == nullptr && r.prefix_indices.empty());
  }

  int32_t ps_ = 1;
  std::unique_ptr<ReqToTokenPool> pool_;
  std::unique_ptr<BaseTokenToKVPoolAllocator> alloc_;
  std::unique_ptr<RadixCache> cache_;
};

class RadixCachePaged : public RadixCacheTest, public ::testing::WithParamInterface<int32_t> {
 protected:
  void SetUp() override { init(GetParam()); }
};

INSTANTIATE_TEST_SUITE_P(PageSizes, RadixCachePaged, ::testing::Values(1, 4, 16),
                         [](const auto& p) { return "ps" + std::to_string(p.param); });

TEST_P(RadixCachePaged, InsertReturnsTheLengthAlreadyCached) {
  const int32_t ps = ps_;
  const Ids k1 = seq(100, 3 * ps);
  const Ids v1 = take(3 * ps);
  EXPECT_EQ(cache_->insert(k1, v1), 0);
  EXPECT_EQ(cache_->node_count(), 1);
  expect_sizes(3 * ps, 0);
  // A duplicate: all of it was cached. The tree keeps its slots; the caller keeps its own.
  const Ids v2 = take(3 * ps);
  const int64_t before = avail();
  EXPECT_EQ(cache_->insert(k1, v2), 3 * ps);
  EXPECT_EQ(avail(), before);
  EXPECT_EQ(cache_->node_count(), 1);
  expect_sizes(3 * ps, 0);
  EXPECT_EQ(match(k1), v1);
  expect_all_free(v2, false);
  give(v2);  // would be a double free (CheckError) had the tree freed them
  // Diverging in the last token of the third page: two whole pages are shared.
  Ids k3 = cat(k1, seq(900, ps));
  k3[3 * ps - 1] = 99999;
  const Ids v3 = take(4 * ps);
  EXPECT_EQ(cache_->insert(k3, v3), 2 * ps);
  EXPECT_EQ(cache_->node_count(), 3);  // k1 split after two pages, plus the new leaf
  expect_sizes(5 * ps, 0);
  give(head(v3, 2 * ps));  // the caller's duplicates
  EXPECT_EQ(match(k3), cat(head(v1, 2 * ps), slice(v3, 2 * ps, 4 * ps)));
  EXPECT_EQ(match(k1), v1);
  expect_consistent();
  cache_->reset();
  EXPECT_EQ(avail(), total());
}

TEST_P(RadixCachePaged, MatchReturnsTheSlotsOfWholePages) {
  const int32_t ps = ps_;
  const Ids key = seq(1, 4 * ps);
  const Ids val = take(4 * ps);
  ASSERT_EQ(cache_->insert(head(key, 2 * ps), head(val, 2 * ps)), 0);
  ASSERT_EQ(cache_->insert(key, val), 2 * ps);  // the tree already holds val's first two pages
  ASSERT_EQ(cache_->node_count(), 2);
  const MatchResult m = cache_->match_prefix(key);
  EXPECT_EQ(m.indices, val);  // both nodes, concatenated in order
  EXPECT_NE(m.last_node, cache_->root());
  EXPECT_EQ(cache_->node_count(), 2);
  // One token past the end: still the whole key.
  EXPECT_EQ(match(cat(key, {77777})), val);
  // Diverging inside the third page: only the first two pages match.
  Ids diverge = key;
  diverge[2 * ps + ps / 2] = 99999;
  EXPECT_EQ(match(diverge), head(val, 2 * ps));
  // One token past a page boundary counts only the whole pages before it.
  EXPECT_EQ(match(head(key, 2 * ps + 1)), head(val, (2 * ps + 1) / ps * ps));
  // One token short of the end: the last page is incomplete, three pages match.
  EXPECT_EQ(match(head(key, 4 * ps - 1)), head(val, 3 * ps));
  // Misses return the root.
  for (const Ids& miss : {seq(5000, 2 * ps), Ids{}, head(key, ps - 1), cat({99999}, key)}) {
    const MatchResult r = cache_->match_prefix(miss);
    EXPECT_TRUE(r.indices.empty());
    EXPECT_EQ(r.last_node, cache_->root());
  }
  expect_sizes(4 * ps, 0);
  expect_consistent();
}

TEST_P(RadixCachePaged, MatchEndingInsideANodeSplitsIt) {
  const int32_t ps = ps_;
  const Ids key = seq(1, 4 * ps);
  const Ids val = take(4 * ps);
  ASSERT_EQ(cache_->insert(key, val), 0);
  ASSERT_EQ(cache_->node_count(), 1);
  const MatchResult m = cache_->match_prefix(head(key, 2 * ps));
  EXPECT_EQ(m.indices, head(val, 2 * ps));
  EXPECT_EQ(cache_->node_count(), 2);
  expect_sizes(4 * ps, 0);  // a split moves no token
  expect_consistent();
  // last_node ends exactly where the match ends: locking it protects the first half only.
  cache_->inc_lock_ref(m.last_node);
  expect_sizes(2 * ps, 2 * ps);
  EXPECT_EQ(match(key), val);  // through the split point: no further split
  EXPECT_EQ(cache_->node_count(), 2);
  EXPECT_EQ(cache_->evict(1), 2 * ps);  // the unlocked lower half goes
  EXPECT_EQ(match(key), head(val, 2 * ps));
  cache_->dec_lock_ref(m.last_node);
  expect_sizes(2 * ps, 0);
  // Splitting a locked node: both halves stay locked, and one unlock releases both.
  CacheNode* whole = cache_->match_prefix(head(key, 2 * ps)).last_node;
  cache_->inc_lock_ref(whole);
  EXPECT_EQ(match(head(key, ps)), head(val, ps));
  EXPECT_EQ(cache_->node_count(), 2);
  expect_sizes(0, 2 * ps);
  EXPECT_EQ(lock_of(head(key, ps)), 1);
  EXPECT_EQ(lock_of(head(key, 2 * ps)), 1);
  expect_consistent();
  cache_->dec_lock_ref(whole);
  expect_sizes(2 * ps, 0);
  expect_consistent();
}

TEST_F(RadixCacheTest, ChildrenAreKeyedByTheirWholeFirstPage) {
  init(4);
  const Ids k1 = {1, 2, 3, 4, 5, 6, 7, 8};
  const Ids k2 = {1, 9, 3, 4, 5, 6, 7, 8};  // differs only in the second token of page 1
  const Ids k3 = {1, 2, 3, 9, 5, 6, 7, 8};  // differs only in the last token of page 1
  const Ids v1 = take(8), v2 = take(8), v3 = take(8);
  EXPECT_EQ(cache_->insert(k1, v1), 0);
  EXPECT_EQ(cache_->insert(k2, v2), 0);
  EXPECT_EQ(cache_->insert(k3, v3), 0);
  EXPECT_EQ(cache_->node_count(), 3);  // three children of the root, nothing split
  EXPECT_EQ(match(k1), v1);
  EXPECT_EQ(match(k2), v2);
  EXPECT_EQ(match(k3), v3);
  for (const auto& [path, run] : runs_of(*cache_))
    EXPECT_EQ(run.start, 0);
  // Differing in the second token of page 2: page 1 is shared, page 2 becomes a sibling.
  const Ids k4 = {1, 2, 3, 4, 5, 0, 7, 8};
  const Ids v4 = take(8);
  EXPECT_EQ(cache_->insert(k4, v4), 4);
  give(head(v4, 4));
  EXPECT_EQ(cache_->node_count(), 5);
  EXPECT_EQ(match(k4), cat(head(v1, 4), slice(v4, 4, 8)));
  EXPECT_EQ(match(k1), v1);
  expect_sizes(32 - 4, 0);
  expect_consistent();
}

TEST_P(RadixCachePaged, LockRefProtectsTheWholePathToTheRootAndReset) {
  const int32_t ps = ps_;
  // A -> B -> C and A -> D, one page each.
  const Ids abc = seq(1, 3 * ps);
  const Ids ad = cat(head(abc, ps), seq(500, ps));
  const Ids v = take(3 * ps);
  ASSERT_EQ(cache_->insert(abc, v), 0);
  ASSERT_EQ(cache_->insert(head(abc, 2 * ps), head(v, 2 * ps)), 2 * ps);
  const Ids vd = take(2 * ps);
  ASSERT_EQ(cache_->insert(ad, vd), ps);
  give(head(vd, ps));
  ASSERT_EQ(cache_->node_count(), 4);
  expect_sizes(4 * ps, 0);
  CacheNode* c = cache_->match_prefix(abc).last_node;
  CacheNode* d = cache_->match_prefix(ad).last_node;
  cache_->inc_lock_ref(c);  // C, B and A become protected; D stays evictable
  expect_sizes(ps, 3 * ps);
  EXPECT_EQ(lock_of(head(abc, ps)), 1);
  EXPECT_EQ(lock_of(head(abc, 2 * ps)), 1);
  EXPECT_EQ(lock_of(abc), 1);
  EXPECT_EQ(lock_of(ad), 0);
  cache_->inc_lock_ref(c);
  cache_->dec_lock_ref(c);  // still held once
  expect_sizes(ps, 3 * ps);
  cache_->inc_lock_ref(d);
  expect_sizes(0, 4 * ps);
  EXPECT_EQ(lock_of(head(abc, ps)), 2);
  expect_consistent();
  cache_->dec_lock_ref(c);  // A stays protected through D
  expect_sizes(2 * ps, 2 * ps);
  EXPECT_THROW(cache_->reset(), CheckError);  // not while a request holds a lock
  cache_->dec_lock_ref(d);
  expect_sizes(4 * ps, 0);
  EXPECT_THROW(cache_->dec_lock_ref(d), CheckError);
  // The root is permanently locked: locking or unlocking it changes nothing.
  cache_->inc_lock_ref(cache_->root());
  cache_->dec_lock_ref(cache_->root());
  expect_sizes(4 * ps, 0);
  expect_consistent();
  cache_->reset();  // everything back to the allocator
  EXPECT_EQ(cache_->node_count(), 0);
  expect_sizes(0, 0);
  EXPECT_EQ(avail(), total());
  EXPECT_EQ(cache_->match_prefix(abc).last_node, cache_->root());
  EXPECT_EQ(cache_->insert(abc, take(3 * ps)), 0);  // usable again
  expect_consistent();
}

TEST_P(RadixCachePaged, EvictFreesLeastRecentlyUsedLeavesFirst) {
  const int32_t ps = ps_;
  const Ids x = seq(1000, 2 * ps), y = seq(2000, 2 * ps), z = seq(3000, 2 * ps);
  const Ids vx = take(2 * ps), vy = take(2 * ps), vz = take(2 * ps);
  ASSERT_EQ(cache_->insert(x, vx), 0);
  ASSERT_EQ(cache_->insert(y, vy), 0);
  ASSERT_EQ(cache_->insert(z, vz), 0);
  EXPECT_EQ(match(x), vx);  // x becomes the most recently used: order y, z, x
  const int64_t a0 = avail();
  EXPECT_EQ(cache_->evict(0), 0);
  EXPECT_EQ(avail(), a0);
  EXPECT_EQ(cache_->node_count(), 3);
  EXPECT_EQ(cache_->evict(1), 2 * ps);  // a whole node: overshoots
  EXPECT_EQ(avail(), a0 + 2 * ps);
  expect_all_free(vy, true);
  expect_all_free(vz, false);
  expect_all_free(vx, false);
  expect_sizes(4 * ps, 0);
  EXPECT_EQ(cache_->evict(2 * ps), 2 * ps);
  expect_all_free(vz, true);
  expect_all_free(vx, false);
  EXPECT_EQ(cache_->evict(kAll), 2 * ps);
  expect_all_free(vx, true);
  EXPECT_EQ(cache_->evict(1), 0);  // nothing left
  EXPECT_EQ(cache_->node_count(), 0);
  expect_sizes(0, 0);
  EXPECT_EQ(avail(), total());
  expect_consistent();
}

TEST_P(RadixCachePaged, EvictCascadesToParentsThatBecomeLeaves) {
  const int32_t ps = ps_;
  const Ids k1 = seq(1, 3 * ps);                       // P (2 pages) -> L1 (1 page)
  const Ids k2 = cat(head(k1, 2 * ps), seq(900, ps));  // P -> L2
  const Ids v1 = take(3 * ps), v2 = take(3 * ps);
  ASSERT_EQ(cache_->insert(k1, v1), 0);
  ASSERT_EQ(cache_->insert(k2, v2), 2 * ps);
  give(head(v2, 2 * ps));
  ASSERT_EQ(cache_->node_count(), 3);
  EXPECT_EQ(cache_->evict(ps), ps);  // L1, the older leaf; P still has L2
  EXPECT_EQ(cache_->node_count(), 2);
  expect_all_free(slice(v1, 2 * ps, 3 * ps), true);
  expect_all_free(head(v1, 2 * ps), false);
  expect_consistent();
  // L2 alone is not enough: P is now a leaf and goes too.
  EXPECT_EQ(cache_->evict(ps + 1), 3 * ps);
  EXPECT_EQ(cache_->node_count(), 0);
  expect_sizes(0, 0);
  EXPECT_EQ(avail(), total());
  expect_consistent();
}

TEST_P(RadixCachePaged, EvictNeverTouchesALockedPath) {
  const int32_t ps = ps_;
  const Ids kl = seq(1, 2 * ps);                   // P -> L, locked
  const Ids ks = cat(head(kl, ps), seq(700, ps));  // P -> S
  const Ids kq = seq(5000, 2 * ps);                // Q, another child of the root
  const Ids vl = take(2 * ps), vs = take(2 * ps), vq = take(2 * ps);
  ASSERT_EQ(cache_->insert(kl, vl), 0);
  ASSERT_EQ(cache_->insert(ks, vs), ps);
  give(head(vs, ps));
  ASSERT_EQ(cache_->insert(kq, vq), 0);
  CacheNode* l = cache_->match_prefix(kl).last_node;
  cache_->inc_lock_ref(l);
  match(ks);  // the locked path is now the least recently used
  match(kq);
  const int64_t a0 = avail();
  EXPECT_EQ(cache_->evict(kAll), 3 * ps);  // S and Q
  EXPECT_EQ(avail(), a0 + 3 * ps);         // exactly their pages came back
  expect_all_free(slice(vs, ps, 2 * ps), true);
  expect_all_free(vq, true);
  expect_all_free(vl, false);
  EXPECT_EQ(cache_->node_count(), 2);
  expect_sizes(0, 2 * ps);
  EXPECT_EQ(match(kl), vl);
  EXPECT_EQ(cache_->evict(kAll), 0);
  expect_consistent();
  cache_->dec_lock_ref(l);
  EXPECT_EQ(cache_->evict(kAll), 2 * ps);
  EXPECT_EQ(avail(), total());
  expect_consistent();
}

TEST_F(RadixCacheTest, LfuKeepsTheMoreHitNodeEvenIfUsedLongerAgo) {
  for (const EvictionPolicy policy : {EvictionPolicy::kLru, EvictionPolicy::kLfu}) {
    SCOPED_TRACE(policy == EvictionPolicy::kLfu ? "lfu" : "lru");
    init(4, policy);
    const Ids x = seq(100, 8), y = seq(200, 8);
    const Ids vx = take(8), vy = take(8);
    ASSERT_EQ(cache_->insert(x, vx), 0);
    ASSERT_EQ(cache_->insert(y, vy), 0);
    match(x);
    match(x);
    match(y);  // x: hit more often; y: used more recently
    EXPECT_EQ(cache_->evict(1), 8);
    const bool lfu = policy == EvictionPolicy::kLfu;
    expect_all_free(vy, lfu);
    expect_all_free(vx, !lfu);
    EXPECT_EQ(match(lfu ? x : y), lfu ? vx : vy);
    expect_consistent();
  }
}

TEST(ParseEvictionPolicy, AcceptsLruAndLfuOnly) {
  ASSERT_TRUE(parse_eviction_policy("lru").is_ok() && parse_eviction_policy("lfu").is_ok());
  EXPECT_EQ(parse_eviction_policy("lru").value(), EvictionPolicy::kLru);
  EXPECT_EQ(parse_eviction_policy("lfu").value(), EvictionPolicy::kLfu);
  for (const char* bad : {"fifo", "", "lruu"}) {
    EXPECT_EQ(parse_eviction_policy(bad).status().code(), StatusCode::kInvalidArgument) << bad;
  }
}

TEST_P(RadixCachePaged, FinishedReqCachesItsWholePagesAndFreesTheRest) {
  const int32_t ps = ps_;
  const int32_t committed = 3 * ps + ps / 2 + 1;  // ps 4: 3 pages and 3 tokens
  const int32_t allocated = committed + ps + 2;   // over-allocation (speculative decoding)
  const int32_t held = (allocated + ps - 1) / ps * ps;
  const Ids ids = seq(10, committed + 1);  // input + output; the last token has no KV
  const int64_t a0 = avail();
  const int32_t rows0 = pool_->available_size();
  for (const bool insert : {false, true}) {
    SCOPED_TRACE(insert ? "insert" : "no insert");
    const int32_t kept = insert ? committed / ps * ps : 0;  // whole pages go to the tree
    KvReqState r = own_req(committed, allocated);
    const int32_t row = r.row;
    const Ids slots = row_of(r, allocated);
    ASSERT_EQ(avail(), a0 - held);
    cache_->cache_finished_req(r, ids, insert);
    EXPECT_EQ(avail(), a0 - kept);
    expect_sizes(kept, 0);
    for (int32_t p = 0; p < allocated; ++p)
      EXPECT_EQ(page_free(slots[p]), p >= kept) << p;
    EXPECT_FALSE(pool_->is_allocated(row));
    EXPECT_EQ(pool_->available_size(), rows0);
    expect_reset(r);
    EXPECT_THROW(cache_->cache_finished_req(r, ids), CheckError);  // no row any more
    expect_consistent();
    // The next request with the same prompt finds the whole pages cached.
    EXPECT_EQ(match(head(ids, committed)), head(slots, kept));
  }
}

TEST_P(RadixCachePaged, SecondRequestReusesAndExtendsTheCachedPrefix) {
  const int32_t ps = ps_;
  const int64_t a0 = avail();
  const int32_t len_a = 2 * ps + 1;
  const int32_t cached_a = len_a / ps * ps;
  const Ids a_ids = seq(10, len_a + 1);
  KvReqState a = own_req(len_a, len_a);
  const Ids a_slots = row_of(a, len_a);
  cache_->cache_finished_req(a, a_ids);
  ASSERT_EQ(avail(), a0 - cached_a);
  const Ids b_prompt = cat(head(a_ids, cached_a), seq(500, 2 * ps + 1));
  const auto len_b = static_cast<int32_t>(b_prompt.size());
  // A request that matches A's pages and is retracted: its own slots and its lock go back.
  KvReqState retracted = admit(b_prompt);
  ASSERT_TRUE(extend(retracted, len_b).is_ok());
  cache_->cache_finished_req(retracted, b_prompt, /*insert=*/false);
  EXPECT_EQ(avail(), a0 - cached_a);
  expect_sizes(cached_a, 0);
  EXPECT_EQ(cache_->node_count(), 1);
  expect_reset(retracted);
  KvReqState b = admit(b_prompt);
  EXPECT_EQ(b.prefix_indices, head(a_slots, cached_a));
  EXPECT_EQ(b.cache_protected_len, cached_a);
  expect_sizes(0, cached_a);
  ASSERT_TRUE(extend(b, len_b).is_ok());
  EXPECT_EQ(avail(), a0 - (len_b + ps - 1) / ps * ps);
  const Ids b_row = row_of(b, len_b);
  EXPECT_EQ(head(b_row, cached_a), head(a_slots, cached_a));
  cache_->cache_finished_req(b, cat(b_prompt, {4242}));
  const int32_t aligned_b = len_b / ps * ps;
  EXPECT_EQ(avail(), a0 - aligned_b);  // the tree holds exactly B's whole pages
  expect_sizes(aligned_b, 0);
  EXPECT_EQ(match(b_prompt), head(b_row, aligned_b));
  expect_reset(b);
  expect_consistent();
}

TEST_P(RadixCachePaged, ConcurrentDuplicatePrefixIsFreedAtFinish) {
  const int32_t ps = ps_;
  const int32_t len = 3 * ps + 1;
  const int32_t aligned = len / ps * ps;
  const int32_t held = (len + ps - 1) / ps * ps;
  const Ids ids = seq(10, len + 1);
  const int64_t a0 = avail();
  // A and B were admitted together: both computed the whole prompt with their own slots.
  KvReqState a = own_req(len, len);
  KvReqState b = own_req(len, len);
  const Ids a_slots = row_of(a, len), b_slots = row_of(b, len);
  ASSERT_EQ(avail(), a0 - 2 * held);
  cache_->cache_finished_req(a, ids);
  EXPECT_EQ(avail(), a0 - 2 * held + (held - aligned));
  cache_->cache_finished_req(b, ids);
  EXPECT_EQ(avail(), a0 - aligned);  // B's duplicates and its tail all came back
  expect_all_free(b_slots, true);
  expect_all_free(head(a_slots, aligned), false);
  expect_sizes(aligned, 0);
  EXPECT_EQ(cache_->node_count(), 1);
  EXPECT_EQ(match(ids), head(a_slots, aligned));
  expect_consistent();
}

TEST_P(RadixCachePaged, UnfinishedReqCachesTheChunkAndMovesTheLock) {
  const int32_t ps = ps_;
  const Ids ids = seq(10, 6 * ps + 1);  // R's prompt
  const int64_t a0 = avail();
  // O1 cached page 1 (X).
  KvReqState o1 = own_req(ps, ps);
  cache_->cache_finished_req(o1, head(ids, ps + 1));
  const Ids x_slots = match(head(ids, ps));
  ASSERT_EQ(static_cast<int32_t>(x_slots.size()), ps);
  // R and O2 are admitted together and both match X.
  KvReqState r = admit(ids);
  KvReqState o2 = admit(head(ids, 2 * ps + 1));
  ASSERT_EQ(r.cache_protected_len, ps);
  ASSERT_EQ(o2.cache_protected_len, ps);
  ASSERT_TRUE(extend(o2, 2 * ps).is_ok());
  const Ids y_slots = slice(row_of(o2, 2 * ps), ps, 2 * ps);
  const int32_t chunk = 3 * ps + ps / 2;  // R's first chunk; 3 whole pages
  ASSERT_TRUE(extend(r, chunk).is_ok());
  const Ids r_row = row_of(r, chunk);
  // O2 finishes first: the tree gains page 2 (Y) with O2's slots.
  cache_->cache_finished_req(o2, head(ids, 2 * ps + 1));
  expect_sizes(ps, ps);  // X locked by R; Y evictable
  EXPECT_EQ(lock_of(head(ids, ps)), 1);
  const int64_t a1 = avail();
  cache_->cache_unfinished_req(r, head(ids, chunk));
  // R's copy of page 2 duplicated Y and is freed; its page 3 became the tree's (Z).
  EXPECT_EQ(avail(), a1 + ps);
  expect_all_free(slice(r_row, ps, 2 * ps), true);
  const Ids canonical = cat(cat(x_slots, y_slots), slice(r_row, 2 * ps, 3 * ps));
  EXPECT_EQ(row_of(r, 3 * ps), canonical);
  EXPECT_EQ(r.prefix_indices, cat(canonical, slice(r_row, 3 * ps, chunk)));
  EXPECT_EQ(r.cache_protected_len, 3 * ps);
  EXPECT_EQ(r.kv_committed_len, chunk);
  EXPECT_EQ(r.kv_allocated_len, chunk);
  EXPECT_EQ(cache_->node_count(), 3);
  expect_sizes(0, 3 * ps);
  // The lock moved: each node of X -> Y -> Z is held once (X no longer by the old lock too).
  EXPECT_EQ(lock_of(head(ids, ps)), 1);
  EXPECT_EQ(lock_of(head(ids, 2 * ps)), 1);
  EXPECT_EQ(lock_of(head(ids, 3 * ps)), 1);
  EXPECT_EQ(r.last_node, cache_->match_prefix(head(ids, 3 * ps)).last_node);
  expect_consistent();
  // The second chunk continues from prefix_indices; then the request finishes.
  const auto len = static_cast<int32_t>(ids.size());
  ASSERT_TRUE(extend(r, len).is_ok());
  const Ids full_row = row_of(r, len);
  EXPECT_EQ(head(full_row, chunk), r.prefix_indices);
  cache_->cache_finished_req(r, cat(ids, {4242}));
  const int32_t aligned = len / ps * ps;  // 6 pages (7 for page size 1)
  EXPECT_EQ(avail(), a0 - aligned);
  expect_sizes(aligned, 0);
  EXPECT_EQ(cache_->node_count(), 4);
  EXPECT_EQ(match(ids), head(full_row, aligned));
  expect_consistent();
}

TEST_P(RadixCachePaged, ForEachCachedRunReportsFullPathsAndSlots) {
  const int32_t ps = ps_;
  const Ids k1 = seq(1, 3 * ps);                       // A (1 page) -> B (2 pages)
  const Ids k2 = cat(head(k1, ps), seq(800, 2 * ps));  // A -> C
  const Ids k3 = seq(3000, ps);                        // D
  const Ids v1 = take(3 * ps), v2 = take(3 * ps), v3 = take(ps);
  ASSERT_EQ(cache_->insert(k1, v1), 0);
  ASSERT_EQ(cache_->insert(k2, v2), ps);
  give(head(v2, ps));
  ASSERT_EQ(cache_->insert(k3, v3), 0);
  CacheNode* c = cache_->match_prefix(k2).last_node;
  cache_->inc_lock_ref(c);
  const auto runs = runs_of(*cache_);
  ASSERT_EQ(runs.size(), 4u);
  const std::tuple<Ids, int32_t, Ids, int32_t> want[] = {{head(k1, ps), 0, head(v1, ps), 1},
                                                         {k1, ps, slice(v1, ps, 3 * ps), 0},
                                                         {k2, ps, slice(v2, ps, 3 * ps), 1},
                                                         {k3, 0, v3, 0}};
  int64_t tokens = 0;
  for (const auto& [path, start, slots, lock_ref] : want) {  // path, start, slots, lock_ref
    const auto it = runs.find(path);
    ASSERT_NE(it, runs.end());
    EXPECT_EQ(it->second.start, start);
    EXPECT_EQ(it->second.slots, slots);
    EXPECT_EQ(it->second.lock_ref, lock_ref);
    tokens += static_cast<int64_t>(slots.size());
  }
  EXPECT_EQ(tokens, cache_->total_size());
  expect_sizes(3 * ps, 3 * ps);
  cache_->dec_lock_ref(c);
  expect_consistent();
}

TEST_F(RadixCacheTest, EdgeCasesAndMisuse) {
  init(4);
  // A chunk shorter than a page caches nothing; its slots stay the request's.
  KvReqState s = own_req(3, 3);
  const Ids s_slots = row_of(s, 3);
  cache_->cache_unfinished_req(s, seq(1, 3));
  EXPECT_EQ(cache_->node_count(), 0);
  EXPECT_EQ(s.prefix_indices, s_slots);
  EXPECT_EQ(s.cache_protected_len, 0);
  EXPECT_EQ(avail(), total() - 4);
  EXPECT_THROW(cache_->cache_unfinished_req(s, seq(1, 4)), CheckError);  // longer than committed
  cache_->cache_finished_req(s, seq(1, 4));
  EXPECT_EQ(avail(), total());
  EXPECT_THROW(cache_->insert(seq(1, 5), seq(8, 5)), CheckError);  // a partial page
  EXPECT_THROW(cache_->insert(seq(1, 8), seq(8, 4)), CheckError);  // key and value differ
  KvReqState none;
  EXPECT_THROW(cache_->cache_finished_req(none, seq(1, 8)), CheckError);
  EXPECT_THROW(cache_->cache_unfinished_req(none, seq(1, 8)), CheckError);
  KvReqState r = own_req(8, 8);
  EXPECT_THROW(cache_->cache_finished_req(r, seq(1, 7)), CheckError);  // fewer tokens than KV
  EXPECT_EQ(cache_->node_count(), 0);
  cache_->cache_finished_req(r, seq(1, 8));
  EXPECT_EQ(avail(), total() - 8);
  expect_consistent();
}

}  // namespace

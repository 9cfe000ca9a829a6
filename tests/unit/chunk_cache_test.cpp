// ChunkCache (--disable-radix-cache): nothing is shared or evictable; it carries a chunked
// request's KV from one chunk to the next and frees a finished request's slots and row.
#include "kvserve/mem/chunk_cache.h"

#include <gtest/gtest.h>

#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "kvserve/mem/allocation.h"
#include "kvserve/mem/invariants.h"
#include "kvserve/mem/page_table.h"

namespace {

using namespace kvserve;
using namespace kvserve::mem;

using Ids = std::vector<int32_t>;

Ids seq(int32_t first, int32_t n) {
  Ids v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), first);
  return v;
}
Ids head(const Ids& v, int64_t n) {
  return Ids(v.begin(), v.begin() + n);
}
Ids cat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
int32_t pages_of(int32_t tokens, int32_t ps) {
  return (tokens + ps - 1) / ps;
}

class ChunkCacheTest : public ::testing::TestWithParam<int32_t> {
 protected:
  void SetUp() override {
    ps_ = GetParam();
    pool_ = std::make_unique<ReqToTokenPool>(4, 32 * ps_);
    alloc_ = make_allocator(int64_t{64} * ps_, ps_);
    cache_ = std::make_unique<ChunkCache>(*pool_, *alloc_);
  }

  KvMemory mem() { return KvMemory{*pool_, *alloc_, *cache_}; }
  int64_t avail() const { return alloc_->available_size(); }
  Status extend(KvReqState& r, int32_t seq_len, Ids* out = nullptr) {
    KvReqState* reqs[] = {&r};
    const int32_t lens[] = {seq_len};
    Ids local;
    return alloc_for_extend(mem(), reqs, lens, out != nullptr ? *out : local);
  }
  Ids row_of(const KvReqState& r, int32_t len) const {
    const auto s = pool_->row(r.row, 0, len);
    return Ids(s.begin(), s.end());
  }
  void expect_invariants(std::span<const KvReqState* const> live) {
    const Status s = check_memory_invariants(mem(), live);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }

  int32_t ps_ = 1;
  std::unique_ptr<ReqToTokenPool> pool_;
  std::unique_ptr<BaseTokenToKVPoolAllocator> alloc_;
  std::unique_ptr<ChunkCache> cache_;
};

INSTANTIATE_TEST_SUITE_P(PageSizes, ChunkCacheTest, ::testing::Values(1, 4),
                         [](const auto& p) { return "ps" + std::to_string(p.param); });

TEST_P(ChunkCacheTest, NothingIsSharedOrEvictable) {
  EXPECT_FALSE(cache_->enabled());
  EXPECT_EQ(cache_->page_size(), ps_);

  // Even with a request's KV written, matching misses and nothing can be evicted.
  KvReqState r;
  const Ids ids = seq(1, 4 * ps_ + 1);
  ASSERT_TRUE(extend(r, 4 * ps_ + 1).is_ok());
  cache_->cache_unfinished_req(r, ids);
  const MatchResult m = cache_->match_prefix(ids);
  EXPECT_TRUE(m.indices.empty());
  EXPECT_EQ(m.last_node, nullptr);
  const int64_t before = avail();
  EXPECT_EQ(cache_->evict(0), 0);
  EXPECT_EQ(cache_->evict(1), 0);
  EXPECT_EQ(cache_->evict(1 << 20), 0);
  EXPECT_EQ(avail(), before);
  EXPECT_EQ(cache_->sizes().evictable, 0);
  EXPECT_EQ(cache_->sizes().protected_, 0);
  EXPECT_EQ(cache_->evictable_size(), 0);
  EXPECT_EQ(cache_->protected_size(), 0);
  int runs = 0;
  cache_->for_each_cached_run([&](const CachedRun&) { ++runs; });
  EXPECT_EQ(runs, 0);
  EXPECT_TRUE(cache_->check_consistency().is_ok());
  cache_->inc_lock_ref(m.last_node);  // no-ops
  cache_->dec_lock_ref(m.last_node);
  cache_->reset();
  EXPECT_EQ(avail(), before);  // reset does not touch a live request's slots
  const KvReqState* live[] = {&r};
  expect_invariants(live);
}

TEST_P(ChunkCacheTest, UnfinishedReqPointsPrefixAtTheRowWithoutFreeing) {
  const int32_t ps = ps_;
  const int32_t chunk = 2 * ps + 1;
  const Ids ids = seq(100, 5 * ps);
  KvReqState r;
  ASSERT_TRUE(extend(r, chunk).is_ok());
  const Ids row = row_of(r, chunk);
  const int64_t a1 = avail();
  const int32_t rows1 = pool_->available_size();

  cache_->cache_unfinished_req(r, head(ids, chunk));
  EXPECT_EQ(r.prefix_indices, row);
  EXPECT_EQ(avail(), a1);
  EXPECT_EQ(pool_->available_size(), rows1);
  EXPECT_TRUE(pool_->is_allocated(r.row));
  EXPECT_EQ(row_of(r, chunk), row);  // the row is not rewritten
  EXPECT_EQ(r.kv_committed_len, chunk);
  EXPECT_EQ(r.kv_allocated_len, chunk);
  EXPECT_EQ(r.cache_protected_len, 0);
  EXPECT_EQ(r.last_node, nullptr);
  for (const int32_t slot : row)
    EXPECT_FALSE(alloc_->is_page_free(slot / ps)) << slot;

  // A shorter fill_ids takes the row's first len(fill_ids) slots; a longer one is a bug.
  cache_->cache_unfinished_req(r, head(ids, chunk - 1));
  EXPECT_EQ(r.prefix_indices, head(row, chunk - 1));
  EXPECT_THROW(cache_->cache_unfinished_req(r, head(ids, chunk + 1)), CheckError);
  EXPECT_EQ(avail(), a1);
  const KvReqState* live[] = {&r};
  expect_invariants(live);
}

TEST_P(ChunkCacheTest, NextChunkExtendsTheRowAfterThePrefix) {
  const int32_t ps = ps_;
  const int32_t c1 = 2 * ps + 1;  // ends inside a page when ps > 1
  const int32_t c2 = 4 * ps + 2;
  const Ids ids = seq(100, 5 * ps);
  const int64_t a0 = avail();
  KvReqState r;
  ASSERT_TRUE(extend(r, c1).is_ok());
  const int32_t row_id = r.row;
  const Ids old_slots = row_of(r, c1);
  cache_->cache_unfinished_req(r, head(ids, c1));

  Ids out;
  ASSERT_TRUE(extend(r, c2, &out).is_ok());
  EXPECT_EQ(r.row, row_id);  // the request keeps its row
  ASSERT_EQ(static_cast<int32_t>(out.size()), c2 - c1);
  EXPECT_EQ(row_of(r, c2), cat(old_slots, out));  // [old slots | new slots]
  EXPECT_TRUE(range_is_paged(*pool_, KvRange{r.row, 0, c2}, ps));
  if (ps > 1) {
    EXPECT_EQ(out[0], old_slots.back() + 1);  // fills the partial page first
  }
  EXPECT_EQ(avail(), a0 - int64_t{pages_of(c2, ps)} * ps);
  EXPECT_EQ(r.kv_committed_len, c2);
  EXPECT_EQ(r.kv_allocated_len, c2);
  const KvReqState* live[] = {&r};
  expect_invariants(live);
}

TEST_P(ChunkCacheTest, FinishedReqFreesEverySlotAndTheRow) {
  const int32_t ps = ps_;
  const int32_t c1 = 2 * ps + 1;
  const int32_t c2 = 3 * ps + 2;
  const Ids ids = seq(100, 8 * ps);
  const int64_t a0 = avail();
  const int32_t rows0 = pool_->available_size();
  for (const bool insert : {true, false}) {
    SCOPED_TRACE(insert ? "insert" : "no insert");
    KvReqState r;
    ASSERT_TRUE(extend(r, c1).is_ok());
    cache_->cache_unfinished_req(r, head(ids, c1));
    ASSERT_TRUE(extend(r, c2).is_ok());
    // Two decode steps; the second over-allocates (its token is never committed).
    KvReqState* reqs[] = {&r};
    Ids out;
    ASSERT_TRUE(alloc_for_decode(mem(), reqs, out).is_ok());
    ASSERT_TRUE(alloc_for_decode(mem(), reqs, out).is_ok());
    r.kv_committed_len -= 1;
    const int32_t allocated = c2 + 2;
    ASSERT_EQ(r.kv_allocated_len, allocated);
    const int32_t row = r.row;
    const Ids slots = row_of(r, allocated);
    EXPECT_EQ(avail(), a0 - int64_t{pages_of(allocated, ps)} * ps);

    cache_->cache_finished_req(r, head(ids, allocated), insert);
    EXPECT_EQ(avail(), a0);  // whole pages, the partial last one included
    for (const int32_t slot : slots)
      EXPECT_TRUE(alloc_->is_page_free(slot / ps)) << slot;
    EXPECT_FALSE(pool_->is_allocated(row));
    EXPECT_EQ(pool_->available_size(), rows0);
    EXPECT_EQ(r.row, kNoRow);
    EXPECT_EQ(r.kv_committed_len, 0);
    EXPECT_EQ(r.kv_allocated_len, 0);
    EXPECT_TRUE(r.prefix_indices.empty());
    EXPECT_EQ(cache_->match_prefix(ids).indices.size(), 0u);  // nothing was cached
    expect_invariants({});
    EXPECT_THROW(cache_->cache_finished_req(r, ids), CheckError);  // no row any more
  }
}

TEST_P(ChunkCacheTest, NeverProtectsAPrefix) {
  KvReqState r;
  ASSERT_TRUE(extend(r, 2 * ps_).is_ok());
  r.cache_protected_len = ps_;
  EXPECT_THROW(cache_->cache_finished_req(r, seq(1, 2 * ps_)), CheckError);
  r.cache_protected_len = 0;
  cache_->cache_finished_req(r, seq(1, 2 * ps_));
  EXPECT_EQ(avail(), alloc_->size());
}

}  // namespace

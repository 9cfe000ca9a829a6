// Batch allocation helpers: rows + slots + req_to_token layout, transactional out-of-memory,
// decode growth, eviction from the prefix cache before allocating, and release.
#include "kvserve/mem/allocation.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/status.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/radix_cache.h"

namespace {

using namespace kvserve;
using namespace kvserve::mem;

using V = std::vector<int32_t>;

// One model instance's metadata: rows, slots and a ChunkCache or RadixCache.
struct Mem {
  Mem(int32_t rows, int32_t ctx, int64_t pages, int32_t ps, bool radix_cache)
      : req_to_token(rows, ctx), allocator(make_allocator(pages * ps, ps)) {
    if (radix_cache) {
      radix = std::make_unique<RadixCache>(req_to_token, *allocator);
      cache = radix.get();
    } else {
      chunk = std::make_unique<ChunkCache>(req_to_token, *allocator);
      cache = chunk.get();
    }
  }
  KvMemory kv() { return {req_to_token, *allocator, *cache}; }
  V row(const KvReqState& r, int32_t len) const {
    const auto s = req_to_token.row(r.row, 0, len);
    return V(s.begin(), s.end());
  }
  int32_t ps() const { return allocator->page_size(); }

  ReqToTokenPool req_to_token;
  std::unique_ptr<BaseTokenToKVPoolAllocator> allocator;
  std::unique_ptr<ChunkCache> chunk;
  std::unique_ptr<RadixCache> radix;
  PrefixCache* cache = nullptr;
};

V tokens(int32_t base, int32_t n) {
  V t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    t[i] = base + i;
  return t;
}

V free_list(const BaseTokenToKVPoolAllocator& a) {
  return V(a.free_pages().begin(), a.free_pages().end());
}

int64_t ref_pages(int64_t pre, int64_t seq, int64_t ps) {
  return ceil_div(seq, ps) - ceil_div(pre, ps);
}

::testing::AssertionResult paging_ok(const V& slots, int32_t ps) {
  for (size_t t = 0; t < slots.size(); ++t) {
    const int32_t first = slots[t - t % ps];
    if (first % ps != 0 || slots[t] != first + static_cast<int32_t>(t % ps)) {
      return ::testing::AssertionFailure() << "position " << t << " slot " << slots[t];
    }
  }
  return ::testing::AssertionSuccess();
}

void expect_same_state(const KvReqState& a, const KvReqState& b) {
  EXPECT_EQ(a.row, b.row);
  EXPECT_EQ(a.kv_committed_len, b.kv_committed_len);
  EXPECT_EQ(a.kv_allocated_len, b.kv_allocated_len);
  EXPECT_EQ(a.cache_protected_len, b.cache_protected_len);
  EXPECT_EQ(a.last_node, b.last_node);
  EXPECT_EQ(a.prefix_indices, b.prefix_indices);
}

class AllocationTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(AllocationTest, ExtendAllocatesRowsAndWritesRequestMajorLayout) {
  const int32_t ps = GetParam();
  Mem m(8, 64, 32, ps, false);
  KvReqState a, b, c;
  std::vector<KvReqState*> reqs{&a, &b, &c};
  const V seq{5, 2 * ps + 1, 1};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, seq, out).is_ok());
  ASSERT_EQ(out.size(), static_cast<size_t>(seq[0] + seq[1] + seq[2]));
  EXPECT_EQ(m.req_to_token.available_size(), 5);
  std::set<int32_t> rows;
  size_t o = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const KvReqState& r = *reqs[i];
    EXPECT_NE(r.row, kNoRow);
    EXPECT_NE(r.row, 0);
    EXPECT_TRUE(m.req_to_token.is_allocated(r.row));
    EXPECT_TRUE(rows.insert(r.row).second);
    EXPECT_EQ(r.kv_allocated_len, seq[i]);
    EXPECT_EQ(r.kv_committed_len, seq[i]);
    const V row = m.row(r, seq[i]);
    EXPECT_EQ(row, V(out.begin() + static_cast<std::ptrdiff_t>(o),
                     out.begin() + static_cast<std::ptrdiff_t>(o + seq[i])));
    EXPECT_TRUE(paging_ok(row, ps));
    o += static_cast<size_t>(seq[i]);
  }
  EXPECT_EQ(std::set<int32_t>(out.begin(), out.end()).size(), out.size());
  const int64_t pages = ref_pages(0, seq[0], ps) + ref_pages(0, seq[1], ps) + 1;
  EXPECT_EQ(m.allocator->available_size(), (32 - pages) * ps);
}

TEST_P(AllocationTest, ChunkedPrefillKeepsItsRowAndOnlyNewRequestsGetRows) {
  const int32_t ps = GetParam();
  Mem m(8, 64, 32, ps, false);
  const V toks = tokens(100, 17);
  KvReqState a;
  std::vector<KvReqState*> first{&a};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), first, V{6}, out).is_ok());
  const int32_t row_a = a.row;
  const V chunk1 = m.row(a, 6);
  m.cache->cache_unfinished_req(a, V(toks.begin(), toks.begin() + 6));
  EXPECT_EQ(a.prefix_indices, chunk1);
  EXPECT_EQ(m.req_to_token.available_size(), 7);
  const int64_t avail = m.allocator->available_size();

  // Chunk 2 of `a` together with a new request `b`.
  KvReqState b;
  std::vector<KvReqState*> batch{&a, &b};
  ASSERT_TRUE(alloc_for_extend(m.kv(), batch, V{17, 3}, out).is_ok());
  EXPECT_EQ(a.row, row_a);
  EXPECT_EQ(m.req_to_token.available_size(), 6);  // one new row, for b only
  ASSERT_EQ(out.size(), 11u + 3u);
  const V row = m.row(a, 17);
  EXPECT_EQ(V(row.begin(), row.begin() + 6), chunk1);
  EXPECT_EQ(V(row.begin() + 6, row.end()), V(out.begin(), out.begin() + 11));
  EXPECT_EQ(m.row(b, 3), V(out.begin() + 11, out.end()));
  EXPECT_TRUE(paging_ok(row, ps));
  if (6 % ps != 0) {
    EXPECT_EQ(out[0], chunk1.back() + 1);  // fills position 5's page first
  }
  EXPECT_EQ(a.kv_allocated_len, 17);
  EXPECT_EQ(a.kv_committed_len, 17);
  EXPECT_EQ(b.kv_allocated_len, 3);
  EXPECT_EQ(m.allocator->available_size(),
            avail - (ref_pages(6, 17, ps) + ref_pages(0, 3, ps)) * ps);
}

TEST_P(AllocationTest, OutOfSlotsIsTransactional) {
  const int32_t ps = GetParam();
  Mem m(8, 128, 12, ps, false);
  KvReqState a;
  std::vector<KvReqState*> first{&a};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), first, V{ps + 2}, out).is_ok());
  m.cache->cache_unfinished_req(a, tokens(0, ps + 2));
  const KvReqState a0 = a;
  const V row_a = m.row(a, ps + 2);
  const V rows_before = m.req_to_token.allocated_rows();
  const V fl = free_list(*m.allocator);
  const int64_t avail = m.allocator->available_size();

  KvReqState b, c;
  const KvReqState b0 = b, c0 = c;
  std::vector<KvReqState*> batch{&a, &b, &c};
  // a grows to 4 * ps + 2 and b takes 3 pages; c gets the rest plus one slot (one page too many).
  const int32_t rest = static_cast<int32_t>(avail - (ref_pages(ps + 2, 4 * ps + 2, ps) + 3) * ps);
  ASSERT_GT(rest, 0);
  const V seq{4 * ps + 2, 3 * ps, rest + 1};
  V out2{-1};
  const Status s = alloc_for_extend(m.kv(), batch, seq, out2);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  expect_same_state(a, a0);
  expect_same_state(b, b0);
  expect_same_state(c, c0);
  EXPECT_EQ(m.req_to_token.allocated_rows(), rows_before);
  EXPECT_EQ(m.req_to_token.available_size(), 7);
  EXPECT_EQ(m.row(a, ps + 2), row_a);
  EXPECT_EQ(m.allocator->available_size(), avail);
  EXPECT_EQ(free_list(*m.allocator), fl);

  // One slot less fits exactly.
  const V fits{seq[0], seq[1], seq[2] - 1};
  ASSERT_TRUE(alloc_for_extend(m.kv(), batch, fits, out2).is_ok());
  EXPECT_EQ(m.allocator->available_size(), 0);
  EXPECT_EQ(m.req_to_token.available_size(), 5);
  EXPECT_EQ(V(m.row(a, ps + 2)), row_a);
}

TEST_P(AllocationTest, OutOfRowsIsTransactional) {
  const int32_t ps = GetParam();
  Mem m(2, 64, 32, ps, false);
  KvReqState a;
  std::vector<KvReqState*> first{&a};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), first, V{3}, out).is_ok());
  m.cache->cache_unfinished_req(a, tokens(0, 3));
  const KvReqState a0 = a;
  const int64_t avail = m.allocator->available_size();
  const V fl = free_list(*m.allocator);

  KvReqState b, c;
  std::vector<KvReqState*> batch{&a, &b, &c};
  const Status s = alloc_for_extend(m.kv(), batch, V{5, 2, 2}, out);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  expect_same_state(a, a0);
  EXPECT_EQ(b.row, kNoRow);
  EXPECT_EQ(c.row, kNoRow);
  EXPECT_EQ(b.kv_allocated_len, 0);
  EXPECT_EQ(m.req_to_token.allocated_rows(), V{a.row});
  EXPECT_EQ(m.allocator->available_size(), avail);
  EXPECT_EQ(free_list(*m.allocator), fl);

  std::vector<KvReqState*> two{&a, &b};
  ASSERT_TRUE(alloc_for_extend(m.kv(), two, V{5, 2}, out).is_ok());
  EXPECT_EQ(m.req_to_token.available_size(), 0);
}

TEST_P(AllocationTest, DecodeWritesAtAllocatedLenAndGrowsByOne) {
  const int32_t ps = GetParam();
  Mem m(4, 64, 32, ps, false);
  KvReqState a, b;
  std::vector<KvReqState*> reqs{&a, &b};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{3, ps + 2}, out).is_ok());
  std::vector<V> rows{m.row(a, 3), m.row(b, ps + 2)};
  for (int step = 0; step < 3 * ps + 2; ++step) {
    const std::set<int32_t> free_pages(m.allocator->free_pages().begin(),
                                       m.allocator->free_pages().end());
    const int64_t avail = m.allocator->available_size();
    V dec;
    ASSERT_TRUE(alloc_for_decode(m.kv(), reqs, dec).is_ok());
    ASSERT_EQ(dec.size(), 2u);
    int64_t new_pages = 0;
    for (size_t i = 0; i < 2; ++i) {
      KvReqState& r = *reqs[i];
      V& row = rows[i];
      const auto pos = static_cast<int32_t>(row.size());
      EXPECT_EQ(r.kv_allocated_len, pos + 1);
      EXPECT_EQ(r.kv_committed_len, pos + 1);
      EXPECT_EQ(m.req_to_token.at(r.row, pos), dec[i]);
      if (pos % ps == 0) {  // a new page; with ps == 1 always a fresh slot
        EXPECT_EQ(dec[i] % ps, 0);
        EXPECT_TRUE(free_pages.count(dec[i] / ps)) << "slot " << dec[i] << " was not free";
        ++new_pages;
      } else {  // fills the partial last page first
        EXPECT_EQ(dec[i], row.back() + 1);
      }
      row.push_back(dec[i]);
      EXPECT_EQ(m.row(r, pos + 1), row);
    }
    EXPECT_EQ(m.allocator->available_size(), avail - new_pages * ps);
  }
  EXPECT_TRUE(paging_ok(rows[0], ps));
  EXPECT_TRUE(paging_ok(rows[1], ps));
}

TEST_P(AllocationTest, DecodeOutOfMemoryChangesNothing) {
  const int32_t ps = GetParam();
  Mem m(4, 64, 4, ps, false);
  KvReqState a, b;
  std::vector<KvReqState*> reqs{&a, &b};
  V out;
  // a ends on a page boundary (its next token needs a page), b in the middle of one when ps > 1.
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{2 * ps, ps + 1}, out).is_ok());
  ASSERT_EQ(m.allocator->available_size(), 0);
  const KvReqState a0 = a, b0 = b;
  const V row_a = m.row(a, 64);
  V dec{-3};
  EXPECT_EQ(alloc_for_decode(m.kv(), reqs, dec).code(), StatusCode::kOutOfMemory);
  expect_same_state(a, a0);
  expect_same_state(b, b0);
  EXPECT_EQ(m.row(a, 64), row_a);
  EXPECT_EQ(m.allocator->available_size(), 0);
  if (ps > 1) {
    // b alone stays within its page: no free slot needed.
    std::vector<KvReqState*> only_b{&b};
    ASSERT_TRUE(alloc_for_decode(m.kv(), only_b, dec).is_ok());
    EXPECT_EQ(dec, V{m.req_to_token.at(b.row, ps) + 1});
  }
}

TEST_P(AllocationTest, MisuseIsABug) {
  const int32_t ps = GetParam();
  Mem m(4, 16, 16, ps, false);
  KvReqState a;
  std::vector<KvReqState*> reqs{&a};
  V out;
  EXPECT_THROW(alloc_for_decode(m.kv(), reqs, out).ignore(), CheckError);  // no prefill
  EXPECT_THROW(alloc_for_extend(m.kv(), reqs, V{17}, out).ignore(), CheckError);
  EXPECT_THROW(alloc_for_extend(m.kv(), reqs, V{3, 4}, out).ignore(), CheckError);
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{16}, out).is_ok());
  EXPECT_THROW(alloc_for_decode(m.kv(), reqs, out).ignore(), CheckError);  // row is full
  m.cache->cache_unfinished_req(a, tokens(0, 16));
  EXPECT_THROW(alloc_for_extend(m.kv(), reqs, V{15}, out).ignore(), CheckError);  // prefix > seq
}

TEST_P(AllocationTest, ReleaseWithChunkCacheFreesRowAndSlots) {
  const int32_t ps = GetParam();
  Mem m(4, 64, 32, ps, false);
  KvReqState a, b;
  std::vector<KvReqState*> reqs{&a, &b};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{7, 2 * ps}, out).is_ok());
  for (int i = 0; i < 5; ++i)
    ASSERT_TRUE(alloc_for_decode(m.kv(), reqs, out).is_ok());
  const int32_t row_a = a.row;
  release_kv_cache(m.kv(), a, tokens(0, 12));
  EXPECT_FALSE(m.req_to_token.is_allocated(row_a));
  EXPECT_EQ(a.row, kNoRow);
  EXPECT_EQ(a.kv_allocated_len, 0);
  EXPECT_TRUE(a.prefix_indices.empty());
  EXPECT_EQ(m.allocator->available_size(), m.allocator->size() - ref_pages(0, 2 * ps + 5, ps) * ps);
  release_kv_cache(m.kv(), b, tokens(0, 2 * ps + 5), false);
  EXPECT_EQ(m.allocator->available_size(), m.allocator->size());
  EXPECT_EQ(m.req_to_token.available_size(), m.req_to_token.size());
  EXPECT_TRUE(m.req_to_token.allocated_rows().empty());
}

INSTANTIATE_TEST_SUITE_P(PageSizes, AllocationTest, ::testing::Values(1, 4));

TEST(WriteCacheIndicesTest, PrefixThenNewSlotsRequestAfterRequest) {
  ReqToTokenPool pool(4, 8);
  V rows;
  ASSERT_TRUE(pool.alloc(2, rows).is_ok());
  const V p0{10, 11, 12};
  const std::vector<std::span<const int32_t>> prefixes{p0, std::span<const int32_t>()};
  write_cache_indices(pool, rows, prefixes, V{5, 2}, V{20, 21, 30, 31});
  const auto r0 = pool.row(rows[0], 0, 5);
  const auto r1 = pool.row(rows[1], 0, 2);
  EXPECT_EQ(V(r0.begin(), r0.end()), (V{10, 11, 12, 20, 21}));
  EXPECT_EQ(V(r1.begin(), r1.end()), (V{30, 31}));
  EXPECT_THROW(write_cache_indices(pool, rows, prefixes, V{5, 2}, V{20, 21, 30}), CheckError);
  EXPECT_THROW(write_cache_indices(pool, rows, prefixes, V{5, 2}, V{20, 21, 30, 31, 32}),
               CheckError);
}

// --- with a RadixCache -----------------------------------------------------------------------

// Runs a request of `toks` through extend and release: the tree then owns its whole pages.
V cache_sequence(Mem& m, const V& toks) {
  KvReqState r;
  std::vector<KvReqState*> reqs{&r};
  V out;
  EXPECT_TRUE(alloc_for_extend(m.kv(), reqs, V{static_cast<int32_t>(toks.size())}, out).is_ok());
  const V slots = m.row(r, static_cast<int32_t>(toks.size()));
  release_kv_cache(m.kv(), r, toks);
  return slots;
}

class RadixAllocationTest : public ::testing::TestWithParam<int32_t> {
 protected:
  static constexpr int64_t kPages = 16;
  static constexpr int kLeaves = 4;
  static constexpr int64_t kLeafPages = 2;

  RadixAllocationTest() : m(8, 32 * GetParam(), kPages, GetParam(), true) {
    const int32_t ps = GetParam();
    for (int i = 0; i < kLeaves; ++i) {
      leaf_tokens.push_back(tokens(1000 * (i + 1), static_cast<int32_t>(kLeafPages) * ps));
      leaf_slots.push_back(cache_sequence(m, leaf_tokens.back()));
    }
  }
  // The slots the tree holds for leaf i (empty when it was evicted).
  V cached(int i) { return m.radix->match_prefix(leaf_tokens[i]).indices; }

  Mem m;
  std::vector<V> leaf_tokens;
  std::vector<V> leaf_slots;
};

TEST_P(RadixAllocationTest, ExtendEvictsExactlyEnoughLeastRecentlyUsedLeaves) {
  const int32_t ps = GetParam();
  const int64_t leaf = kLeafPages * ps;
  ASSERT_EQ(m.radix->evictable_size(), kLeaves * leaf);
  const int64_t free0 = m.allocator->available_size();
  ASSERT_EQ(free0, (kPages - kLeaves * kLeafPages) * ps);

  // 11 pages (the last one partial when ps > 1): 3 pages short, so ceil(3 / 2) = 2 leaves go.
  const int32_t seq = 10 * ps + 1;
  const int64_t needed = ref_pages(0, seq, ps) * ps;
  const int64_t short_by = needed - free0;
  const int64_t evicted_leaves = ceil_div(short_by, leaf);
  ASSERT_EQ(evicted_leaves, 2);
  KvReqState r;
  std::vector<KvReqState*> reqs{&r};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{seq}, out).is_ok());
  EXPECT_EQ(m.radix->evictable_size(), (kLeaves - evicted_leaves) * leaf);
  EXPECT_EQ(m.allocator->available_size(), free0 + evicted_leaves * leaf - needed);
  // The oldest leaves went; the newer ones still map to their original slots.
  for (int i = 0; i < kLeaves; ++i) {
    EXPECT_EQ(cached(i), i < evicted_leaves ? V{} : leaf_slots[i]) << "leaf " << i;
  }
  EXPECT_TRUE(m.radix->check_consistency().is_ok());

  // A decode that needs a page with none free evicts one more leaf.
  V dec;
  ASSERT_EQ(m.allocator->available_size(), ps);
  V pad;
  ASSERT_TRUE(m.allocator->alloc(ps, pad).is_ok());
  const int32_t len = r.kv_allocated_len;
  for (int32_t pos = len; pos % ps != 0; ++pos)
    ASSERT_TRUE(alloc_for_decode(m.kv(), reqs, dec).is_ok());
  ASSERT_EQ(m.allocator->available_size(), 0);
  ASSERT_TRUE(alloc_for_decode(m.kv(), reqs, dec).is_ok());
  EXPECT_EQ(m.radix->evictable_size(), (kLeaves - evicted_leaves - 1) * leaf);
  EXPECT_EQ(m.allocator->available_size(), leaf - ps);
}

TEST_P(RadixAllocationTest, LockedPrefixIsNeverEvicted) {
  const int32_t ps = GetParam();
  const int64_t leaf = kLeafPages * ps;
  // Request q reuses leaf 0 (the least recently inserted) as its locked prefix.
  V q_tokens = leaf_tokens[0];
  const V more = tokens(50000, 14 * ps);
  q_tokens.insert(q_tokens.end(), more.begin(), more.end());
  MatchResult match = m.radix->match_prefix(q_tokens);
  ASSERT_EQ(match.indices, leaf_slots[0]);
  m.radix->inc_lock_ref(match.last_node);
  KvReqState q;
  q.prefix_indices = match.indices;
  q.last_node = match.last_node;
  q.cache_protected_len = static_cast<int32_t>(leaf);
  EXPECT_EQ(m.radix->protected_size(), leaf);

  // All free slots plus every unlocked leaf: fits only by evicting all three.
  const int64_t free0 = m.allocator->available_size();
  const auto seq = static_cast<int32_t>(leaf + free0 + (kLeaves - 1) * leaf);
  std::vector<KvReqState*> reqs{&q};
  V out;
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{seq}, out).is_ok());
  EXPECT_EQ(m.allocator->available_size(), 0);
  EXPECT_EQ(m.radix->evictable_size(), 0);
  EXPECT_EQ(m.radix->protected_size(), leaf);
  EXPECT_EQ(m.row(q, static_cast<int32_t>(leaf)), leaf_slots[0]);
  const V row = m.row(q, seq);
  EXPECT_EQ(V(row.begin() + leaf, row.end()), out);
  EXPECT_EQ(cached(0), leaf_slots[0]);
  for (int i = 1; i < kLeaves; ++i)
    EXPECT_TRUE(cached(i).empty()) << i;

  // Nothing evictable is left but the locked path: another request runs out, changing nothing.
  KvReqState x;
  std::vector<KvReqState*> xs{&x};
  const V rows_before = m.req_to_token.allocated_rows();
  EXPECT_EQ(alloc_for_extend(m.kv(), xs, V{1}, out).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(x.row, kNoRow);
  EXPECT_EQ(m.req_to_token.allocated_rows(), rows_before);
  EXPECT_EQ(cached(0), leaf_slots[0]);
  EXPECT_TRUE(m.radix->check_consistency().is_ok());

  // q finishes: its whole pages join the tree (extending leaf 0's path) and nothing leaks.
  release_kv_cache(m.kv(), q, V(q_tokens.begin(), q_tokens.begin() + seq));
  EXPECT_EQ(m.radix->protected_size(), 0);
  EXPECT_EQ(m.radix->total_size() + m.allocator->available_size(), m.allocator->size());
  EXPECT_EQ(m.req_to_token.available_size(), m.req_to_token.size());
  EXPECT_EQ(cached(0), leaf_slots[0]);
  EXPECT_TRUE(m.radix->check_consistency().is_ok());
}

TEST_P(RadixAllocationTest, RadixHitPrefixIsWrittenIntoANewRow) {
  const int32_t ps = GetParam();
  const int64_t leaf = kLeafPages * ps;
  V toks = leaf_tokens[2];
  const V tail = tokens(7000, ps + 1);
  toks.insert(toks.end(), tail.begin(), tail.end());
  // The caller caps the key at len - 1.
  MatchResult match = m.radix->match_prefix(V(toks.begin(), toks.end() - 1));
  ASSERT_EQ(match.indices, leaf_slots[2]);
  m.radix->inc_lock_ref(match.last_node);
  KvReqState r;
  r.prefix_indices = match.indices;
  r.last_node = match.last_node;
  r.cache_protected_len = static_cast<int32_t>(leaf);
  const int64_t avail = m.allocator->available_size();
  std::vector<KvReqState*> reqs{&r};
  V out;
  const auto seq = static_cast<int32_t>(toks.size());
  ASSERT_TRUE(alloc_for_extend(m.kv(), reqs, V{seq}, out).is_ok());
  ASSERT_EQ(out.size(), static_cast<size_t>(ps + 1));
  V expected = leaf_slots[2];
  expected.insert(expected.end(), out.begin(), out.end());
  EXPECT_EQ(m.row(r, seq), expected);
  EXPECT_TRUE(paging_ok(expected, ps));
  EXPECT_EQ(m.allocator->available_size(), avail - ref_pages(leaf, seq, ps) * ps);
  EXPECT_EQ(m.radix->evictable_size(), (kLeaves - 1) * leaf);  // nothing evicted

  // Retracted without caching: its own slots go back, the tree keeps the shared prefix.
  release_kv_cache(m.kv(), r, toks, false);
  EXPECT_EQ(m.allocator->available_size(), avail);
  EXPECT_EQ(m.radix->protected_size(), 0);
  EXPECT_EQ(cached(2), leaf_slots[2]);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, RadixAllocationTest, ::testing::Values(1, 4));

}  // namespace

// check_memory_invariants: a consistent system (requests from alloc_for_extend, a locked cached
// prefix, evictable cached tokens) passes with a report that adds up, and each kind of corruption,
// made through the public APIs, is detected with a message that names it.
#include "kvserve/mem/invariants.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "kvserve/mem/radix_cache.h"

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
int64_t floor_pages(int64_t n, int32_t ps) {
  return n / ps * ps;
}
int64_t ceil_pages(int64_t n, int32_t ps) {
  return (n + ps - 1) / ps * ps;
}

class InvariantsTest : public ::testing::Test {
 protected:
  static constexpr int32_t kPages = 32;

  // The scenario, built through the public APIs:
  //   A finished: its whole pages are cached and locked by B, which extends them;
  //   E finished: its whole pages are cached and evictable;
  //   C runs with no cached prefix.
  void build(int32_t ps) {
    ps_ = ps;
    cache_.reset();
    b_ = KvReqState{};
    c_ = KvReqState{};
    pool_ = std::make_unique<ReqToTokenPool>(8, 16 * ps);
    alloc_ = make_allocator(int64_t{kPages} * ps, ps);
    cache_ = std::make_unique<RadixCache>(*pool_, *alloc_);

    len_a_ = 2 * ps + 1;
    const Ids a_ids = seq(10, len_a_ + 1);
    KvReqState a;
    ASSERT_TRUE(extend({&a}, {len_a_}).is_ok());
    expect_ok({&a});
    cache_->cache_finished_req(a, a_ids);
    expect_ok({});

    len_e_ = 3 * ps + 2;
    KvReqState e;
    ASSERT_TRUE(extend({&e}, {len_e_}).is_ok());
    e_ids_ = seq(5000, len_e_);
    cache_->cache_finished_req(e, e_ids_);
    expect_ok({});

    const int64_t cached_a = floor_pages(len_a_, ps);
    b_ids_ = cat(head(a_ids, cached_a), seq(900, ps + 1));
    len_b_ = static_cast<int32_t>(b_ids_.size());
    MatchResult m = cache_->match_prefix(head(b_ids_, len_b_ - 1));
    ASSERT_EQ(static_cast<int64_t>(m.indices.size()), cached_a);
    cache_->inc_lock_ref(m.last_node);
    b_.last_node = m.last_node;
    b_.cache_protected_len = static_cast<int32_t>(cached_a);
    b_.prefix_indices = std::move(m.indices);
    expect_ok({&b_});

    len_c_ = ps + 2;
    ASSERT_TRUE(extend({&b_, &c_}, {len_b_, len_c_}).is_ok());
    expect_ok(live());
  }

  Status extend(std::vector<KvReqState*> reqs, std::vector<int32_t> lens) {
    Ids out;
    return alloc_for_extend(mem(), reqs, lens, out);
  }
  KvMemory mem() { return KvMemory{*pool_, *alloc_, *cache_}; }
  std::vector<const KvReqState*> live() const { return {&b_, &c_}; }
  Status check(const std::vector<const KvReqState*>& reqs, MemoryReport* report = nullptr) {
    return check_memory_invariants(mem(), reqs, report);
  }
  void expect_ok(const std::vector<const KvReqState*>& reqs) {
    const Status s = check(reqs);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
  }
  // The check fails with kInternal and a message containing `what`.
  void expect_violation(const std::vector<const KvReqState*>& reqs, const std::string& what) {
    const Status s = check(reqs);
    EXPECT_FALSE(s.is_ok()) << "expected a violation: " << what;
    EXPECT_EQ(s.code(), StatusCode::kInternal);
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  }
  Ids row_of(const KvReqState& r, int32_t from, int32_t len) const {
    const auto s = pool_->row(r.row, from, len);
    return Ids(s.begin(), s.end());
  }

  int32_t ps_ = 1;
  int32_t len_a_ = 0, len_e_ = 0, len_b_ = 0, len_c_ = 0;
  Ids e_ids_, b_ids_;
  std::unique_ptr<ReqToTokenPool> pool_;
  std::unique_ptr<BaseTokenToKVPoolAllocator> alloc_;
  std::unique_ptr<RadixCache> cache_;
  KvReqState b_, c_;
};

TEST_F(InvariantsTest, ConsistentSystemPassesAndTheReportAddsUp) {
  for (const int32_t ps : {1, 4, 16}) {
    SCOPED_TRACE(ps);
    build(ps);
    if (HasFatalFailure()) return;
    MemoryReport r;
    const Status s = check(live(), &r);
    ASSERT_TRUE(s.is_ok()) << s.to_string();
    const int64_t total = int64_t{kPages} * ps;
    const int64_t prot = floor_pages(len_a_, ps);
    const int64_t evictable = floor_pages(len_e_, ps);
    const int64_t owned = (ceil_pages(len_b_, ps) - prot) + ceil_pages(len_c_, ps);
    EXPECT_EQ(r.total, total);
    EXPECT_EQ(r.protected_, prot);
    EXPECT_EQ(r.evictable, evictable);
    EXPECT_EQ(r.request_owned, owned);
    EXPECT_EQ(r.available, total - prot - evictable - owned);
    EXPECT_EQ(r.available, alloc_->available_size());
    EXPECT_EQ(r.available + r.evictable + r.protected_ + r.request_owned, r.total);
    EXPECT_EQ(r.rows_in_use, 2);
    EXPECT_NE(r.to_string().find(fmt::format("total {}", total)), std::string::npos);

    // Both finish: everything they held is cached or free again, no row in use.
    cache_->cache_finished_req(b_, b_ids_);
    cache_->cache_finished_req(c_, seq(7000, len_c_));
    const Status idle = check({}, &r);
    EXPECT_TRUE(idle.is_ok()) << idle.to_string();
    EXPECT_EQ(r.protected_, 0);
    EXPECT_EQ(r.request_owned, 0);
    EXPECT_EQ(r.rows_in_use, 0);
    EXPECT_EQ(r.available + r.evictable, total);
  }
}

TEST_F(InvariantsTest, LeakedPageIsDetected) {
  build(4);
  Ids leak;
  ASSERT_TRUE(alloc_->alloc(4, leak).is_ok());
  expect_violation(live(), fmt::format("page {} is owned by nobody", leak[0] / 4));
  // The report is filled either way.
  MemoryReport r;
  EXPECT_FALSE(check(live(), &r).is_ok());
  EXPECT_EQ(r.total, kPages * 4);
  EXPECT_EQ(r.available, alloc_->available_size());
  alloc_->free(leak);
  expect_ok(live());
}

TEST_F(InvariantsTest, OmittedLiveRequestIsDetected) {
  build(4);
  // C's pages are owned by nobody when C is left out; the lowest one is reported.
  int32_t lowest = kPages + 1;
  for (const int32_t slot : row_of(c_, 0, len_c_))
    lowest = std::min(lowest, slot / 4);
  expect_violation({&b_}, fmt::format("page {} is owned by nobody", lowest));

  // A request that holds only a row (no slots yet): the rows do not match.
  KvReqState d;
  d.row = pool_->alloc_one().value();
  expect_ok({&b_, &c_, &d});
  expect_violation(live(), "3 rows allocated but 2 live requests hold one");
}

TEST_F(InvariantsTest, TwoRequestsSharingAPageAreDetected) {
  build(4);
  // C's first page now points at B's first own page (a whole page, so paging still holds).
  const Ids b_page = row_of(b_, b_.cache_protected_len, 4);
  pool_->write(c_.row, 0, b_page);
  expect_violation(live(), fmt::format("page {} is owned by live request #0 and by live request #1",
                                       b_page[0] / 4));
}

TEST_F(InvariantsTest, RequestHoldingACachedPageIsDetected) {
  build(4);
  const Ids e_page = head(cache_->match_prefix(e_ids_).indices, 4);
  ASSERT_EQ(e_page.size(), 4u);
  pool_->write(c_.row, 0, e_page);
  expect_violation(
      live(),
      fmt::format("page {} is owned by the prefix cache and by live request #1", e_page[0] / 4));
}

TEST_F(InvariantsTest, RowBreakingThePagingInvariantIsDetected) {
  build(4);
  const Ids first = row_of(c_, 0, 2);
  pool_->write(c_.row, 0, Ids{first[1], first[0]});  // swap two slots within a page
  expect_violation(live(), fmt::format("request #1: row {} breaks the paging invariant", c_.row));
}

TEST_F(InvariantsTest, ProtectedLengthCoveringUncachedSlotsIsDetected) {
  build(4);
  // C's first page is its own, not the cache's.
  c_.cache_protected_len = 4;
  const int32_t page = row_of(c_, 0, 1)[0] / 4;
  expect_violation(live(), fmt::format("request #1: protected position 0 (page {})", page));
  c_.cache_protected_len = 0;
  expect_ok(live());

  // B's protected first page replaced by a page that is on the free list.
  Ids freed;
  ASSERT_TRUE(alloc_->alloc(4, freed).is_ok());
  alloc_->free(freed);
  const Ids cached = row_of(b_, 0, 4);
  pool_->write(b_.row, 0, freed);
  expect_violation(live(), fmt::format("request #0: protected position 0 (page {}) is owned by "
                                       "the free list",
                                       freed[0] / 4));

  // ... or by a slot outside the pool altogether.
  pool_->write(b_.row, 0, seq((kPages + 10) * 4, 4));
  expect_violation(live(), fmt::format("request #0: protected position 0: page {} outside 1..{}",
                                       kPages + 10, kPages));
  pool_->write(b_.row, 0, cached);
  expect_ok(live());
}

TEST_F(InvariantsTest, CheckInsideAFreeGroupIsAViolation) {
  build(4);
  alloc_->free_group_begin();
  expect_violation(live(), "free group");
  alloc_->free_group_end();
  expect_ok(live());
}

}  // namespace

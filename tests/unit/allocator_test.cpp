// KV slot allocators: page 0 reserved, page contiguity, exhaustion, page-granular frees, free
// groups, backup/restore, alloc_extend / alloc_decode against a naive reference, and a randomized
// differential test over several page sizes.
#include "kvserve/mem/allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/status.h"
#include "kvserve/mem/common.h"

namespace {

using namespace kvserve;
using namespace kvserve::mem;

using V = std::vector<int32_t>;

V free_list(const BaseTokenToKVPoolAllocator& a) {
  return V(a.free_pages().begin(), a.free_pages().end());
}

// Pages that start at a position of [pre, seq): the new pages a request needs.
int64_t ref_new_pages(int64_t pre, int64_t seq, int64_t ps) {
  int64_t n = 0;
  for (int64_t t = pre; t < seq; ++t)
    n += t % ps == 0;
  return n;
}

// slots[t] == slots[t - t % ps] + t % ps and the first slot of each page is page-aligned.
::testing::AssertionResult paging_ok(const V& slots, int32_t ps) {
  for (size_t t = 0; t < slots.size(); ++t) {
    const int32_t first = slots[t - t % ps];
    if (first % ps != 0) return ::testing::AssertionFailure() << "position " << t << ": unaligned";
    if (slots[t] != first + static_cast<int32_t>(t % ps)) {
      return ::testing::AssertionFailure()
             << "position " << t << ": slot " << slots[t] << " not in the page of slot " << first;
    }
  }
  return ::testing::AssertionSuccess();
}

// Naive reference for alloc_extend: `rows` hold each request's slots for [0, prefix); `out` is
// what the allocator returned for [prefix, seq_lens[i]), request-major. Positions in the prefix's
// partial last page continue right after last_loc; every other position t sits in a page that was
// free before the call, at offset t % ps, and each new page is used by one page of one request.
// Returns the grown rows.
std::vector<V> check_extend(const std::vector<V>& rows, const V& seq_lens, const V& out,
                            const std::set<int32_t>& free_before, int32_t ps) {
  std::vector<V> grown = rows;
  std::set<int32_t> new_pages;
  size_t o = 0;
  int64_t expected_pages = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    V& row = grown[i];
    const auto pre = static_cast<int32_t>(rows[i].size());
    expected_pages += ref_new_pages(pre, seq_lens[i], ps);
    for (int32_t t = pre; t < seq_lens[i]; ++t, ++o) {
      EXPECT_LT(o, out.size());
      if (o >= out.size()) return grown;
      const int32_t slot = out[o];
      const int32_t page_start = t - t % ps;
      if (page_start < pre) {
        EXPECT_EQ(slot, rows[i].back() + 1 + (t - pre)) << "request " << i << " position " << t;
        EXPECT_EQ(slot, rows[i][page_start] + t % ps) << "request " << i << " position " << t;
      } else if (t % ps == 0) {
        EXPECT_EQ(slot % ps, 0) << "request " << i << " position " << t;
        EXPECT_TRUE(free_before.count(slot / ps)) << "page " << slot / ps << " was not free";
        EXPECT_TRUE(new_pages.insert(slot / ps).second) << "page " << slot / ps << " twice";
      } else {
        EXPECT_EQ(slot, row[page_start] + t % ps) << "request " << i << " position " << t;
      }
      row.push_back(slot);
    }
  }
  EXPECT_EQ(o, out.size()) << "output longer than the requests' new positions";
  EXPECT_EQ(static_cast<int64_t>(new_pages.size()), expected_pages);
  return grown;
}

std::set<int32_t> free_set(const BaseTokenToKVPoolAllocator& a) {
  return std::set<int32_t>(a.free_pages().begin(), a.free_pages().end());
}

// Allocates `len` slots for a fresh request (prefix 0).
V fresh_seq(BaseTokenToKVPoolAllocator& a, int32_t len) {
  V out;
  EXPECT_TRUE(a.alloc_extend(V{0}, V{len}, V{kNoSlot}, out).is_ok());
  return out;
}

// --- construction, alloc, exhaustion ---------------------------------------------------------

TEST(AllocatorTest, MakeAllocatorPicksTheClassAndRoundsToWholePages) {
  auto a1 = make_allocator(100, 1);
  EXPECT_NE(dynamic_cast<TokenToKVPoolAllocator*>(a1.get()), nullptr);
  EXPECT_EQ(a1->num_pages(), 100);
  EXPECT_EQ(a1->available_size(), 100);

  auto a16 = make_allocator(100, 16);
  EXPECT_NE(dynamic_cast<PagedTokenToKVPoolAllocator*>(a16.get()), nullptr);
  EXPECT_EQ(a16->num_pages(), 100 / 16);
  EXPECT_EQ(a16->size(), 100 / 16 * 16);
  EXPECT_EQ(a16->available_size(), a16->size());
  EXPECT_EQ(a16->free_pages().size(), static_cast<size_t>(100 / 16));

  EXPECT_THROW(make_allocator(15, 16), CheckError);  // not even one page
  EXPECT_THROW(make_allocator(0, 1), CheckError);
  EXPECT_THROW(PagedTokenToKVPoolAllocator(64, 1), CheckError);
}

class AllocatorPageSizeTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(AllocatorPageSizeTest, PageZeroIsNeverHandedOutAndPagesAreContiguous) {
  const int32_t ps = GetParam();
  constexpr int64_t kPages = 11;
  auto a = make_allocator(kPages * ps, ps);
  EXPECT_FALSE(a->is_page_free(0));
  V all;
  // In three calls of whole pages.
  for (int64_t pages : {4, 0, 7}) {
    V out;
    ASSERT_TRUE(a->alloc(pages * ps, out).is_ok());
    ASSERT_EQ(static_cast<int64_t>(out.size()), pages * ps);
    EXPECT_TRUE(paging_ok(out, ps));
    all.insert(all.end(), out.begin(), out.end());
  }
  EXPECT_EQ(a->available_size(), 0);
  std::set<int32_t> pages;
  for (size_t i = 0; i < all.size(); i += ps) {
    EXPECT_TRUE(pages.insert(all[i] / ps).second) << "page handed out twice";
    EXPECT_FALSE(a->is_page_free(all[i] / ps));
  }
  std::set<int32_t> expected;
  for (int32_t p = 1; p <= kPages; ++p)
    expected.insert(p);
  EXPECT_EQ(pages, expected);  // every page but page 0
  EXPECT_EQ(std::set<int32_t>(all.begin(), all.end()).size(), all.size());
  for (int32_t s : all)
    EXPECT_GE(s, ps);
}

TEST_P(AllocatorPageSizeTest, ExhaustionLeavesEverythingUnchangedThenRecovers) {
  const int32_t ps = GetParam();
  auto a = make_allocator(6 * ps, ps);
  V held;
  ASSERT_TRUE(a->alloc(4 * ps, held).is_ok());
  const V before = free_list(*a);
  const int64_t avail = a->available_size();
  ASSERT_EQ(avail, 2 * ps);

  V out{42};
  Status s = a->alloc(3 * ps, out);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(a->available_size(), avail);
  EXPECT_EQ(free_list(*a), before);
  EXPECT_EQ(out, V{42});
  EXPECT_EQ(a->alloc_extend(V{0}, V{2 * ps + 1}, V{kNoSlot}, out).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(a->alloc_decode(V{1, 1, 1}, V{kNoSlot, kNoSlot, kNoSlot}, out).code(),
            StatusCode::kOutOfMemory);
  EXPECT_EQ(a->available_size(), avail);
  EXPECT_EQ(free_list(*a), before);

  ASSERT_TRUE(a->alloc(2 * ps, out).is_ok());
  EXPECT_EQ(a->available_size(), 0);
  EXPECT_EQ(a->alloc(ps, out).code(), StatusCode::kOutOfMemory);

  // Free one page of `held`: exactly that page comes back.
  const int32_t page = held[ps] / ps;
  a->free(V{held[ps]});
  EXPECT_EQ(a->available_size(), ps);
  EXPECT_TRUE(a->is_page_free(page));
  V again;
  ASSERT_TRUE(a->alloc(ps, again).is_ok());
  EXPECT_EQ(again[0], page * ps);
  EXPECT_TRUE(paging_ok(again, ps));
}

TEST_P(AllocatorPageSizeTest, ClearFreesEverything) {
  const int32_t ps = GetParam();
  auto a = make_allocator(8 * ps, ps);
  V out;
  ASSERT_TRUE(a->alloc(5 * ps, out).is_ok());
  a->free(V{out[0]});
  a->clear();
  EXPECT_EQ(a->available_size(), a->size());
  EXPECT_EQ(a->free_pages().size(), static_cast<size_t>(a->num_pages()));
  for (int64_t p = 1; p <= a->num_pages(); ++p)
    EXPECT_TRUE(a->is_page_free(p));
  EXPECT_FALSE(a->is_page_free(0));
  EXPECT_THROW(a->free(V{out[ps]}), CheckError);  // already free after clear
  ASSERT_TRUE(a->alloc(a->size(), out).is_ok());
}

INSTANTIATE_TEST_SUITE_P(PageSizes, AllocatorPageSizeTest, ::testing::Values(1, 2, 4, 16));

// --- free ------------------------------------------------------------------------------------

TEST(AllocatorFreeTest, AnySlotOfAPageFreesTheWholePageOnce) {
  constexpr int32_t ps = 4;
  PagedTokenToKVPoolAllocator a(10 * ps, ps);
  V out;
  ASSERT_TRUE(a.alloc(3 * ps, out).is_ok());
  const int32_t p0 = out[0] / ps, p1 = out[ps] / ps, p2 = out[2 * ps] / ps;
  const int64_t avail = a.available_size();

  a.free(V{out[ps + 2]});  // a middle slot of the second page
  EXPECT_EQ(a.available_size(), avail + ps);
  EXPECT_TRUE(a.is_page_free(p1));
  EXPECT_FALSE(a.is_page_free(p0));
  EXPECT_FALSE(a.is_page_free(p2));

  // Several slots of one page in one call: one free.
  a.free(V{out[2 * ps + 3], out[2 * ps], out[2 * ps + 1], out[2 * ps + 3]});
  EXPECT_EQ(a.available_size(), avail + 2 * ps);
  EXPECT_TRUE(a.is_page_free(p2));
  EXPECT_EQ(std::count(a.free_pages().begin(), a.free_pages().end(), p2), 1);

  // Any slot of an already free page is a double free.
  EXPECT_THROW(a.free(V{p1 * ps}), CheckError);
  EXPECT_THROW(a.free(V{p2 * ps + 3}), CheckError);

  a.free(V{});  // nothing
  EXPECT_EQ(a.available_size(), avail + 2 * ps);
}

TEST(AllocatorFreeTest, ReservedPageAndOutOfRangeSlotsAreBugs) {
  for (int32_t ps : {1, 4}) {
    SCOPED_TRACE(ps);
    auto a = make_allocator(8 * ps, ps);
    V out;
    ASSERT_TRUE(a->alloc(a->size(), out).is_ok());
    EXPECT_THROW(a->free(V{0}), CheckError);
    EXPECT_THROW(a->free(V{ps - 1}), CheckError);  // last slot of page 0
    EXPECT_THROW(a->free(V{-1}), CheckError);
    EXPECT_THROW(a->free(V{static_cast<int32_t>((a->num_pages() + 1) * ps)}), CheckError);
    EXPECT_EQ(a->available_size(), 0);
    // The last slot of the last page is in range; the same slot twice in one call is one free.
    const auto last = static_cast<int32_t>((a->num_pages() + 1) * ps - 1);
    a->free(V{last, last});
    EXPECT_EQ(a->available_size(), ps);
    EXPECT_THROW(a->free(V{last}), CheckError);
  }
}

TEST(AllocatorFreeTest, FreeGroupBuffersUntilEndAndDedupsAcrossFrees) {
  constexpr int32_t ps = 4;
  PagedTokenToKVPoolAllocator a(10 * ps, ps);
  V out;
  ASSERT_TRUE(a.alloc(3 * ps, out).is_ok());
  const int64_t avail = a.available_size();

  EXPECT_FALSE(a.in_free_group());
  a.free_group_begin();
  EXPECT_TRUE(a.in_free_group());
  a.free(V{out[0]});
  a.free(V{out[1], out[3]});  // same page as the first free
  a.free(V{out[2 * ps + 2]});
  EXPECT_EQ(a.available_size(), avail);  // nothing applied yet
  EXPECT_FALSE(a.is_page_free(out[0] / ps));
  EXPECT_THROW(a.free_group_begin(), CheckError);  // no nesting
  EXPECT_THROW(a.clear(), CheckError);
  a.free_group_end();
  EXPECT_FALSE(a.in_free_group());
  EXPECT_EQ(a.available_size(), avail + 2 * ps);
  EXPECT_TRUE(a.is_page_free(out[0] / ps));
  EXPECT_FALSE(a.is_page_free(out[ps] / ps));
  EXPECT_TRUE(a.is_page_free(out[2 * ps] / ps));

  EXPECT_THROW(a.free_group_end(), CheckError);  // without begin
  a.free_group_begin();
  a.free_group_end();  // an empty group
  EXPECT_EQ(a.available_size(), avail + 2 * ps);

  // A page freed before the group and again inside it: the double free shows at end.
  a.free_group_begin();
  a.free(V{out[0]});
  EXPECT_THROW(a.free_group_end(), CheckError);
}

// --- backup / restore ------------------------------------------------------------------------

TEST(AllocatorStateTest, RestoreRollsBackAllocations) {
  for (int32_t ps : {1, 4}) {
    SCOPED_TRACE(ps);
    auto a = make_allocator(16 * ps, ps);
    V keep;
    ASSERT_TRUE(a->alloc(3 * ps, keep).is_ok());
    a->free(V{keep[0]});  // a free before the backup is fine
    const V before = free_list(*a);
    const int64_t avail = a->available_size();

    const AllocatorState st = a->backup_state();
    V x, y;
    ASSERT_TRUE(a->alloc(2 * ps, x).is_ok());
    ASSERT_TRUE(a->alloc_extend(V{0}, V{3 * ps + 1}, V{kNoSlot}, y).is_ok());
    ASSERT_TRUE(a->alloc_decode(V{1}, V{kNoSlot}, y).is_ok());
    EXPECT_LT(a->available_size(), avail);
    a->restore_state(st);
    EXPECT_EQ(a->available_size(), avail);
    EXPECT_EQ(free_list(*a), before);
    for (int32_t p : before)
      EXPECT_TRUE(a->is_page_free(p));
    EXPECT_FALSE(a->is_page_free(keep[ps] / ps));

    // The rolled-back pages are usable; the whole free space can be taken.
    V all;
    ASSERT_TRUE(a->alloc(avail, all).is_ok());
    EXPECT_EQ(a->available_size(), 0);
    a->free(all);
    EXPECT_EQ(a->available_size(), avail);
  }
}

TEST(AllocatorStateTest, RestoreAfterAFreeOrClearThrows) {
  constexpr int32_t ps = 4;
  PagedTokenToKVPoolAllocator a(16 * ps, ps);
  V keep, x;
  ASSERT_TRUE(a.alloc(2 * ps, keep).is_ok());

  AllocatorState st = a.backup_state();
  ASSERT_TRUE(a.alloc(ps, x).is_ok());
  a.free(V{keep[0]});  // freeing a page allocated before the backup
  EXPECT_THROW(a.restore_state(st), CheckError);

  st = a.backup_state();
  ASSERT_TRUE(a.alloc(ps, x).is_ok());
  a.free(x);  // freeing what was allocated after the backup
  EXPECT_THROW(a.restore_state(st), CheckError);

  st = a.backup_state();
  a.free_group_begin();
  a.free(V{keep[ps]});
  a.free_group_end();
  EXPECT_THROW(a.restore_state(st), CheckError);

  st = a.backup_state();
  a.clear();
  EXPECT_THROW(a.restore_state(st), CheckError);

  // No change at all: restore is a no-op.
  st = a.backup_state();
  a.restore_state(st);
  EXPECT_EQ(a.available_size(), a.size());
}

// --- alloc_extend ----------------------------------------------------------------------------

TEST(AllocExtendTest, HandCheckedPartialWholeAndTrailingParts) {
  constexpr int32_t ps = 4;
  PagedTokenToKVPoolAllocator a(16 * ps, ps);
  const V prefix = fresh_seq(a, 6);
  ASSERT_EQ(prefix.size(), 6u);
  const int32_t pa = prefix[0] / ps, pb = prefix[4] / ps;
  EXPECT_EQ(prefix, (V{pa * 4, pa * 4 + 1, pa * 4 + 2, pa * 4 + 3, pb * 4, pb * 4 + 1}));
  EXPECT_NE(pa, pb);
  EXPECT_EQ(a.available_size(), a.size() - 8);

  // Positions 6..16: 6, 7 fill page B after last_loc; 8..11 and 12..15 are two whole new pages;
  // 16 is a trailing partial page. 3 new pages.
  EXPECT_EQ(a.extend_slots_needed(V{6}, V{17}), 12);
  const int32_t last_loc = prefix[5];
  V out;
  ASSERT_TRUE(a.alloc_extend(V{6}, V{17}, V{last_loc}, out).is_ok());
  ASSERT_EQ(out.size(), 11u);
  EXPECT_EQ(out[0], last_loc + 1);
  EXPECT_EQ(out[1], last_loc + 2);
  EXPECT_EQ(out[1], pb * 4 + 3);
  const int32_t pc = out[2] / ps, pd = out[6] / ps, pe = out[10] / ps;
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(out[2 + k], pc * 4 + k);
    EXPECT_EQ(out[6 + k], pd * 4 + k);
  }
  EXPECT_EQ(out[10], pe * 4);
  const std::set<int32_t> pages{0, pa, pb, pc, pd, pe};
  EXPECT_EQ(pages.size(), 6u);  // distinct and none is page 0
  EXPECT_EQ(a.available_size(), a.size() - 20);
}

TEST(AllocatorTest, MisuseIsABug) {
  constexpr int32_t ps = 4;
  PagedTokenToKVPoolAllocator a(16 * ps, ps);
  const V prefix = fresh_seq(a, 6);
  V out;
  EXPECT_THROW(a.alloc(5, out).ignore(), CheckError);  // not whole pages
  EXPECT_THROW(a.alloc(-4, out).ignore(), CheckError);
  EXPECT_THROW(TokenToKVPoolAllocator(8).alloc(-1, out).ignore(), CheckError);
  // last_loc must be the slot of position prefix - 1 within its page.
  EXPECT_THROW(a.alloc_extend(V{6}, V{9}, V{prefix[4]}, out).ignore(), CheckError);
  EXPECT_THROW(a.alloc_extend(V{7}, V{6}, V{prefix[5]}, out).ignore(), CheckError);
  EXPECT_THROW(a.alloc_extend(V{6}, V{9}, V{kNoSlot}, out).ignore(), CheckError);
  EXPECT_THROW(a.alloc_extend(V{2}, V{9}, V{0 * ps + 1}, out).ignore(), CheckError);  // page 0
  EXPECT_THROW(a.alloc_extend(V{6}, V{9, 9}, V{prefix[5]}, out).ignore(), CheckError);
  // last_loc in a free page.
  const int32_t free_page = a.free_pages().back();
  EXPECT_THROW(a.alloc_extend(V{2}, V{9}, V{free_page * ps + 1}, out).ignore(), CheckError);
  // The same for decode.
  EXPECT_THROW(a.alloc_decode(V{7}, V{prefix[4]}, out).ignore(), CheckError);
  EXPECT_THROW(a.alloc_decode(V{7}, V{free_page * ps + 1}, out).ignore(), CheckError);
  EXPECT_THROW(a.alloc_decode(V{7, 8}, V{prefix[5]}, out).ignore(), CheckError);
  EXPECT_EQ(a.available_size(), a.size() - 8);
}

// Prefix lengths zero, on, one before and one after page boundaries, and equal to seq, each
// with every extension length up to two pages and more, all in one call: each request is
// checked against the reference and the output is request-major.
TEST(AllocExtendTest, BoundaryPrefixesManyRequestsInOneCall) {
  for (int32_t ps : {1, 2, 3, 4, 16, 64}) {
    SCOPED_TRACE(ps);
    auto a = make_allocator(60 * (2 * ps + 4) * ps, ps);  // at most 6 pages a request
    V pres, seqs, last;
    std::vector<V> rows;
    int64_t pages = 0;
    for (int32_t pre : {0, 1, ps - 1, ps, ps + 1, 2 * ps - 1, 2 * ps, 2 * ps + 1, 3 * ps}) {
      for (int32_t ext = 0; ext <= 2 * ps + 3; ++ext) {
        rows.push_back(pre > 0 ? fresh_seq(*a, pre) : V{});
        pres.push_back(pre);
        seqs.push_back(pre + ext);
        last.push_back(pre > 0 ? rows.back().back() : kNoSlot);
        pages += ref_new_pages(pre, pre + ext, ps);
        ASSERT_EQ(a->extend_slots_needed(V{pre}, V{pre + ext}),
                  ref_new_pages(pre, pre + ext, ps) * ps);
      }
    }
    EXPECT_EQ(a->extend_slots_needed(pres, seqs), pages * ps);
    const std::set<int32_t> free_before = free_set(*a);
    const int64_t avail = a->available_size();
    V out;
    ASSERT_TRUE(a->alloc_extend(pres, seqs, last, out).is_ok());
    const std::vector<V> grown = check_extend(rows, seqs, out, free_before, ps);
    std::set<int32_t> all;
    for (const V& g : grown) {
      EXPECT_TRUE(paging_ok(g, ps));
      for (int32_t s : g)
        EXPECT_TRUE(all.insert(s).second) << "slot " << s << " shared";
    }
    EXPECT_EQ(a->available_size(), avail - pages * ps);

    // One slot more than fits: out of memory, nothing changes; exactly what fits succeeds.
    const V fl = free_list(*a);
    V big;
    const auto fit = static_cast<int32_t>(a->available_size());
    EXPECT_EQ(a->alloc_extend(V{0}, V{fit + 1}, V{kNoSlot}, big).code(), StatusCode::kOutOfMemory);
    EXPECT_EQ(free_list(*a), fl);
    ASSERT_TRUE(a->alloc_extend(V{0}, V{fit}, V{kNoSlot}, big).is_ok());
    EXPECT_EQ(a->available_size(), 0);
  }
}

// --- alloc_decode ----------------------------------------------------------------------------

// One position at a time: a new page exactly when (seq_len - 1) % ps == 0, else last_loc + 1.
TEST(AllocDecodeTest, NewPageExactlyAtPageStarts) {
  for (int32_t ps : {1, 2, 3, 4, 16}) {
    SCOPED_TRACE(ps);
    auto a = make_allocator(32 * ps, ps);
    std::vector<V> row(1);
    for (int32_t len = 1; len <= 5 * ps + 2; ++len) {
      const int64_t pages = (len - 1) % ps == 0 ? 1 : 0;
      EXPECT_EQ(a->decode_slots_needed(V{len}), pages * ps);
      const std::set<int32_t> free_before = free_set(*a);
      const int64_t avail = a->available_size();
      V out;
      const int32_t last = row[0].empty() ? kNoSlot : row[0].back();
      ASSERT_TRUE(a->alloc_decode(V{len}, V{last}, out).is_ok());
      row = check_extend(row, V{len}, out, free_before, ps);
      EXPECT_EQ(a->available_size(), avail - pages * ps);
    }
    EXPECT_TRUE(paging_ok(row[0], ps));
  }
}

TEST(AllocDecodeTest, BatchAndOutOfMemory) {
  constexpr int32_t ps = 4;
  PagedTokenToKVPoolAllocator a(6 * ps, ps);
  // Lengths 4 (full page), 5 and 6: the next decode of the first needs a page, the others not.
  std::vector<V> rows{fresh_seq(a, 4), fresh_seq(a, 5), fresh_seq(a, 6)};
  V out;
  ASSERT_TRUE(a.alloc(a.available_size(), out).is_ok());  // take everything else
  ASSERT_EQ(a.available_size(), 0);
  const V lens{5, 6, 7};
  const V last{rows[0].back(), rows[1].back(), rows[2].back()};
  EXPECT_EQ(a.decode_slots_needed(lens), ps);
  V dec{-5};
  EXPECT_EQ(a.alloc_decode(lens, last, dec).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(dec, V{-5});
  EXPECT_EQ(a.available_size(), 0);
  EXPECT_TRUE(a.free_pages().empty());

  // The two that stay within their pages succeed with nothing free.
  EXPECT_EQ(a.decode_slots_needed(V{6, 7}), 0);
  ASSERT_TRUE(a.alloc_decode(V{6, 7}, V{last[1], last[2]}, dec).is_ok());
  EXPECT_EQ(dec, (V{last[1] + 1, last[2] + 1}));

  rows[1].push_back(dec[0]);
  rows[2].push_back(dec[1]);

  // After a free, the batch including a page start works.
  a.free(V{out[0]});
  const std::set<int32_t> free_before = free_set(a);
  const V lens2{5, 7, 8};
  ASSERT_TRUE(a.alloc_decode(lens2, V{last[0], last[1] + 1, last[2] + 1}, dec).is_ok());
  rows = check_extend(rows, lens2, dec, free_before, ps);
  EXPECT_EQ(a.available_size(), 0);
}

// --- randomized differential test ------------------------------------------------------------

uint64_t test_seed() {
  const char* env = std::getenv("KVSERVE_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 20240611u;
}

// (a) no slot owned twice, (b) paging invariant per sequence, (c) slot accounting.
void check_invariants(const BaseTokenToKVPoolAllocator& a, const std::vector<V>& seqs) {
  const int32_t ps = a.page_size();
  std::vector<int> owner(static_cast<size_t>((a.num_pages() + 1) * ps), -1);
  std::set<int32_t> held_pages;
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_TRUE(paging_ok(seqs[i], ps)) << "sequence " << i;
    for (int32_t s : seqs[i]) {
      ASSERT_GE(s, ps) << "slot in page 0";
      ASSERT_LT(s, (a.num_pages() + 1) * ps);
      ASSERT_EQ(owner[s], -1) << "slot " << s << " owned by " << owner[s] << " and " << i;
      owner[s] = static_cast<int>(i);
      held_pages.insert(s / ps);
    }
  }
  ASSERT_EQ(a.available_size() + static_cast<int64_t>(held_pages.size()) * ps, a.size());
  ASSERT_EQ(static_cast<int64_t>(a.free_pages().size()) * ps, a.available_size());
  for (int32_t p : a.free_pages()) {
    ASSERT_TRUE(a.is_page_free(p));
    ASSERT_FALSE(held_pages.count(p)) << "held page " << p << " on the free list";
  }
  for (int32_t p : held_pages)
    ASSERT_FALSE(a.is_page_free(p));
}

class AllocatorRandomTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(AllocatorRandomTest, DifferentialAgainstPerSequenceModel) {
  const int32_t ps = GetParam();
  const uint64_t seed = test_seed();
  std::cout << "KVSERVE_TEST_SEED=" << seed << " (page size " << ps << ")\n";
  SCOPED_TRACE(::testing::Message() << "KVSERVE_TEST_SEED=" << seed << " page size " << ps);
  std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(ps));
  auto rnd = [&](int64_t n) { return static_cast<int32_t>(rng() % static_cast<uint64_t>(n)); };

  constexpr int64_t kPages = 40;
  constexpr size_t kSeqs = 6;
  const int32_t max_len = 12 * ps + 3;
  auto a = make_allocator(kPages * ps, ps);
  std::vector<V> seqs(kSeqs);
  int ooms = 0, extends = 0, decodes = 0;

  auto pick = [&](bool nonempty_only) {
    std::vector<size_t> ids;
    for (size_t i = 0; i < kSeqs; ++i) {
      if ((!nonempty_only || !seqs[i].empty()) && rnd(2) == 0) ids.push_back(i);
    }
    std::shuffle(ids.begin(), ids.end(), rng);
    return ids;
  };
  // An extend (or a decode: one more position each) of the chosen sequences, checked against the
  // reference; out of memory exactly when the reference needs more pages than are free.
  auto grow = [&](const std::vector<size_t>& ids, bool decode) {
    V pres, lens, last;
    std::vector<V> rows;
    int64_t pages = 0;
    for (size_t i : ids) {
      const auto pre = static_cast<int32_t>(seqs[i].size());
      int32_t ext = rnd(4) == 0 ? (ps - pre % ps) % ps + ps * rnd(3) : rnd(3 * ps + 2);
      ext = decode ? 1 : std::min(ext, max_len - pre);
      pres.push_back(pre);
      lens.push_back(pre + ext);
      last.push_back(pre > 0 ? seqs[i].back() : kNoSlot);
      rows.push_back(seqs[i]);
      pages += ref_new_pages(pre, pre + ext, ps);
    }
    EXPECT_EQ(decode ? a->decode_slots_needed(lens) : a->extend_slots_needed(pres, lens),
              pages * ps);
    const std::set<int32_t> free_before = free_set(*a);
    const V fl = free_list(*a);
    V out;
    const Status s =
        decode ? a->alloc_decode(lens, last, out) : a->alloc_extend(pres, lens, last, out);
    if (pages > static_cast<int64_t>(fl.size())) {
      EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
      EXPECT_EQ(free_list(*a), fl);
      ++ooms;
      return;
    }
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    const std::vector<V> grown = check_extend(rows, lens, out, free_before, ps);
    for (size_t k = 0; k < ids.size(); ++k)
      seqs[ids[k]] = grown[k];
    ++(decode ? decodes : extends);
  };

  for (int step = 0; step < 2500 && !::testing::Test::HasFailure(); ++step) {
    const int op = rnd(10);
    if (op < 4) {
      const auto ids = pick(false);
      if (!ids.empty()) grow(ids, false);
    } else if (op < 7) {
      std::vector<size_t> ids;
      for (size_t i : pick(true)) {
        if (static_cast<int32_t>(seqs[i].size()) < max_len) ids.push_back(i);
      }
      if (!ids.empty()) grow(ids, true);
    } else if (op < 9) {
      // Free whole sequences (in a free group when several), passing all slots, all slots
      // shuffled, or one slot per page.
      const auto ids = pick(true);
      const bool group = ids.size() > 1 && rnd(2) == 0;
      if (group) a->free_group_begin();
      for (size_t i : ids) {
        V slots = seqs[i];
        const int how = rnd(3);
        if (how == 1) std::shuffle(slots.begin(), slots.end(), rng);
        if (how == 2) {
          V one;
          for (size_t t = 0; t < seqs[i].size(); t += ps) {
            const size_t off = std::min<size_t>(rnd(ps), seqs[i].size() - 1 - t);
            one.push_back(seqs[i][t + off]);
          }
          slots = one;
        }
        a->free(slots);
        seqs[i].clear();
      }
      if (group) a->free_group_end();
    } else if (rnd(2) == 0) {
      // Truncate a sequence to a page boundary (a retraction of its tail).
      const auto ids = pick(true);
      if (ids.empty()) continue;
      V& row = seqs[ids[0]];
      const auto keep = static_cast<size_t>(floor_align(rnd(static_cast<int64_t>(row.size())), ps));
      a->free(V(row.begin() + static_cast<std::ptrdiff_t>(keep), row.end()));
      row.resize(keep);
    } else {
      // A speculative extend rolled back.
      const auto ids = pick(false);
      if (ids.empty()) continue;
      const std::vector<V> saved = seqs;
      const V fl = free_list(*a);
      const AllocatorState st = a->backup_state();
      grow(ids, false);
      a->restore_state(st);
      seqs = saved;
      EXPECT_EQ(free_list(*a), fl);
    }
    check_invariants(*a, seqs);
  }
  std::cout << "  extends " << extends << ", decodes " << decodes << ", out of memory " << ooms
            << "\n";
  EXPECT_GT(extends, 100);
  EXPECT_GT(decodes, 100);
  EXPECT_GT(ooms, 0);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, AllocatorRandomTest, ::testing::Values(1, 2, 3, 16, 64, 128));

}  // namespace

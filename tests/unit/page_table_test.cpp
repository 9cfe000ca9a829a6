// Page tables, CSR indices and cu_seqlens against a per-position reference.
#include <gtest/gtest.h>

#include <random>

#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/page_table.h"

namespace kvserve::mem {
namespace {

// A few requests with random lengths, allocated the way the scheduler does (prefill, then decode).
struct Fixture {
  ReqToTokenPool rows{8, 512};
  std::unique_ptr<BaseTokenToKVPoolAllocator> alloc;
  ChunkCache cache;
  std::vector<KvReqState> reqs;

  Fixture(int32_t ps, uint64_t seed) : alloc(make_allocator(4096, ps)), cache(rows, *alloc) {
    std::mt19937_64 rng(seed);
    reqs.resize(5);
    KvMemory mem{rows, *alloc, cache};
    for (auto& r : reqs) {
      KvReqState* p = &r;
      int32_t len = static_cast<int32_t>(rng() % 300);
      if (len == 0) len = 1;
      std::vector<int32_t> out;
      EXPECT_TRUE(alloc_for_extend(mem, std::span(&p, 1), std::span(&len, 1), out).is_ok());
    }
    // Decode steps interleaved across requests scatter their pages.
    for (int step = 0; step < 40; ++step) {
      KvReqState* p = &reqs[rng() % reqs.size()];
      std::vector<int32_t> out;
      EXPECT_TRUE(alloc_for_decode(mem, std::span(&p, 1), out).is_ok());
    }
  }
};

TEST(PageTable, StridedDerivationMatchesEveryPosition) {
  for (const int32_t ps : {1, 2, 16, 64}) {
    SCOPED_TRACE(testing::Message() << "page size " << ps);
    Fixture f(ps, 17 + ps);
    std::vector<KvRange> ranges;
    for (const auto& r : f.reqs)
      ranges.push_back({r.row, 0, r.kv_allocated_len});
    ranges.push_back({0, 0, 0});  // an empty (padding) entry
    PageTable pt;
    build_page_table(f.rows, ranges, ps, pt);
    ASSERT_EQ(pt.table.size(), ranges.size() * pt.max_pages);
    int64_t total = 0;
    for (size_t b = 0; b < ranges.size(); ++b) {
      const auto row = f.rows.row(ranges[b].row);
      total += ranges[b].len;
      EXPECT_EQ(pt.kv_lens[b], ranges[b].len);
      // The kernel's address computation must reproduce every slot of the row.
      for (int32_t t = 0; t < ranges[b].len; ++t) {
        ASSERT_EQ(pt.table[b * pt.max_pages + t / ps] * ps + t % ps, row[t]) << b << " " << t;
      }
      for (int32_t j = static_cast<int32_t>((ranges[b].len + ps - 1) / ps); j < pt.max_pages; ++j) {
        EXPECT_EQ(pt.table[b * pt.max_pages + j], 0);  // padding reads page 0
      }
    }
    EXPECT_EQ(pt.total_kv(), total);
  }
}

TEST(PageTable, CsrTokenAndPageIndices) {
  const int32_t ps = 16;
  Fixture f(ps, 5);
  std::vector<KvRange> ranges;
  for (const auto& r : f.reqs)
    ranges.push_back({r.row, 0, r.kv_allocated_len});
  KvIndices tok;
  KvIndices pages;
  build_kv_indices(f.rows, ranges, IndexUnit::kToken, ps, tok);
  build_kv_indices(f.rows, ranges, IndexUnit::kPage, ps, pages);
  ASSERT_EQ(tok.indptr.size(), ranges.size() + 1);
  ASSERT_EQ(pages.indptr.size(), ranges.size() + 1);
  EXPECT_EQ(tok.indptr[0], 0);
  for (size_t b = 0; b < ranges.size(); ++b) {
    const auto row = f.rows.row(ranges[b].row);
    const int32_t len = ranges[b].len;
    ASSERT_EQ(tok.indptr[b + 1] - tok.indptr[b], len);
    for (int32_t t = 0; t < len; ++t)
      ASSERT_EQ(tok.indices[tok.indptr[b] + t], row[t]);
    ASSERT_EQ(pages.indptr[b + 1] - pages.indptr[b], (len + ps - 1) / ps);
    EXPECT_EQ(pages.last_page_len[b], len - (len - 1) / ps * ps);
    for (int32_t t = 0; t < len; ++t) {
      ASSERT_EQ(pages.indices[pages.indptr[b] + t / ps] * ps + t % ps, row[t]);
    }
  }
  EXPECT_EQ(tok.total_kv(), pages.total_kv());
}

TEST(PageTable, OffsetRangesAndMidPageStarts) {
  const int32_t ps = 16;
  Fixture f(ps, 9);
  const KvReqState& r = f.reqs[0];
  ASSERT_GE(r.kv_allocated_len, 33);
  // A page-aligned offset (the decoder region of an aligned encoder-decoder row) works...
  KvIndices idx;
  build_kv_indices(f.rows, std::vector<KvRange>{{r.row, 16, r.kv_allocated_len - 16}},
                   IndexUnit::kPage, ps, idx);
  EXPECT_EQ(idx.indices[0] * ps, f.rows.at(r.row, 16));
  // ...a mid-page offset can only be gathered token by token.
  EXPECT_THROW(
      build_kv_indices(f.rows, std::vector<KvRange>{{r.row, 5, 10}}, IndexUnit::kPage, ps, idx),
      CheckError);
  PageTable pt;
  EXPECT_THROW(build_page_table(f.rows, std::vector<KvRange>{{r.row, 5, 10}}, ps, pt), CheckError);
  build_kv_indices(f.rows, std::vector<KvRange>{{r.row, 5, 10}}, IndexUnit::kToken, ps, idx);
  EXPECT_EQ(idx.indices[0], f.rows.at(r.row, 5));
  EXPECT_EQ(idx.indices.size(), 10u);
}

TEST(PageTable, CuSeqlens) {
  std::vector<int32_t> cu;
  build_cu_seqlens(std::vector<int32_t>{3, 0, 5, 1}, cu);
  EXPECT_EQ(cu, (std::vector<int32_t>{0, 3, 3, 8, 9}));
  build_cu_seqlens(std::vector<int32_t>{}, cu);
  EXPECT_EQ(cu, std::vector<int32_t>{0});
}

TEST(PageTable, RangeIsPagedDetectsBrokenRows) {
  const int32_t ps = 4;
  Fixture f(ps, 3);
  const KvReqState& r = f.reqs[1];
  ASSERT_GE(r.kv_allocated_len, 8);
  EXPECT_TRUE(range_is_paged(f.rows, {r.row, 0, r.kv_allocated_len}, ps));
  const int32_t s1 = f.rows.at(r.row, 1);
  const int32_t s2 = f.rows.at(r.row, 2);
  f.rows.write_one(r.row, 1, s2);
  f.rows.write_one(r.row, 2, s1);
  EXPECT_FALSE(range_is_paged(f.rows, {r.row, 0, r.kv_allocated_len}, ps));
  EXPECT_TRUE(range_is_paged(f.rows, {r.row, 4, r.kv_allocated_len - 4}, ps));
  EXPECT_FALSE(range_is_paged(f.rows, {r.row, 2, 2}, ps));  // mid-page start
}

}  // namespace
}  // namespace kvserve::mem

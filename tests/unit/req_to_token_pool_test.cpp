// ReqToTokenPool: row allocation (row 0 reserved), exhaustion, misuse CHECKs and the table.
#include "kvserve/mem/req_to_token_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/status.h"

namespace {

using namespace kvserve;
using namespace kvserve::mem;

std::vector<int32_t> sorted(std::vector<int32_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

std::vector<int32_t> iota_rows(int32_t first, int32_t last) {
  std::vector<int32_t> v(static_cast<size_t>(last - first + 1));
  std::iota(v.begin(), v.end(), first);
  return v;
}

TEST(ReqToTokenPoolTest, ConstructorReportsSizes) {
  ReqToTokenPool pool(8, 32);
  EXPECT_EQ(pool.size(), 8);
  EXPECT_EQ(pool.max_context_len(), 32);
  EXPECT_EQ(pool.available_size(), 8);
  EXPECT_TRUE(pool.allocated_rows().empty());
  EXPECT_NE(pool.data(), nullptr);
}

TEST(ReqToTokenPoolTest, ConstructorRejectsEmptyPools) {
  EXPECT_THROW(ReqToTokenPool(0, 16), CheckError);
  EXPECT_THROW(ReqToTokenPool(4, 0), CheckError);
}

TEST(ReqToTokenPoolTest, AllocAllRowsHandsOutEachOfOneToSizeExactlyOnce) {
  constexpr int32_t kSize = 13;
  ReqToTokenPool pool(kSize, 4);
  std::vector<int32_t> rows;
  ASSERT_TRUE(pool.alloc(kSize, rows).is_ok());
  ASSERT_EQ(rows.size(), static_cast<size_t>(kSize));
  // Distinct, in 1..size, and therefore never row 0.
  EXPECT_EQ(sorted(rows), iota_rows(1, kSize));
  EXPECT_EQ(std::count(rows.begin(), rows.end(), 0), 0);
  EXPECT_EQ(pool.available_size(), 0);
  for (int32_t r : rows)
    EXPECT_TRUE(pool.is_allocated(r)) << r;
  EXPECT_FALSE(pool.is_allocated(0));
  EXPECT_FALSE(pool.is_allocated(kSize + 1));
  EXPECT_FALSE(pool.is_allocated(-1));
}

TEST(ReqToTokenPoolTest, AllocInSeveralCallsGivesDistinctRows) {
  constexpr int32_t kSize = 10;
  ReqToTokenPool pool(kSize, 4);
  std::set<int32_t> seen;
  for (int32_t n : {3, 0, 4, 2, 1}) {
    std::vector<int32_t> rows;
    ASSERT_TRUE(pool.alloc(n, rows).is_ok());
    ASSERT_EQ(rows.size(), static_cast<size_t>(n));
    for (int32_t r : rows) {
      EXPECT_GE(r, 1);
      EXPECT_LE(r, kSize);
      EXPECT_TRUE(seen.insert(r).second) << "row " << r << " handed out twice";
    }
  }
  EXPECT_EQ(pool.available_size(), kSize - static_cast<int32_t>(seen.size()));
  EXPECT_EQ(pool.allocated_rows(), std::vector<int32_t>(seen.begin(), seen.end()));
}

TEST(ReqToTokenPoolTest, ExhaustionReturnsOutOfMemoryWithNothingAllocated) {
  constexpr int32_t kSize = 6;
  ReqToTokenPool pool(kSize, 4);

  std::vector<int32_t> rows;
  Status s = pool.alloc(kSize + 1, rows);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory);
  EXPECT_FALSE(s.message().empty());
  EXPECT_EQ(pool.available_size(), kSize);
  EXPECT_TRUE(pool.allocated_rows().empty());

  std::vector<int32_t> first;
  ASSERT_TRUE(pool.alloc(4, first).is_ok());
  const std::vector<int32_t> held = pool.allocated_rows();
  std::vector<int32_t> more;
  EXPECT_EQ(pool.alloc(3, more).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(pool.available_size(), 2);
  EXPECT_EQ(pool.allocated_rows(), held);

  // Exactly the remainder still fits; then even one more fails.
  ASSERT_TRUE(pool.alloc(2, more).is_ok());
  EXPECT_EQ(pool.available_size(), 0);
  std::vector<int32_t> none;
  EXPECT_EQ(pool.alloc(1, none).code(), StatusCode::kOutOfMemory);
  EXPECT_EQ(pool.allocated_rows(), iota_rows(1, kSize));

  // Recovery: a freed row is free again and the next alloc gets it.
  pool.free(first[1]);
  EXPECT_EQ(pool.available_size(), 1);
  EXPECT_FALSE(pool.is_allocated(first[1]));
  std::vector<int32_t> again;
  ASSERT_TRUE(pool.alloc(1, again).is_ok());
  EXPECT_EQ(again, std::vector<int32_t>{first[1]});
  EXPECT_EQ(pool.alloc(1, none).code(), StatusCode::kOutOfMemory);
}

TEST(ReqToTokenPoolTest, AllocZeroSucceedsAndTakesNothing) {
  ReqToTokenPool pool(3, 4);
  std::vector<int32_t> rows{7, 7};
  ASSERT_TRUE(pool.alloc(0, rows).is_ok());
  EXPECT_TRUE(rows.empty());
  EXPECT_EQ(pool.available_size(), 3);
  EXPECT_THROW(pool.alloc(-1, rows).ignore(), CheckError);
}

TEST(ReqToTokenPoolTest, AllocOne) {
  constexpr int32_t kSize = 5;
  ReqToTokenPool pool(kSize, 4);
  std::set<int32_t> seen;
  for (int32_t i = 0; i < kSize; ++i) {
    Result<int32_t> r = pool.alloc_one();
    ASSERT_TRUE(r.is_ok());
    EXPECT_GE(*r, 1);
    EXPECT_LE(*r, kSize);
    EXPECT_TRUE(pool.is_allocated(*r));
    EXPECT_TRUE(seen.insert(*r).second);
    EXPECT_EQ(pool.available_size(), kSize - i - 1);
  }
  Result<int32_t> none = pool.alloc_one();
  ASSERT_FALSE(none.is_ok());
  EXPECT_EQ(none.status().code(), StatusCode::kOutOfMemory);
  EXPECT_THROW(none.value(), CheckError);
  EXPECT_EQ(pool.available_size(), 0);

  pool.free(3);
  Result<int32_t> back = pool.alloc_one();
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(*back, 3);
}

TEST(ReqToTokenPoolTest, FreeOfRowZeroOutOfRangeOrUnallocatedThrows) {
  constexpr int32_t kSize = 4;
  ReqToTokenPool pool(kSize, 4);
  EXPECT_THROW(pool.free(0), CheckError);
  EXPECT_THROW(pool.free(-1), CheckError);
  EXPECT_THROW(pool.free(kSize + 1), CheckError);
  EXPECT_THROW(pool.free(2), CheckError);  // never allocated
  EXPECT_EQ(pool.available_size(), kSize);

  Result<int32_t> r = pool.alloc_one();
  ASSERT_TRUE(r.is_ok());
  pool.free(*r);
  EXPECT_THROW(pool.free(*r), CheckError);  // double free
  EXPECT_EQ(pool.available_size(), kSize);
  EXPECT_TRUE(pool.allocated_rows().empty());
}

TEST(ReqToTokenPoolTest, WriteRowAtRoundTrip) {
  constexpr int32_t kCtx = 16;
  ReqToTokenPool pool(3, kCtx);
  std::vector<int32_t> rows;
  ASSERT_TRUE(pool.alloc(2, rows).is_ok());
  const int32_t a = rows[0];
  const int32_t b = rows[1];

  std::vector<int32_t> slots_a(kCtx);
  std::vector<int32_t> slots_b(kCtx);
  for (int32_t i = 0; i < kCtx; ++i) {
    slots_a[i] = 1000 + 3 * i;
    slots_b[i] = 5000 - i;
  }
  pool.write(a, 0, slots_a);
  pool.write(b, 0, slots_b);
  // Overwrite a middle range of a; b must be untouched.
  const std::vector<int32_t> mid{1, 2, 3, 4};
  pool.write(a, 5, mid);
  std::copy(mid.begin(), mid.end(), slots_a.begin() + 5);
  pool.write_one(a, kCtx - 1, 77);
  slots_a[kCtx - 1] = 77;

  const auto row_a = pool.row(a);
  ASSERT_EQ(row_a.size(), static_cast<size_t>(kCtx));
  EXPECT_TRUE(std::equal(row_a.begin(), row_a.end(), slots_a.begin()));
  const auto row_b = pool.row(b);
  EXPECT_TRUE(std::equal(row_b.begin(), row_b.end(), slots_b.begin()));
  for (int32_t i = 0; i < kCtx; ++i) {
    EXPECT_EQ(pool.at(a, i), slots_a[i]);
    EXPECT_EQ(pool.at(b, i), slots_b[i]);
    // data() is the whole table, row-major.
    EXPECT_EQ(pool.data()[static_cast<size_t>(a) * kCtx + i], slots_a[i]);
  }
  const auto slice = pool.row(a, 4, 6);
  ASSERT_EQ(slice.size(), 6u);
  EXPECT_TRUE(std::equal(slice.begin(), slice.end(), slots_a.begin() + 4));
  EXPECT_TRUE(pool.row(a, kCtx, 0).empty());

  // Writing exactly up to max_context_len is fine; an empty write at the end too.
  pool.write(a, kCtx, std::span<const int32_t>());
  EXPECT_EQ(pool.at(a, kCtx - 1), 77);
}

TEST(ReqToTokenPoolTest, OutOfBoundsAccessThrows) {
  constexpr int32_t kCtx = 8;
  ReqToTokenPool pool(2, kCtx);
  Result<int32_t> r = pool.alloc_one();
  ASSERT_TRUE(r.is_ok());
  const std::vector<int32_t> three{1, 2, 3};
  const std::vector<int32_t> full(kCtx + 1, 9);

  EXPECT_THROW(pool.write(*r, kCtx - 2, three), CheckError);  // [6, 9) past 8
  EXPECT_THROW(pool.write(*r, 0, full), CheckError);
  EXPECT_THROW(pool.write(*r, -1, three), CheckError);
  EXPECT_THROW(pool.write_one(*r, kCtx, 1), CheckError);
  EXPECT_NO_THROW(pool.write(*r, kCtx - 3, three));
  EXPECT_THROW(pool.at(*r, kCtx), CheckError);
  EXPECT_THROW(pool.at(*r, -1), CheckError);
  EXPECT_THROW(pool.row(*r, 5, 4), CheckError);
  EXPECT_THROW(pool.row(*r, -1, 2), CheckError);
  EXPECT_THROW(pool.row(3), CheckError);
  EXPECT_THROW(pool.row(-1), CheckError);

  // Writes go only to allocated rows (never the padding row 0).
  EXPECT_THROW(pool.write(0, 0, three), CheckError);
  const int32_t other = *r == 1 ? 2 : 1;
  EXPECT_THROW(pool.write(other, 0, three), CheckError);
  pool.free(*r);
  EXPECT_THROW(pool.write_one(*r, 0, 1), CheckError);
}

TEST(ReqToTokenPoolTest, ClearFreesEveryRow) {
  constexpr int32_t kSize = 7;
  ReqToTokenPool pool(kSize, 4);
  std::vector<int32_t> rows;
  ASSERT_TRUE(pool.alloc(5, rows).is_ok());
  pool.free(rows[2]);
  pool.clear();
  EXPECT_EQ(pool.available_size(), kSize);
  EXPECT_TRUE(pool.allocated_rows().empty());
  for (int32_t r = 0; r <= kSize; ++r)
    EXPECT_FALSE(pool.is_allocated(r)) << r;
  // A previously held row is free (freeing it is a double free) and all rows can be had again.
  EXPECT_THROW(pool.free(rows[0]), CheckError);
  std::vector<int32_t> all;
  ASSERT_TRUE(pool.alloc(kSize, all).is_ok());
  EXPECT_EQ(sorted(all), iota_rows(1, kSize));
}

TEST(ReqToTokenPoolTest, AllocatedRowsIsSortedAndMatchesAReferenceSet) {
  constexpr int32_t kSize = 32;
  ReqToTokenPool pool(kSize, 2);
  std::mt19937 rng(12345);
  std::set<int32_t> held;
  for (int step = 0; step < 2000; ++step) {
    const bool do_alloc = held.empty() || rng() % 2 == 0;
    if (do_alloc) {
      const auto n = static_cast<int32_t>(rng() % 5);
      std::vector<int32_t> rows;
      const Status s = pool.alloc(n, rows);
      if (n > kSize - static_cast<int32_t>(held.size())) {
        ASSERT_EQ(s.code(), StatusCode::kOutOfMemory);
      } else {
        ASSERT_TRUE(s.is_ok());
        for (int32_t r : rows) {
          ASSERT_TRUE(r >= 1 && r <= kSize) << r;
          ASSERT_TRUE(held.insert(r).second) << "row " << r << " handed out twice";
        }
      }
    } else {
      auto it = held.begin();
      std::advance(it, rng() % held.size());
      pool.free(*it);
      held.erase(it);
    }
    ASSERT_EQ(pool.allocated_rows(), std::vector<int32_t>(held.begin(), held.end()));
    ASSERT_EQ(pool.available_size(), kSize - static_cast<int32_t>(held.size()));
  }
}

}  // namespace

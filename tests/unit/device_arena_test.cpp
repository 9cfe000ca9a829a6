// DeviceArena (platform/device_arena.h), the device pool's sub-allocator, on fake addresses: it
// never touches memory, so no device is needed. The randomised test replays every operation on
// a reference model (the set of live intervals) that computes independently what best fit with
// lowest-address ties must return, which gaps must exist, and every statistic. Randomised tests
// print their seed; set KVSERVE_TEST_SEED to replay one.
#include "kvserve/platform/device_arena.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvserve/core/check.h"

namespace kvserve::platform {
namespace {

constexpr size_t kAlign = DeviceArena::kAlignment;

size_t rounded(size_t bytes) {
  return (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
}

// The reference: live blocks by start address, and the gaps between them derived on demand.
class ReferenceArena {
 public:
  ReferenceArena(uintptr_t base, size_t size) : base_(base), size_(size) {}

  struct Gap {
    uintptr_t start;
    size_t bytes;
  };
  std::vector<Gap> gaps() const {
    std::vector<Gap> out;
    uintptr_t cursor = base_;
    for (const auto& [start, bytes] : live_) {
      if (start > cursor) out.push_back({cursor, start - cursor});
      cursor = start + bytes;
    }
    if (cursor < base_ + size_) out.push_back({cursor, base_ + size_ - cursor});
    return out;
  }
  // Best fit: the smallest gap that holds `bytes`, the lowest address among equal sizes.
  std::optional<uintptr_t> best_fit(size_t bytes) const {
    std::optional<Gap> best;
    for (const Gap& g : gaps()) {
      if (g.bytes >= bytes && (!best || g.bytes < best->bytes)) best = g;
    }
    if (!best) return std::nullopt;
    return best->start;
  }
  void add(uintptr_t start, size_t bytes) {
    live_.emplace(start, bytes);
    in_use_ += bytes;
    peak_ = std::max(peak_, in_use_);
  }
  void remove(uintptr_t start) {
    in_use_ -= live_.at(start);
    live_.erase(start);
  }
  const std::map<uintptr_t, size_t>& live() const { return live_; }
  size_t in_use() const { return in_use_; }
  size_t peak() const { return peak_; }

 private:
  uintptr_t base_;
  size_t size_;
  std::map<uintptr_t, size_t> live_;
  size_t in_use_ = 0;
  size_t peak_ = 0;
};

// Every statistic of the arena against the reference; live blocks disjoint, aligned, inside.
void expect_consistent(const DeviceArena& arena, const ReferenceArena& ref) {
  uintptr_t previous_end = arena.base();
  for (const auto& [start, bytes] : ref.live()) {
    ASSERT_EQ(start % kAlign, 0u);
    ASSERT_EQ(bytes % kAlign, 0u);
    ASSERT_GE(start, previous_end) << "live blocks overlap at " << start;
    ASSERT_LE(start + bytes, arena.base() + arena.size()) << "block leaves the range";
    ASSERT_EQ(arena.block_size(start), bytes);
    previous_end = start + bytes;
  }
  const std::vector<ReferenceArena::Gap> gaps = ref.gaps();
  size_t largest = 0;
  for (const auto& g : gaps)
    largest = std::max(largest, g.bytes);
  const ArenaStats s = arena.stats();
  EXPECT_EQ(s.size, arena.size());
  EXPECT_EQ(s.bytes_in_use, ref.in_use());
  EXPECT_EQ(s.free_bytes, arena.size() - ref.in_use());
  EXPECT_EQ(s.blocks_in_use, ref.live().size());
  // Coalescing: the arena's free extents are exactly the gaps between live blocks.
  EXPECT_EQ(s.free_blocks, gaps.size());
  EXPECT_EQ(s.largest_free_block, largest);
  EXPECT_EQ(s.peak_bytes_in_use, ref.peak());
}

uint64_t test_seed() {
  const char* env = std::getenv("KVSERVE_TEST_SEED");
  return env != nullptr ? std::strtoull(env, nullptr, 0) : 20261201u;
}

TEST(DeviceArenaTest, RandomAllocFreeMatchesTheReference) {
  const uint64_t seed = test_seed();
  std::cout << "KVSERVE_TEST_SEED=" << seed << "\n";
  SCOPED_TRACE(testing::Message() << "KVSERVE_TEST_SEED=" << seed);
  for (int round = 0; round < 6; ++round) {
    std::mt19937_64 rng(seed * 1000003u + static_cast<uint64_t>(round));
    // A base far from zero and a size that is not a multiple of the alignment (rounded down).
    const uintptr_t base = (uintptr_t{1} << 40) + uintptr_t{kAlign} * (rng() % 1000);
    const size_t size = (size_t{1} << 20) + (round % 2 == 0 ? 0 : 100);
    DeviceArena arena(base, size);
    ASSERT_EQ(arena.size(), size / kAlign * kAlign);
    ReferenceArena ref(base, arena.size());
    std::vector<uintptr_t> live;
    int successes = 0;
    int failures = 0;
    for (int op = 0; op < 4000; ++op) {
      SCOPED_TRACE(testing::Message() << "round " << round << " op " << op);
      // Phases of mostly allocating and mostly freeing, so the arena fills, fragments and drains.
      const bool filling = (op / 500) % 2 == 0;
      const bool do_alloc = live.empty() || (rng() % 100) < (filling ? 70u : 30u);
      if (do_alloc) {
        size_t bytes = 0;
        switch (rng() % 5) {
          case 0:
            bytes = rng() % 4;  // 0..3: the zero-size and tiny cases
            break;
          case 1:
            bytes = kAlign * (1 + rng() % 8);  // exact multiples
            break;
          case 2:
            bytes = 1 + rng() % 8192;
            break;
          case 3:
            bytes = 1 + rng() % 65536;
            break;
          default:
            bytes = 1 + rng() % (size / 4);  // large: forces out-of-memory under fragmentation
        }
        const std::optional<uintptr_t> expected = ref.best_fit(rounded(bytes));
        const Result<uintptr_t> got = arena.allocate(bytes);
        if (!expected) {
          ASSERT_FALSE(got.is_ok()) << "the reference has no gap of " << rounded(bytes);
          EXPECT_EQ(got.status().code(), StatusCode::kOutOfMemory);
          ++failures;
        } else {
          ASSERT_TRUE(got.is_ok()) << got.status().to_string();
          ASSERT_EQ(*got, *expected) << "not the best fit for " << bytes << " bytes";
          ASSERT_GE(arena.block_size(*got), bytes);
          ref.add(*got, rounded(bytes));
          live.push_back(*got);
          ++successes;
        }
      } else {
        const size_t i = rng() % live.size();
        arena.deallocate(live[i]);
        ref.remove(live[i]);
        live[i] = live.back();
        live.pop_back();
      }
      expect_consistent(arena, ref);
      if (testing::Test::HasFatalFailure()) return;
    }
    // Both outcomes were exercised, or the test would not test what it claims.
    EXPECT_GT(successes, 100);
    EXPECT_GT(failures, 10);
    std::shuffle(live.begin(), live.end(), rng);
    for (const uintptr_t a : live) {
      arena.deallocate(a);
      ref.remove(a);
    }
    expect_consistent(arena, ref);
    const ArenaStats s = arena.stats();
    EXPECT_EQ(s.free_blocks, 1u);
    EXPECT_EQ(s.largest_free_block, arena.size());
    EXPECT_EQ(s.bytes_in_use, 0u);
    // The whole range is one block again.
    const Result<uintptr_t> all = arena.allocate(arena.size());
    ASSERT_TRUE(all.is_ok()) << all.status().to_string();
    EXPECT_EQ(*all, base);
  }
}

TEST(DeviceArenaTest, BestFitPicksTheSmallestHoleThenTheLowestAddress) {
  constexpr uintptr_t kBase = uintptr_t{1} << 32;
  DeviceArena arena(kBase, 64 * 1024);
  // Blocks of 1, 2, 1, 4, 1, 1, 1, 1 KiB from the base; then holes at B (2 KiB), D (4 KiB),
  // F (1 KiB) and H (1 KiB), H above F. The tail after H is a large free block.
  const size_t kib = 1024;
  const std::vector<size_t> sizes = {1 * kib, 2 * kib, 1 * kib, 4 * kib,
                                     1 * kib, 1 * kib, 1 * kib, 1 * kib};
  std::vector<uintptr_t> at;
  uintptr_t expected = kBase;
  for (const size_t s : sizes) {
    at.push_back(arena.allocate(s).value());
    EXPECT_EQ(at.back(), expected);  // an empty arena fills from its base
    expected += s;
  }
  const uintptr_t b = at[1], d = at[3], f = at[5], h = at[7];
  for (const uintptr_t a : {b, d, f, h})
    arena.deallocate(a);
  // H merged with the tail: the holes are B 2 KiB, D 4 KiB, F 1 KiB and H + tail.
  EXPECT_EQ(arena.stats().free_blocks, 4u);
  EXPECT_EQ(arena.allocate(kib).value(), f);              // 1 KiB: F, not the first fit B
  EXPECT_EQ(arena.allocate(kib + 512).value(), b);        // 1.5 KiB: B (2 KiB), not D
  EXPECT_EQ(arena.allocate(3 * kib).value(), d);          // 3 KiB: D
  EXPECT_EQ(arena.allocate(512).value(), b + kib + 512);  // 512: B's remainder, not D's 1 KiB
  EXPECT_EQ(arena.allocate(kib).value(), d + 3 * kib);    // 1 KiB: D's remainder, then the tail
  EXPECT_EQ(arena.allocate(kib).value(), h);

  // Ties: two free blocks of the same size, the lower address wins whatever the free order.
  DeviceArena ties(kBase, 8 * kib);
  std::vector<uintptr_t> blocks;
  for (int i = 0; i < 8; ++i)
    blocks.push_back(ties.allocate(kib).value());
  ties.deallocate(blocks[5]);
  ties.deallocate(blocks[2]);
  EXPECT_EQ(ties.allocate(kib).value(), blocks[2]);
  EXPECT_EQ(ties.allocate(kib).value(), blocks[5]);
}

TEST(DeviceArenaTest, RoundsEveryBlockToTheAlignment) {
  DeviceArena arena(uintptr_t{1} << 32, 4096);
  const uintptr_t zero = arena.allocate(0).value();
  const uintptr_t one = arena.allocate(1).value();
  const uintptr_t odd = arena.allocate(257).value();
  EXPECT_NE(zero, one);  // a zero-byte request still has an address of its own
  EXPECT_EQ(arena.block_size(zero), kAlign);
  EXPECT_EQ(arena.block_size(one), kAlign);
  EXPECT_EQ(arena.block_size(odd), 2 * kAlign);
  for (const uintptr_t a : {zero, one, odd})
    EXPECT_EQ(a % kAlign, 0u);
  EXPECT_EQ(arena.stats().bytes_in_use, 4 * kAlign);
  EXPECT_TRUE(arena.contains(odd));
  EXPECT_FALSE(arena.contains(arena.base() + arena.size()));
  EXPECT_FALSE(arena.contains(arena.base() - 1));
  // A request so large that rounding would overflow is out of memory, not a wrap-around.
  const Result<uintptr_t> huge = arena.allocate(SIZE_MAX);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
}

TEST(DeviceArenaTest, OutOfMemoryNamesTheRequestTheFreeBytesAndTheLargestBlock) {
  DeviceArena arena(uintptr_t{1} << 32, 16 * kAlign);
  std::vector<uintptr_t> blocks;
  for (int i = 0; i < 16; ++i)
    blocks.push_back(arena.allocate(kAlign).value());
  for (int i = 0; i < 16; i += 2)
    arena.deallocate(blocks[static_cast<size_t>(i)]);
  // 2048 bytes free in eight 256-byte fragments: a 512-byte request cannot fit.
  const Result<uintptr_t> r = arena.allocate(512);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("cannot allocate 512 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("2048 bytes ("), std::string::npos) << m;
  EXPECT_NE(m.find("largest free block 256 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("8 free blocks"), std::string::npos) << m;
  // The failure changed nothing: a block that fits still comes from the lowest fragment.
  EXPECT_EQ(arena.allocate(kAlign).value(), blocks[0]);
}

TEST(DeviceArenaTest, FreeingAnAddressItDidNotHandOutIsABug) {
  DeviceArena arena(uintptr_t{1} << 32, 4096);
  const uintptr_t a = arena.allocate(512).value();
  EXPECT_THROW(arena.deallocate(a + kAlign), CheckError);          // inside a block, not its start
  EXPECT_THROW(arena.deallocate(uintptr_t{1} << 20), CheckError);  // outside the range
  arena.deallocate(a);
  EXPECT_THROW(arena.deallocate(a), CheckError);                        // double free
  EXPECT_THROW(DeviceArena(uintptr_t{1} << 32 | 8, 4096), CheckError);  // unaligned base
}

}  // namespace
}  // namespace kvserve::platform

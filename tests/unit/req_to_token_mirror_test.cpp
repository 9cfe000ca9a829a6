// The device mirror of req_to_token on the CPU platform: ops::write_req_to_token and
// ops::build_kv_indices (CPU reference implementations) against naive references built from the
// host ReqToTokenPool, and the mirror through a request lifecycle written by the device backends'
// metadata code (support/mirror_scenario.h; tests/gpu/req_to_token_mirror_gpu_test runs the same
// with the CUDA kernels).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/mem/page_table.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/platform/ops/req_to_token.h"
#include "kvserve/platform/platform.h"
#include "support/mirror_scenario.h"

namespace kvserve {
namespace {

constexpr int32_t kRows = 16;
constexpr int32_t kRowLen = 600;

std::unique_ptr<platform::Platform> cpu() {
  return std::move(platform::create_platform(Device{}).value());
}

// A random batch written into the host pool as a forward would: [prefix | new] per request, and
// the same segments as write_req_to_token's arrays.
struct WriteCase {
  std::vector<int32_t> rows, prefix_indptr{0}, prefix_start, prefix_slots, new_indptr{0}, new_start,
      new_slots;
  std::vector<int32_t> lens;  // positions each row holds after the write
};

WriteCase random_writes(mem::ReqToTokenPool& host, std::mt19937& rng, bool decode_like) {
  WriteCase c;
  std::uniform_int_distribution<int32_t> batch(1, 8), slot(1, 1 << 20);
  const int32_t bs = batch(rng);
  for (int32_t b = 0; b < bs; ++b) {
    const int32_t row = host.alloc_one().value();
    // Extends: prefix [0, p) then n new; decode-like: a rewritten range [s, p) then one new at p.
    const int32_t p = std::uniform_int_distribution<int32_t>(0, 400)(rng);
    const int32_t n = decode_like ? 1 : std::uniform_int_distribution<int32_t>(0, 199)(rng);
    const int32_t s = decode_like ? std::uniform_int_distribution<int32_t>(0, p)(rng) : 0;
    std::vector<int32_t> prefix(static_cast<size_t>(p)), fresh(static_cast<size_t>(n));
    for (auto& x : prefix)
      x = slot(rng);
    for (auto& x : fresh)
      x = slot(rng);
    host.write(row, 0, prefix);
    host.write(row, p, fresh);
    c.rows.push_back(row);
    c.prefix_start.push_back(s);
    c.prefix_slots.insert(c.prefix_slots.end(), prefix.begin() + s, prefix.end());
    c.prefix_indptr.push_back(static_cast<int32_t>(c.prefix_slots.size()));
    c.new_start.push_back(p);
    c.new_slots.insert(c.new_slots.end(), fresh.begin(), fresh.end());
    c.new_indptr.push_back(static_cast<int32_t>(c.new_slots.size()));
    c.lens.push_back(p + n);
  }
  return c;
}

class WriteReqToTokenTest : public ::testing::TestWithParam<bool> {};

TEST_P(WriteReqToTokenTest, RandomBatchesEqualTheHostRows) {
  const bool decode_like = GetParam();
  auto platform = cpu();
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    mem::ReqToTokenPool host(kRows, kRowLen);
    const WriteCase c = random_writes(host, rng, decode_like);
    // The mirror starts as -1 everywhere; decode-like writes skip [0, s), so fill those from the
    // host first (they were written by earlier forwards).
    std::vector<int32_t> table(static_cast<size_t>(kRows + 1) * kRowLen, -1);
    for (size_t b = 0; b < c.rows.size(); ++b) {
      const auto row = host.row(c.rows[b], 0, c.prefix_start[b]);
      std::copy(row.begin(), row.end(), table.begin() + int64_t{c.rows[b]} * kRowLen);
    }
    const ops::WriteReqToTokenParams p{.table = table.data(),
                                       .stride = kRowLen,
                                       .table_rows = kRows + 1,
                                       .rows = c.rows.data(),
                                       .prefix_indptr = c.prefix_indptr.data(),
                                       .prefix_start = c.prefix_start.data(),
                                       .prefix_slots = c.prefix_slots.data(),
                                       .new_indptr = c.new_indptr.data(),
                                       .new_start = c.new_start.data(),
                                       .new_slots = c.new_slots.data(),
                                       .batch = static_cast<int32_t>(c.rows.size())};
    // Through the platform boundary (the CPU op on the CPU platform).
    ops::write_req_to_token(*platform, p);
    for (int32_t r = 0; r <= kRows; ++r) {
      const auto it = std::find(c.rows.begin(), c.rows.end(), r);
      const int32_t len = it == c.rows.end() ? 0 : c.lens[it - c.rows.begin()];
      const int32_t* got = table.data() + int64_t{r} * kRowLen;
      const auto want = host.row(r, 0, len);
      ASSERT_TRUE(std::equal(want.begin(), want.end(), got)) << "row " << r;
      // Nothing past the written positions (and nothing in other rows).
      ASSERT_TRUE(std::all_of(got + len, got + kRowLen, [](int32_t x) { return x == -1; }))
          << "row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, WriteReqToTokenTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "decode_like" : "extend";
                         });

TEST(WriteReqToToken, NoPrefixArraysAndOutOfRangeWritesAreBugs) {
  std::vector<int32_t> table(2 * 8, 0);
  const std::vector<int32_t> rows = {1}, indptr = {0, 2}, start = {6}, slots = {42, 43};
  ops::WriteReqToTokenParams p{.table = table.data(),
                               .stride = 8,
                               .table_rows = 2,
                               .rows = rows.data(),
                               .new_indptr = indptr.data(),
                               .new_start = start.data(),
                               .new_slots = slots.data(),
                               .batch = 1};
  ops::cpu::write_req_to_token(p);
  EXPECT_EQ(table[8 + 6], 42);
  EXPECT_EQ(table[8 + 7], 43);
  const std::vector<int32_t> past = {7};  // [7, 9) runs past a row of 8
  p.new_start = past.data();
  EXPECT_THROW(ops::cpu::write_req_to_token(p), CheckError);
  const std::vector<int32_t> bad_row = {2};
  p.new_start = start.data();
  p.rows = bad_row.data();
  EXPECT_THROW(ops::cpu::write_req_to_token(p), CheckError);
}

class BuildKvIndicesTest : public ::testing::TestWithParam<int32_t> {};

// Rows laid out as a paged allocator does (each page-aligned group of positions in one page, in
// order, pages in random order); ranges from page-aligned starts (the aligned encoder-decoder
// layout) or 0. Page ids against the naive row[start + j * ps] / ps and against the host builder
// (mem::build_kv_indices); the slot list (page size 1) of the same rows too.
TEST_P(BuildKvIndicesTest, PageAndSlotListsEqualTheHostBuilders) {
  const int32_t ps = GetParam();
  auto platform = cpu();
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed) + ", page size " + std::to_string(ps));
    std::mt19937 rng(seed * 7919 + static_cast<uint32_t>(ps));
    constexpr int32_t kWidth = 2048;
    mem::ReqToTokenPool host(kRows, kWidth);
    std::vector<int32_t> pages(4096 / ps * 8);
    std::iota(pages.begin(), pages.end(), 1);
    std::shuffle(pages.begin(), pages.end(), rng);
    size_t next = 0;
    const int32_t bs = std::uniform_int_distribution<int32_t>(1, kRows)(rng);
    std::vector<mem::KvRange> ranges;
    std::vector<int32_t> rows, starts, lens;
    for (int32_t b = 0; b < bs; ++b) {
      const int32_t row = host.alloc_one().value();
      const int32_t start = std::uniform_int_distribution<int32_t>(0, 3)(rng) == 0
                                ? std::uniform_int_distribution<int32_t>(0, 512 / ps)(rng) * ps
                                : 0;
      // Empty ranges too (an encoder_len of 0).
      const int32_t len = std::uniform_int_distribution<int32_t>(0, 3)(rng) == 0
                              ? 0
                              : std::uniform_int_distribution<int32_t>(1, 1400)(rng);
      std::vector<int32_t> slots(static_cast<size_t>(start + len));
      for (int32_t i = 0; i < start + len; ++i) {
        if (i % ps == 0) ++next;
        slots[i] = pages.at(next - 1) * ps + i % ps;
      }
      host.write(row, 0, slots);
      ranges.push_back({row, start, len});
      rows.push_back(row);
      starts.push_back(start);
      lens.push_back(len);
    }
    for (const int32_t unit : {ps, 1}) {
      std::vector<int32_t> indptr(static_cast<size_t>(bs) + 1, 0);
      for (int32_t b = 0; b < bs; ++b)
        indptr[b + 1] = indptr[b] + (lens[b] + unit - 1) / unit;
      std::vector<int32_t> out(static_cast<size_t>(indptr.back()) + 1, -1);
      ops::build_kv_indices(*platform, {.table = host.data(),
                                        .stride = kWidth,
                                        .table_rows = kRows + 1,
                                        .rows = rows.data(),
                                        .starts = starts.data(),
                                        .indptr = indptr.data(),
                                        .out = out.data(),
                                        .batch = bs,
                                        .page_size = unit});
      // Naive: straight from the host rows.
      for (int32_t b = 0; b < bs; ++b) {
        for (int32_t j = 0; j * unit < lens[b]; ++j) {
          ASSERT_EQ(out[indptr[b] + j], host.at(rows[b], starts[b] + j * unit) / unit)
              << "request " << b << " entry " << j << " unit " << unit;
        }
      }
      EXPECT_EQ(out.back(), -1) << "nothing past the last entry";
      // The host builder the backends used before.
      mem::KvIndices want;
      mem::build_kv_indices(host, ranges,
                            unit == 1 ? mem::IndexUnit::kToken : mem::IndexUnit::kPage, ps, want);
      EXPECT_EQ(want.indptr, indptr);
      out.pop_back();
      EXPECT_EQ(want.indices, out) << "unit " << unit;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, BuildKvIndicesTest, ::testing::Values(1, 16, 64, 128),
                         [](const ::testing::TestParamInfo<int32_t>& i) {
                           return "page" + std::to_string(i.param);
                         });

TEST(ReqToTokenPool, TakeWrittenReturnsTheSpanOfWritesSinceTheLastTake) {
  mem::ReqToTokenPool host(2, 64);
  const int32_t row = host.alloc_one().value();
  EXPECT_TRUE(host.take_written(row).empty());
  host.write(row, 10, std::vector<int32_t>{1, 2, 3});
  host.write_one(row, 4, 9);
  const auto w = host.take_written(row);
  EXPECT_EQ(w.begin, 4);
  EXPECT_EQ(w.end, 13);
  EXPECT_TRUE(host.take_written(row).empty());
  host.write(row, 5, std::vector<int32_t>{});
  EXPECT_TRUE(host.take_written(row).empty());
}

// The batch builder takes each row's rewrites from the host table: an extend's whole row below its
// first new position, a decode's writes since the row's last batch below its new position; the
// table's written ranges are consumed (the backends never touch the host table).
TEST(ForwardBatch, RowRewritesAreTakenByTheBatchBuilder) {
  mem::ReqToTokenPool host(2, 64);
  const int32_t row = host.alloc_one().value();
  std::vector<int32_t> slots(10);
  std::iota(slots.begin(), slots.end(), 10);  // positions 0..9 hold slots 10..19
  host.write(row, 0, slots);
  // Extend of positions [6, 10): the mirror copies [0, 6).
  mem::ForwardBatch b = mem::make_forward_batch(mem::ForwardMode::kExtend, {{row, 6, {1, 2, 3, 4}}},
                                                {16, 17, 18, 19}, host);
  EXPECT_EQ(b.row_rewrites.start, (std::vector<int32_t>{0}));
  EXPECT_EQ(b.row_rewrites.indptr, (std::vector<int32_t>{0, 6}));
  EXPECT_EQ(b.row_rewrites.slots, (std::vector<int32_t>{10, 11, 12, 13, 14, 15}));
  EXPECT_EQ(b.req_to_token, &host);
  EXPECT_EQ(b.kv_pool, nullptr) << "the runner's buffers are the runner's to set";
  EXPECT_TRUE(host.take_written(row).empty()) << "the builder took the written range";
  // The host rewrites [2, 4) (a prefix-cache rewrite) and allocation writes the decode's slot at
  // position 10: the decode at position 10 copies [2, 10), its own slot comes with the batch.
  host.write(row, 2, std::vector<int32_t>{77, 78});
  host.write_one(row, 10, 99);
  b = mem::make_forward_batch(mem::ForwardMode::kDecode, {{row, 10, {5}}}, {99}, host);
  EXPECT_EQ(b.row_rewrites.start, (std::vector<int32_t>{2}));
  EXPECT_EQ(b.row_rewrites.slots, (std::vector<int32_t>{77, 78, 14, 15, 16, 17, 18, 19}));
  // Nothing rewritten below the next decode's position: an empty range.
  host.write_one(row, 11, 100);
  b = mem::make_forward_batch(mem::ForwardMode::kDecode, {{row, 11, {6}}}, {100}, host);
  EXPECT_EQ(b.row_rewrites.indptr, (std::vector<int32_t>{0, 0}));
  EXPECT_TRUE(b.row_rewrites.slots.empty());
  // An encoder-decoder row: the decoder region starts at 4, so an extend copies the encoder region
  // [0, 4) and the batch carries the start.
  const int32_t row2 = host.alloc_one().value();
  host.write(row2, 0, std::vector<int32_t>{40, 41, 42, 43, 44, 45});
  b = mem::make_forward_batch(mem::ForwardMode::kExtend, {{row, 12, {7}}, {row2, 0, {8, 9}, 4}},
                              {101, 44, 45}, host);
  EXPECT_EQ(b.self_kv_start, (std::vector<int32_t>{0, 4}));
  EXPECT_EQ(b.row_rewrites.start, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(b.row_rewrites.indptr, (std::vector<int32_t>{0, 12, 16}));
  EXPECT_EQ(std::vector<int32_t>(b.row_rewrites.slots.begin() + 12, b.row_rewrites.slots.end()),
            (std::vector<int32_t>{40, 41, 42, 43}));
  // Padding (decode graphs) adds empty ranges.
  mem::pad_row_rewrites(b.row_rewrites, 2);
  EXPECT_EQ(b.row_rewrites.indptr, (std::vector<int32_t>{0, 12, 16, 16, 16}));
  EXPECT_EQ(b.row_rewrites.start.size(), 4u);
}

TEST(DeviceReqToToken, ZeroFilledWithTheHostShape) {
  auto platform = cpu();
  mem::ReqToTokenPool host(3, 40);
  auto mirror = std::move(mem::DeviceReqToToken::create(*platform, host).value());
  EXPECT_EQ(mirror->rows(), 4);
  EXPECT_EQ(mirror->stride(), 40);
  EXPECT_EQ(mirror->bytes(), size_t{4 * 40 * 4});
  EXPECT_EQ(mirror->read_row(3, 40), std::vector<int32_t>(40, 0));
  EXPECT_TRUE(mirror->mirrors(host));
  EXPECT_FALSE(mirror->mirrors(mem::ReqToTokenPool(3, 41)));
}

class MirrorScenarioTest : public ::testing::TestWithParam<test_support::MirrorScenarioCase> {};

TEST_P(MirrorScenarioTest, MirrorEqualsHostAfterEveryForward) {
  test_support::expect_mirror_scenario(*cpu(), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, MirrorScenarioTest,
                         ::testing::ValuesIn(test_support::kMirrorScenarioCases),
                         [](const auto& i) {
                           return test_support::mirror_scenario_case_name(i.param);
                         });

// Encoder-decoder rows (Whisper): aligned layout through both backends, ragged through
// cuda-ragged, page sizes 1 and 16.
TEST(MirrorEncoderDecoder, MirrorEqualsHostOnBothRegions) {
  test_support::expect_encoder_decoder_mirror_scenarios(*cpu());
}

}  // namespace
}  // namespace kvserve

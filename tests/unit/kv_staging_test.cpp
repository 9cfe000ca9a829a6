// disagg/kv_staging + ops::kv_staging: KV moved between pools of different layouts through the
// staging buffer (gather into a contiguous region, one bulk write over a transport, scatter),
// checked token by token against a naive reference: prefill page size 16 to decode page sizes 1
// and 64 byte for byte, dtype conversions value for value, head slices, chunks, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "kvserve/disagg/kv_staging.h"
#include "kvserve/disagg/kv_transport.h"
#include "kvserve/disagg/staging_extents.h"
#include "kvserve/platform/ops/kv_staging.h"
#include "unit/kv_transfer_scenario.h"

namespace kvserve::disagg {
namespace {

using testing::cpu_platform;
using testing::fill_random;
using testing::fragmented_pages;
using testing::pool_region;

mem::KvPoolConfig pool_config(int32_t page_size, int64_t pages, int32_t heads, DType dtype) {
  return mem::KvPoolConfig{.num_layers = 3,
                           .num_kv_heads = heads,
                           .head_dim = 8,
                           .size = pages * page_size,
                           .page_size = page_size,
                           .dtype = dtype};
}

// The slots of `tokens` tokens laid on fragmented pages of `page_size` (page 0 never used).
std::vector<int32_t> token_slots(int64_t tokens, int32_t page_size, int64_t pages,
                                 std::mt19937_64& rng) {
  const size_t need = static_cast<size_t>((tokens + page_size - 1) / page_size);
  const auto page_ids = fragmented_pages(pages + 1, need, rng);
  EXPECT_EQ(page_ids.size(), need);
  std::vector<int32_t> slots;
  for (int64_t t = 0; t < tokens; ++t) {
    slots.push_back(page_ids[t / page_size] * page_size + static_cast<int32_t>(t % page_size));
  }
  return slots;
}

// Fills a float pool with finite random values (byte noise would make NaNs, whose conversions
// are not what these tests are about).
void fill_values(mem::MHATokenToKVPool& pool, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const auto r = pool_region(pool);
  const size_t n = r.bytes / dtype_size(pool.config().dtype);
  std::vector<float> values(n);
  for (float& v : values)
    v = normal(rng);
  convert_elements(values.data(), DType::kF32, r.base, pool.config().dtype, n);
}

// One element of a pool as a double (f32, bf16), read straight from the buffer.
double pool_value(const mem::MHATokenToKVPool& pool, bool v, int32_t layer, int32_t slot,
                  int32_t head, int32_t d) {
  const TensorView b = v ? pool.v_buffer(layer) : pool.k_buffer(layer);
  const auto& c = pool.config();
  const size_t i = (static_cast<size_t>(slot) * c.num_kv_heads + head) * c.head_dim + d;
  if (c.dtype == DType::kF32) return static_cast<const float*>(b.data())[i];
  uint16_t bits = static_cast<const uint16_t*>(b.data())[i];
  uint32_t f = static_cast<uint32_t>(bits) << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

// float -> bf16 -> double, rounding to nearest even, written here (not core's conversion).
double round_to_bf16(double x) {
  const float f = static_cast<float>(x);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

// Every element the staging moved (3 layers, K and V, 2 heads of 8 dims per token): the decode
// pool's at dst_slots[t] against want(the prefill pool's at src_slots[t], head + head_offset).
// The first mismatch is named; `checked` counts the elements compared.
template <typename Want>
::testing::AssertionResult tokens_match(const mem::MHATokenToKVPool& decode,
                                        std::span<const int32_t> dst_slots,
                                        const mem::MHATokenToKVPool& prefill,
                                        std::span<const int32_t> src_slots, int32_t head_offset,
                                        Want want, int64_t* checked = nullptr) {
  int64_t n = 0;
  for (int32_t layer = 0; layer < 3; ++layer) {
    for (const bool v : {false, true}) {
      for (size_t t = 0; t < dst_slots.size(); ++t) {
        for (int32_t h = 0; h < 2; ++h) {
          for (int32_t d = 0; d < 8; ++d) {
            const double got = pool_value(decode, v, layer, dst_slots[t], h, d);
            const double expected =
                want(pool_value(prefill, v, layer, src_slots[t], head_offset + h, d));
            if (got != expected) {
              return ::testing::AssertionFailure()
                     << "layer " << layer << (v ? " V" : " K") << " token " << t << " head " << h
                     << " dim " << d << ": " << got << " vs " << expected;
            }
            ++n;
          }
        }
      }
    }
  }
  if (checked != nullptr) *checked = n;
  return ::testing::AssertionSuccess();
}

double same(double x) {
  return x;
}

// One transfer through the staging buffer: gather on `src`, one write over a transport (loopback
// unless `o` says otherwise), scatter on `dst`.
void stage_over(KvStager& src, KvStager& dst, std::span<const int32_t> src_slots,
                std::span<const int32_t> dst_slots, const TransportOptions& o = {}) {
  auto sender = create_kv_transport(o).value();
  auto receiver = create_kv_transport(o).value();
  ASSERT_TRUE(
      sender->register_region(src.staging(), src.staging_bytes(), src.staging_device()).is_ok());
  const auto remote =
      receiver->register_region(dst.staging(), dst.staging_bytes(), dst.staging_device());
  ASSERT_TRUE(remote.is_ok());
  const PeerId peer = sender->connect(*remote).value();
  for (size_t at = 0; at < src_slots.size();) {  // chunks of the stagers' size
    const size_t n = std::min<size_t>(src_slots.size() - at, src.max_tokens());
    const auto ready = src.gather(src_slots.subspan(at, n));
    ASSERT_TRUE(ready.is_ok()) << ready.status().to_string();
    const WriteOp op{0, 0, src.format().bytes(static_cast<int64_t>(n))};
    const auto id = sender->post(peer, std::span(&op, 1));
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    TransferStatus s = sender->poll(*id);
    while (s == TransferStatus::kInProgress)
      s = sender->poll(*id);
    ASSERT_EQ(s, TransferStatus::kDone);
    sender->release(*id);
    const auto written = dst.scatter(dst_slots.subspan(at, n));
    ASSERT_TRUE(written.is_ok()) << written.status().to_string();
    at += n;
  }
}

// Prefill page size 16 -> decode page sizes 1 and 64 (and 16), bf16 both sides: every byte of
// the decode pool equals the naive token-by-token copy into a snapshot of it. Over loopback, and
// over UCX (tcp, two transports of this process: the staging regions registered with UCP).
void page_size_16_to_decode_pages(const TransportOptions& transport) {
  auto p = cpu_platform();
  for (const int32_t decode_page : {1, 16, 64}) {
    const uint64_t seed = 3000 + decode_page;
    SCOPED_TRACE(::testing::Message() << "decode page size " << decode_page << ", seed " << seed);
    std::printf("staging 16 -> %d seed %llu\n", decode_page, static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    const int64_t tokens = 300;  // not a multiple of any page size but 1
    auto prefill = mem::MHATokenToKVPool::create(*p, pool_config(16, 40, 2, DType::kBF16)).value();
    const int64_t decode_pages = 1024 / decode_page + 8;
    auto decode =
        mem::MHATokenToKVPool::create(*p, pool_config(decode_page, decode_pages, 2, DType::kBF16))
            .value();
    fill_random(pool_region(*prefill).base, pool_region(*prefill).bytes, seed);
    fill_random(pool_region(*decode).base, pool_region(*decode).bytes, seed + 1);
    const auto src_slots = token_slots(tokens, 16, 40, rng);
    const auto dst_slots = token_slots(tokens, decode_page, decode_pages, rng);

    // The reference, token by token from the pools' own buffers.
    const auto dr = pool_region(*decode);
    std::vector<uint8_t> expected(dr.base, dr.base + dr.bytes);
    const size_t row = decode->slot_bytes();
    for (int32_t layer = 0; layer < 3; ++layer) {
      for (const bool v : {false, true}) {
        const auto* from = static_cast<const uint8_t*>(
            (v ? prefill->v_buffer(layer) : prefill->k_buffer(layer)).data());
        const auto* to_base = static_cast<const uint8_t*>(
            (v ? decode->v_buffer(layer) : decode->k_buffer(layer)).data());
        for (int64_t t = 0; t < tokens; ++t) {
          std::memcpy(expected.data() + (to_base - dr.base) + dst_slots[t] * row,
                      from + src_slots[t] * row, row);
        }
      }
    }
    const StagingFormat format{3, 2, 8, DType::kBF16};
    // Chunks of 128 tokens: three gathers, three bulk writes, three scatters.
    auto src = KvStager::create(*prefill, format, 0, 128, StagingMemory::kDevice).value();
    auto dst = KvStager::create(*decode, format, 0, 128, StagingMemory::kDevice).value();
    stage_over(*src, *dst, src_slots, dst_slots, transport);
    EXPECT_EQ(0, std::memcmp(expected.data(), dr.base, dr.bytes));
  }
}

TEST(KvStaging, PageSize16ToDecodePageSizesByteForByte) {
  page_size_16_to_decode_pages(TransportOptions{});
}

TEST(KvStaging, PageSize16ToDecodePageSizesOverUcxTcp) {
  TransportOptions o;
  o.kind = TransportKind::kUcx;
  o.ucx_transports = "tcp";
  page_size_16_to_decode_pages(o);
}

// f32 prefill -> bf16 staging -> bf16 decode: each value rounded once to nearest even; and bf16
// prefill -> bf16 staging -> f32 decode: each value widened exactly.
TEST(KvStaging, DtypeConversionsValueForValue) {
  auto p = cpu_platform();
  struct Case {
    DType prefill;
    DType decode;
  };
  for (const Case c : {Case{DType::kF32, DType::kBF16}, Case{DType::kBF16, DType::kF32}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(c.prefill) << " -> " << dtype_name(c.decode));
    const uint64_t seed = 4000 + static_cast<int>(c.prefill);
    std::printf("staging conversion seed %llu\n", static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    auto prefill = mem::MHATokenToKVPool::create(*p, pool_config(16, 20, 2, c.prefill)).value();
    auto decode = mem::MHATokenToKVPool::create(*p, pool_config(4, 80, 2, c.decode)).value();
    fill_values(*prefill, seed);
    fill_values(*decode, seed + 1);
    const int64_t tokens = 150;
    const auto src_slots = token_slots(tokens, 16, 20, rng);
    const auto dst_slots = token_slots(tokens, 4, 80, rng);
    const StagingFormat format{3, 2, 8, DType::kBF16};
    auto src = KvStager::create(*prefill, format, 0, 64, StagingMemory::kDevice).value();
    auto dst = KvStager::create(*decode, format, 0, 64, StagingMemory::kPinnedHost).value();
    stage_over(*src, *dst, src_slots, dst_slots);
    int64_t checked = 0;
    ASSERT_TRUE(tokens_match(*decode, dst_slots, *prefill, src_slots, 0, round_to_bf16, &checked));
    EXPECT_EQ(checked, 3 * 2 * tokens * 16);
  }
}

// Tensor-parallel head slices: a 4-head prefill pool feeds two 2-head decode pools, heads [0, 2)
// and [2, 4), each through its own stager slice.
TEST(KvStaging, HeadSlicesGoToTheirRanks) {
  auto p = cpu_platform();
  const uint64_t seed = 5000;
  std::printf("staging head slices seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto prefill = mem::MHATokenToKVPool::create(*p, pool_config(16, 20, 4, DType::kF32)).value();
  fill_values(*prefill, seed);
  const int64_t tokens = 70;
  const auto src_slots = token_slots(tokens, 16, 20, rng);
  const StagingFormat format{3, 2, 8, DType::kF32};
  for (int32_t rank = 0; rank < 2; ++rank) {
    auto decode = mem::MHATokenToKVPool::create(*p, pool_config(1, 200, 2, DType::kF32)).value();
    const auto dst_slots = token_slots(tokens, 1, 200, rng);
    auto src = KvStager::create(*prefill, format, 2 * rank, 128, StagingMemory::kDevice).value();
    auto dst = KvStager::create(*decode, format, 0, 128, StagingMemory::kDevice).value();
    stage_over(*src, *dst, src_slots, dst_slots);
    ASSERT_TRUE(tokens_match(*decode, dst_slots, *prefill, src_slots, 2 * rank, same))
        << "rank " << rank;
  }
}

// The engine's way (engine/disagg_prefill.cpp, disagg_decode.cpp): the sender gathers pieces of
// a prompt, one at a time, into its small staging region, each written at the piece's own place in
// the receiver's extent (format.bytes(first token) past the extent's start), and the receiver
// scatters the whole prompt from its extent at once. The staging layout is token-major, so pieces
// cut anywhere make the prompt's layout: the decode pool equals the naive token-by-token copy.
TEST(KvStaging, PiecesWrittenAtTheirOffsetsScatterAsOnePrompt) {
  auto p = cpu_platform();
  const uint64_t seed = 6000;
  std::printf("staging pieces seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  auto prefill = mem::MHATokenToKVPool::create(*p, pool_config(16, 20, 2, DType::kF32)).value();
  auto decode = mem::MHATokenToKVPool::create(*p, pool_config(4, 80, 2, DType::kF32)).value();
  fill_values(*prefill, seed);
  fill_values(*decode, seed + 1);
  const int64_t tokens = 150;
  const auto src_slots = token_slots(tokens, 16, 20, rng);
  const auto dst_slots = token_slots(tokens, 4, 80, rng);
  const StagingFormat format{3, 2, 8, DType::kF32};
  // The sender's region holds 40 tokens; the receiver's 400, the prompt's extent at token 37.
  std::vector<uint8_t> src_region(format.bytes(40));
  std::vector<uint8_t> dst_region(format.bytes(400));
  auto src = KvStager::create(*prefill, format, 0, 40,
                              StagingRegion{src_region.data(), src_region.size(), false})
                 .value();
  auto dst = KvStager::create(*decode, format, 0, 400,
                              StagingRegion{dst_region.data(), dst_region.size(), false})
                 .value();
  EXPECT_EQ(src->staging_bytes(), src_region.size());
  TransportOptions o;
  o.platform = p.get();  // waits on the gathers' ready events
  auto sender = create_kv_transport(o).value();
  auto receiver = create_kv_transport(o).value();
  ASSERT_TRUE(sender->register_region(src_region.data(), src_region.size(), Device{}).is_ok());
  const auto remote = receiver->register_region(dst_region.data(), dst_region.size(), Device{});
  ASSERT_TRUE(remote.is_ok());
  const PeerId peer = sender->connect(*remote).value();
  const uint64_t extent = format.bytes(37);
  // Pieces as chunked prefill and the sender's region cut them: [0, 23), [23, 63), [63, 103),
  // [103, 120), [120, 150).
  for (const auto& [begin, end] : {std::pair{0, 23}, {23, 63}, {63, 103}, {103, 120}, {120, 150}}) {
    const auto ready = src->gather(std::span(src_slots).subspan(begin, end - begin));
    ASSERT_TRUE(ready.is_ok()) << ready.status().to_string();
    const WriteOp op{0, extent + format.bytes(begin), format.bytes(end - begin)};
    const auto id = sender->post(peer, std::span(&op, 1), *ready);
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    ASSERT_EQ(testing::wait_transfer(*sender, *id, std::chrono::seconds(10),
                                     std::chrono::microseconds(0)),
              TransferStatus::kDone);
    sender->release(*id);
  }
  ASSERT_TRUE(dst->scatter(dst_slots, {}, extent).is_ok());
  int64_t checked = 0;
  ASSERT_TRUE(tokens_match(*decode, dst_slots, *prefill, src_slots, 0, same, &checked));
  EXPECT_EQ(checked, 3 * 2 * tokens * 16);
  // A chunk that would leave the region is refused, nothing queued.
  EXPECT_EQ(
      dst->scatter(std::span(dst_slots).subspan(0, 10), {}, format.bytes(391)).status().code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(src->gather(std::span(src_slots).subspan(0, 1), {}, src_region.size()).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(KvStager::create(*prefill, format, 0, 4, StagingRegion{}).status().code(),
            StatusCode::kInvalidArgument);
}

// The decode side's extents against a bitmap of taken tokens: allocate gives the lowest start of
// a free run long enough (first fit), -1 only when there is none; used() is the taken count.
TEST(StagingExtents, FirstFitAgainstABitmap) {
  const uint64_t seed = 6100;
  std::printf("staging extents seed %llu\n", static_cast<unsigned long long>(seed));
  std::mt19937_64 rng(seed);
  const int64_t capacity = 200;
  StagingExtents extents(capacity);
  std::vector<bool> taken(capacity, false);
  std::vector<std::pair<int64_t, int64_t>> live;  // begin, tokens
  for (int step = 0; step < 5000; ++step) {
    if (!live.empty() && rng() % 3 == 0) {
      const size_t i = rng() % live.size();
      extents.free(live[i].first);
      for (int64_t t = 0; t < live[i].second; ++t)
        taken[live[i].first + t] = false;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const int64_t n = 1 + static_cast<int64_t>(rng() % 60);
      int64_t want = -1;  // the reference: lowest start of n free tokens
      for (int64_t b = 0; b + n <= capacity && want < 0; ++b) {
        bool free = true;
        for (int64_t t = b; t < b + n && free; ++t)
          free = !taken[t];
        if (free) want = b;
      }
      const int64_t got = extents.allocate(n);
      ASSERT_EQ(got, want) << "step " << step << ", " << n << " tokens";
      if (got >= 0) {
        for (int64_t t = 0; t < n; ++t)
          taken[got + t] = true;
        live.emplace_back(got, n);
      }
    }
    const auto used = std::count(taken.begin(), taken.end(), true);
    ASSERT_EQ(extents.used(), used) << "step " << step;
  }
}

TEST(KvStaging, RefusesWhatItCannotStage) {
  auto p = cpu_platform();
  auto pool = mem::MHATokenToKVPool::create(*p, pool_config(16, 4, 2, DType::kBF16)).value();
  auto fp8 = mem::MHATokenToKVPool::create(*p, pool_config(16, 4, 2, DType::kFP8E4M3)).value();
  const auto code = [&](mem::MHATokenToKVPool& pl, StagingFormat f, int32_t head_begin,
                        int64_t max_tokens) {
    return KvStager::create(pl, f, head_begin, max_tokens, StagingMemory::kDevice).status().code();
  };
  EXPECT_EQ(code(*pool, {2, 2, 8, DType::kBF16}, 0, 16), StatusCode::kInvalidArgument);   // layers
  EXPECT_EQ(code(*pool, {3, 2, 16, DType::kBF16}, 0, 16), StatusCode::kInvalidArgument);  // dim
  EXPECT_EQ(code(*pool, {3, 2, 8, DType::kBF16}, 1, 16), StatusCode::kInvalidArgument);   // heads
  EXPECT_EQ(code(*pool, {3, 2, 8, DType::kBF16}, 0, 0), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(*fp8, {3, 2, 8, DType::kBF16}, 0, 16), StatusCode::kInvalidArgument);
  EXPECT_EQ(code(*fp8, {3, 2, 8, DType::kFP8E4M3}, 0, 16), StatusCode::kOk);
  auto stager =
      KvStager::create(*pool, {3, 2, 8, DType::kBF16}, 0, 4, StagingMemory::kDevice).value();
  const std::vector<int32_t> too_many = {1, 2, 3, 4, 5};
  EXPECT_EQ(stager->gather(too_many).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> outside = {1, static_cast<int32_t>(pool->num_slots())};
  EXPECT_EQ(stager->scatter(outside).status().code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> negative = {-1};
  EXPECT_EQ(stager->gather(negative).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(stager->gather(std::vector<int32_t>{}).is_ok());
}

}  // namespace
}  // namespace kvserve::disagg

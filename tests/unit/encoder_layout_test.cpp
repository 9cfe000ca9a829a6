// Encoder-decoder rows in both layouts of seed 000, including encoder_len 0 and 1500 at page 128.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/invariants.h"

namespace kvserve::mem {
namespace {

class EncoderLayoutTest : public testing::TestWithParam<std::tuple<int32_t, EncoderKvLayout>> {
 protected:
  int32_t ps() const { return std::get<0>(GetParam()); }
  EncoderKvLayout layout() const { return std::get<1>(GetParam()); }
};

// Prefill a batch of encoder-decoder requests, decode a few steps, and check that the metadata
// of both kinds of attention reads exactly the slots the model wrote for each region.
TEST_P(EncoderLayoutTest, RegionsRoundTripThroughMetadata) {
  ReqToTokenPool rows(8, 4096);
  auto alloc = make_allocator(64 * 1024, ps());
  ChunkCache cache(rows, *alloc);
  KvMemory mem{rows, *alloc, cache};
  const std::vector<int32_t> encoder_lens = {1500, 0, 1, 128, 1499};
  const std::vector<int32_t> decoder_lens = {4, 3, 1, 7, 2};
  const size_t bs = encoder_lens.size();

  std::vector<KvReqState> reqs(bs);
  std::vector<KvReqState*> ptrs;
  std::vector<int32_t> seq;
  std::vector<EncDecRow> er(bs);
  for (size_t i = 0; i < bs; ++i) {
    ptrs.push_back(&reqs[i]);
    const int32_t reserved = encoder_reserved_len(encoder_lens[i], ps(), layout());
    EXPECT_EQ(reserved, layout() == EncoderKvLayout::kAligned
                            ? (encoder_lens[i] + ps() - 1) / ps() * ps()
                            : encoder_lens[i]);
    seq.push_back(reserved + decoder_lens[i]);
  }
  std::vector<int32_t> out;
  ASSERT_TRUE(alloc_for_extend(mem, ptrs, seq, out).is_ok());
  for (size_t i = 0; i < bs; ++i)
    er[i] = {reqs[i].row, encoder_lens[i], decoder_lens[i]};

  // "Model writes": remember which slot got which (region, position).
  std::vector<int32_t> enc_loc;
  std::vector<int32_t> dec_loc;
  split_encoder_decoder_loc(out, er, ps(), layout(), enc_loc, dec_loc);
  std::map<int32_t, std::pair<int, int32_t>> written;  // slot -> (request, +pos enc / -pos-1 dec)
  size_t e = 0;
  size_t d = 0;
  for (size_t i = 0; i < bs; ++i) {
    for (int32_t p = 0; p < encoder_lens[i]; ++p)
      written[enc_loc[e++]] = {int(i), p};
    for (int32_t p = 0; p < decoder_lens[i]; ++p)
      written[dec_loc[d++]] = {int(i), -p - 1};
  }
  EXPECT_EQ(e, enc_loc.size());
  EXPECT_EQ(d, dec_loc.size());
  EXPECT_EQ(written.size(), enc_loc.size() + dec_loc.size()) << "a slot was written twice";

  // Decode 3 steps: new decoder positions go right after the decoder region.
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> dec_out;
    ASSERT_TRUE(alloc_for_decode(mem, ptrs, dec_out).is_ok());
    for (size_t i = 0; i < bs; ++i) {
      ASSERT_TRUE(written.emplace(dec_out[i], std::pair(int(i), -er[i].decoder_len - 1)).second);
      ++er[i].decoder_len;
    }
  }

  EncoderDecoderMetadata md;
  build_encoder_decoder_metadata(rows, er, ps(), layout(), md);
  const IndexUnit unit =
      layout() == EncoderKvLayout::kAligned ? IndexUnit::kPage : IndexUnit::kToken;
  EXPECT_EQ(md.cross.unit, unit);
  EXPECT_EQ(md.self.unit, unit);
  const int32_t ips = md.cross.page_size;
  for (size_t i = 0; i < bs; ++i) {
    SCOPED_TRACE(testing::Message() << "request " << i);
    EXPECT_EQ(md.cross.kv_lens[i], encoder_lens[i]);
    EXPECT_EQ(md.self.kv_lens[i], er[i].decoder_len);
    for (int32_t p = 0; p < encoder_lens[i]; ++p) {
      const int32_t slot = md.cross.indices[md.cross.indptr[i] + p / ips] * ips + p % ips;
      ASSERT_EQ(written.at(slot), std::pair(int(i), p)) << "cross position " << p;
    }
    for (int32_t p = 0; p < er[i].decoder_len; ++p) {
      const int32_t slot = md.self.indices[md.self.indptr[i] + p / ips] * ips + p % ips;
      ASSERT_EQ(written.at(slot), std::pair(int(i), -p - 1)) << "self position " << p;
    }
  }

  std::vector<const KvReqState*> live(ptrs.begin(), ptrs.end());
  EXPECT_TRUE(check_memory_invariants(mem, live).is_ok());
  for (auto& r : reqs)
    release_kv_cache(mem, r, {}, false);
  EXPECT_EQ(alloc->available_size(), alloc->size());
}

INSTANTIATE_TEST_SUITE_P(PageSizesAndLayouts, EncoderLayoutTest,
                         testing::Combine(testing::Values(1, 16, 64, 128),
                                          testing::Values(EncoderKvLayout::kAligned,
                                                          EncoderKvLayout::kRagged)));

TEST(EncoderLayout, Whisper1500AtPage128) {
  // Seed 000's numbers: 1500 % 128 = 92, so the aligned layout reserves 1536 (36 padding slots).
  EXPECT_EQ(encoder_reserved_len(1500, 128, EncoderKvLayout::kAligned), 1536);
  EXPECT_EQ(encoder_reserved_len(1500, 128, EncoderKvLayout::kRagged), 1500);
  EXPECT_EQ(self_attention_range({7, 1500, 5}, 128, EncoderKvLayout::kAligned).start, 1536);
  EXPECT_EQ(self_attention_range({7, 1500, 5}, 128, EncoderKvLayout::kRagged).start, 1500);
  EXPECT_EQ(encoder_reserved_len(1500, 1, EncoderKvLayout::kAligned), 1500);
}

TEST(EncoderLayout, EmptyEncoderGivesEmptyCrossMetadata) {
  ReqToTokenPool rows(4, 64);
  auto alloc = make_allocator(1024, 128);
  ChunkCache cache(rows, *alloc);
  KvMemory mem{rows, *alloc, cache};
  for (const EncoderKvLayout layout : {EncoderKvLayout::kAligned, EncoderKvLayout::kRagged}) {
    KvReqState r;
    KvReqState* p = &r;
    int32_t seq = encoder_reserved_len(0, 128, layout) + 1;  // a text-only warmup request
    std::vector<int32_t> out;
    ASSERT_TRUE(alloc_for_extend(mem, std::span(&p, 1), std::span(&seq, 1), out).is_ok());
    EncoderDecoderMetadata md;
    const std::vector<EncDecRow> er = {{r.row, 0, 1}, {r.row, 0, 1}};
    build_encoder_decoder_metadata(rows, er, 128, layout, md);
    EXPECT_EQ(md.cross.total_kv(), 0);
    EXPECT_TRUE(md.cross.indices.empty());
    EXPECT_EQ(md.cross.indptr, (std::vector<int32_t>{0, 0, 0}));
    EXPECT_EQ(md.self.total_kv(), 2);
    std::vector<int32_t> enc;
    std::vector<int32_t> dec;
    split_encoder_decoder_loc(out, std::vector<EncDecRow>{{r.row, 0, 1}}, 128, layout, enc, dec);
    EXPECT_TRUE(enc.empty());
    EXPECT_EQ(dec, out);
    release_kv_cache(mem, r, {}, false);
  }
}

TEST(EncoderLayout, ParseNames) {
  EXPECT_EQ(*parse_encoder_kv_layout("aligned"), EncoderKvLayout::kAligned);
  EXPECT_EQ(*parse_encoder_kv_layout("ragged"), EncoderKvLayout::kRagged);
  EXPECT_EQ(parse_encoder_kv_layout("paged").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(encoder_kv_layout_name(EncoderKvLayout::kRagged), "ragged");
}

}  // namespace
}  // namespace kvserve::mem

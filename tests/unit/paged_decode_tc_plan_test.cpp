// The host side of the tensor-core decode kernel (ops::paged_decode_tc): the split ranges the
// kernel reads (decode_tc_split_range, shared with the device code), the blocks-per-SM table,
// the split plan (fill of the resident slots, per-request splits that a decode graph's plan
// reproduces, workspace size) and the parallel float64 reference. No device needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"

namespace kvserve {
namespace {

using ops::decode_tc_split_range;
using ops::DecodeSplitRange;
constexpr int32_t kTile = ops::kDecodeTcTileTokens;

// The ranges of splits 0..num_splits-1 are in order, disjoint and cover [0, seq).
void expect_partition(int32_t seq, int32_t num_splits, int32_t tps, int32_t min_tps) {
  int32_t next = 0;
  int32_t used = 0;
  bool seen_empty = false;
  for (int32_t s = 0; s < num_splits; ++s) {
    const DecodeSplitRange r = decode_tc_split_range(seq, s, num_splits, tps, min_tps);
    ASSERT_LE(r.begin, r.end) << "seq " << seq << " split " << s;
    if (r.begin == r.end) {
      seen_empty = true;
      continue;
    }
    ASSERT_FALSE(seen_empty) << "a non-empty split after an empty one: seq " << seq << " split "
                             << s << " of " << num_splits << " tps " << tps << " min " << min_tps;
    ASSERT_EQ(r.begin, next) << "seq " << seq << " split " << s << " of " << num_splits;
    if (min_tps > 0 && num_splits > 1) {
      EXPECT_EQ(r.begin % kTile, 0) << "per-request splits start on a tile";
    }
    next = r.end;
    ++used;
  }
  ASSERT_EQ(next, seq) << "seq " << seq << " splits " << num_splits << " tps " << tps << " min "
                       << min_tps;
  if (min_tps > 0 && num_splits > 1) {
    // Every split it can use holds a tile or more, and their sizes differ by one tile at most.
    const int32_t most = std::clamp((seq + min_tps - 1) / min_tps, 1, num_splits);
    const int32_t tiles = (seq + kTile - 1) / kTile;
    EXPECT_EQ(used, std::min(most, tiles)) << "seq " << seq << " splits " << num_splits;
    int32_t shortest = seq, longest = 0;
    for (int32_t s = 0; s < used; ++s) {
      const DecodeSplitRange r = decode_tc_split_range(seq, s, num_splits, tps, min_tps);
      const int32_t n = (r.end - r.begin + kTile - 1) / kTile;
      shortest = std::min(shortest, n);
      longest = std::max(longest, n);
    }
    if (used > 0) {
      EXPECT_LE(longest - shortest, 1) << "seq " << seq << " splits " << num_splits;
    }
  }
}

TEST(DecodeTcSplitRange, PartitionsEveryLength) {
  std::vector<int32_t> lens(301);
  std::iota(lens.begin(), lens.end(), 0);
  for (const int32_t l : {511, 512, 513, 1000, 1024, 1100, 4095, 4096, 4097, 8192, 32768})
    lens.push_back(l);
  for (const int32_t seq : lens) {
    for (const int32_t n : {1, 2, 3, 4, 5, 7, 16, 33, 64}) {
      // Per-request splits.
      for (const int32_t min_tps : {1, 64, 100, 128, 256})
        expect_partition(seq, n, /*tps=*/0, min_tps);
      // Every request cut alike: the plan's chunk for a longest request of seq or more, a
      // short chunk (the last split takes the rest) and an unaligned one.
      for (const int32_t longest : {seq, seq + 1, 2 * seq + 5, 32768}) {
        expect_partition(seq, n, std::max(1, (longest + n - 1) / n), 0);
      }
      expect_partition(seq, n, 1, 0);
      expect_partition(seq, n, 17, 0);
    }
  }
}

TEST(DecodeTcSplitRange, PerRequestSplitsAreWholeTiles) {
  // 4097 positions = 65 tiles over 16 splits: the first takes 5 tiles, the other 15 take 4.
  EXPECT_EQ(decode_tc_split_range(4097, 0, 16, 0, 64).end, 5 * kTile);
  EXPECT_EQ(decode_tc_split_range(4097, 1, 16, 0, 64).begin, 5 * kTile);
  EXPECT_EQ(decode_tc_split_range(4097, 1, 16, 0, 64).end, 9 * kTile);
  EXPECT_EQ(decode_tc_split_range(4097, 15, 16, 0, 64).begin, 61 * kTile);
  EXPECT_EQ(decode_tc_split_range(4097, 15, 16, 0, 64).end, 4097);
  // 4096 positions = 64 tiles over 33 splits of at least 128: 32 splits of 2 tiles, one empty.
  EXPECT_EQ(decode_tc_split_range(4096, 31, 33, 0, 128).begin, 62 * kTile);
  EXPECT_EQ(decode_tc_split_range(4096, 31, 33, 0, 128).end, 4096);
  EXPECT_EQ(decode_tc_split_range(4096, 32, 33, 0, 128).begin, 4096);
  EXPECT_EQ(decode_tc_split_range(4096, 32, 33, 0, 128).end, 4096);
  // 17 positions: one split (ceil(17 / 128) = 1), the others empty.
  EXPECT_EQ(decode_tc_split_range(17, 0, 40, 0, 128).end, 17);
  EXPECT_EQ(decode_tc_split_range(17, 1, 40, 0, 128).begin, 17);
  EXPECT_EQ(decode_tc_split_range(17, 1, 40, 0, 128).end, 17);
  // One split: everything, whatever the chunk says.
  EXPECT_EQ(decode_tc_split_range(1000, 0, 1, 3, 0).end, 1000);
}

TEST(DecodeTcPlan, CtasPerSmTable) {
  // 228 KiB per SM, 1 KiB reserved per block, at most 4 blocks (register budget).
  EXPECT_EQ(ops::decode_tc_smem_bytes(128, 3), 3 * 2 * 64 * 128 * 2);
  EXPECT_EQ(ops::decode_tc_ctas_per_sm(128, 2), 3);
  EXPECT_EQ(ops::decode_tc_ctas_per_sm(128, 3), 2);
  EXPECT_EQ(ops::decode_tc_ctas_per_sm(128, 4), 1);
  EXPECT_EQ(ops::decode_tc_ctas_per_sm(64, 2), 4);
  EXPECT_EQ(ops::decode_tc_ctas_per_sm(64, 3), 4);
  EXPECT_EQ(ops::decode_tc_ctas_per_sm(64, 4), 3);
}

TEST(DecodeTcPlan, Stages) {
  EXPECT_EQ(ops::resolve_decode_tc_stages(2, 128), 2);
  EXPECT_EQ(ops::resolve_decode_tc_stages(4, 64), 4);
  // The environment plays no part any more (platform/kernel_switches.h).
  EXPECT_EQ(ops::resolve_decode_tc_stages(0, 128), 3);
  EXPECT_EQ(ops::resolve_decode_tc_stages(0, 64), 4);
  EXPECT_EQ(ops::resolve_decode_tc_stages(7, 64), 4);  // not a depth: the default
}

TEST(DecodeTcPlan, FillsTheResidentSlots) {
  constexpr int32_t kSms = 132;                                     // H200
  const int32_t slots = kSms * ops::decode_tc_ctas_per_sm(128, 3);  // 264
  // Large batches: one split, no workspace.
  ops::PagedDecodePlan p = ops::plan_paged_decode_tc(64, 32, 8, 128, 1100, kSms, 3);
  EXPECT_EQ(p.num_splits, 1);
  EXPECT_EQ(p.workspace_floats, 0u);
  EXPECT_EQ(p.workspace_counters, 0u);
  EXPECT_EQ(ops::plan_paged_decode_tc(33, 32, 8, 128, 4096, kSms, 3).num_splits, 1);  // 264
  // More than half the slots: one split already fills the machine.
  EXPECT_EQ(ops::plan_paged_decode_tc(20, 32, 8, 128, 4096, kSms, 3).num_splits, 1);  // 160
  // Batch 16 x 8 KV heads = 128 blocks: two splits fill 256 of 264 slots.
  p = ops::plan_paged_decode_tc(16, 32, 8, 128, 4096, kSms, 3);
  EXPECT_EQ(p.num_splits, 2);
  EXPECT_EQ(p.workspace_floats, size_t{16} * 32 * 2 * 129);
  EXPECT_EQ(p.workspace_counters, size_t{16} * 8);
  EXPECT_EQ(p.tokens_per_split, 2048);
  EXPECT_EQ(p.min_tokens_per_split, 2 * kTile);
  // Batch 1: one block per SM, 16 splits x 8 KV heads = 128 blocks, at any length from 2048 on.
  p = ops::plan_paged_decode_tc(1, 32, 8, 128, 4096, kSms, 3);
  EXPECT_EQ(p.num_splits, 16);
  EXPECT_EQ(ops::plan_paged_decode_tc(1, 32, 8, 128, 1 << 20, kSms, 3).num_splits, 16);
  EXPECT_EQ(ops::plan_paged_decode_tc(1, 32, 8, 128, 1024, kSms, 3).num_splits, 8);  // 2 tiles
  // Batch 4 x 8 KV heads: 4 splits (one block per SM); batch 16: two blocks per SM, 2 splits.
  EXPECT_EQ(ops::plan_paged_decode_tc(4, 32, 8, 128, 4096, kSms, 3).num_splits, 4);
  // Every choice is one wave: one block per SM when that gives two splits or more, else as many
  // splits as fit the resident slots; at most 64.
  for (int32_t bs = 1; bs <= 300; ++bs) {
    for (const int32_t kv : {1, 2, 4, 8}) {
      const ops::PagedDecodePlan q =
          ops::plan_paged_decode_tc(bs, 4 * kv, kv, 128, 1 << 20, kSms, 3);
      const int32_t base = bs * kv;
      const int32_t blocks = kSms / base >= 2 ? kSms : slots;  // the wave's blocks
      EXPECT_EQ(q.num_splits, std::clamp(blocks / base, 1, 64)) << "bs " << bs << " kv " << kv;
      if (q.num_splits > 1) {
        EXPECT_LE(base * q.num_splits, blocks) << "bs " << bs << " kv " << kv;
        EXPECT_GT(base * (q.num_splits + 1), q.num_splits < 64 ? blocks : 0);
        EXPECT_EQ(q.workspace_counters, static_cast<size_t>(base));
      }
    }
  }
  // Short requests cap the splits at two tiles each.
  EXPECT_EQ(ops::plan_paged_decode_tc(1, 32, 8, 128, 200, kSms, 3).num_splits, 2);
  EXPECT_EQ(ops::plan_paged_decode_tc(1, 32, 8, 128, 128, kSms, 3).num_splits, 1);
  EXPECT_EQ(ops::plan_paged_decode_tc(4, 32, 8, 128, 0, kSms, 3).num_splits, 1);
  // tokens_per_split: whole tiles covering the longest request.
  for (const int32_t len : {1, 63, 64, 65, 1000, 4097, 100000}) {
    const ops::PagedDecodePlan q = ops::plan_paged_decode_tc(1, 8, 8, 64, len, kSms);
    EXPECT_EQ(q.tokens_per_split % kTile, 0);
    EXPECT_GE(int64_t{q.tokens_per_split} * q.num_splits, len);
  }
}

// A decode graph plans for the longest possible request; per-request splits then cut each
// request exactly as the eager plan for the batch's own longest request does.
TEST(DecodeTcPlan, GraphPlanCutsRequestsAsTheEagerPlan) {
  for (const int32_t sms : {1, 78, 132}) {
    for (int32_t bs = 1; bs <= 160; bs += (bs < 24 ? 1 : 7)) {
      const ops::PagedDecodePlan graph = ops::plan_paged_decode_tc(bs, 28, 4, 128, 131072, sms);
      for (const int32_t longest : {1, 17, 128, 129, 1000, 4097, 32768}) {
        const ops::PagedDecodePlan eager = ops::plan_paged_decode_tc(bs, 28, 4, 128, longest, sms);
        for (const int32_t len : {0, 1, longest / 3, longest}) {
          for (int32_t s = 0; s < std::max(graph.num_splits, eager.num_splits); ++s) {
            const DecodeSplitRange g =
                s < graph.num_splits
                    ? decode_tc_split_range(len, s, graph.num_splits, graph.tokens_per_split,
                                            graph.min_tokens_per_split)
                    : DecodeSplitRange{len, len};
            const DecodeSplitRange e =
                s < eager.num_splits
                    ? decode_tc_split_range(len, s, eager.num_splits, eager.tokens_per_split,
                                            eager.min_tokens_per_split)
                    : DecodeSplitRange{len, len};
            const bool both_empty = g.begin == g.end && e.begin == e.end;
            ASSERT_TRUE(both_empty || (g.begin == e.begin && g.end == e.end))
                << "sms " << sms << " bs " << bs << " longest " << longest << " len " << len
                << " split " << s << ": graph [" << g.begin << ", " << g.end << ") eager ["
                << e.begin << ", " << e.end << ")";
          }
        }
      }
    }
  }
}

// The parallel reference (through the prefill reference) equals the decode reference.
TEST(DecodeTcReference, ParallelEqualsDecodeReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.f, 1.f);
  const int32_t ps = 16, heads = 8, kv_heads = 2, d = 64;
  const std::vector<int32_t> lens = {0, 1, 17, 300, 64};
  std::vector<int32_t> indptr = {0};
  for (const int32_t l : lens)
    indptr.push_back(indptr.back() + (l + ps - 1) / ps);
  std::vector<int32_t> pages(static_cast<size_t>(indptr.back()));
  std::iota(pages.begin(), pages.end(), 1);
  std::shuffle(pages.begin(), pages.end(), rng);
  const int64_t slots = (indptr.back() + 1) * ps;
  auto fill_bf16 = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v)
      x = float_to_bf16(normal(rng));
    return v;
  };
  const auto k = fill_bf16(slots * kv_heads * d), v = fill_bf16(slots * kv_heads * d);
  const auto q = fill_bf16(int64_t{5} * heads * d);
  ops::PagedDecodeParams p;
  p.q = q.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.page_indptr = indptr.data();
  p.page_ids = pages.data();
  p.seq_lens = lens.data();
  p.batch = 5;
  p.num_q_heads = heads;
  p.num_kv_heads = kv_heads;
  p.head_dim = d;
  p.page_size = ps;
  p.sm_scale = 0.125f;
  std::vector<float> a(static_cast<size_t>(5) * heads * d), b(a.size(), -1.f);
  ops::reference::paged_decode(p, a.data());
  ops::reference::paged_decode_parallel(p, b.data());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], 1e-6 * std::max(1.0f, std::abs(a[i]))) << i;
  for (int32_t i = 0; i < heads * d; ++i)
    EXPECT_EQ(b[i], 0.f) << "an empty query is zero";
}

}  // namespace
}  // namespace kvserve

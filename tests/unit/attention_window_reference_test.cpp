// Sliding windows and soft-capping in the float64 references the CUDA kernels are tested against
// (ops::reference::paged_decode, paged_prefill, paged_decode_parallel) and in the decode split
// plans (planned over the window). Each reference is checked against a second path: a window
// against the unwindowed reference over only the window's positions (page ids advanced past the
// rest), prefill rows against decode queries of the same position, soft-capping against scores
// capped by hand. No device needed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"

namespace kvserve {
namespace {

constexpr int32_t kHeads = 4;
constexpr int32_t kKvHeads = 2;
constexpr int32_t kDim = 16;

struct Data {
  std::vector<uint16_t> q, k, v;  // bf16
  std::vector<int32_t> page_ids;  // page size 1: position t of the sequence is row page_ids[t]
};

// One sequence of `len` positions stored in shuffled rows, and `queries` query rows.
Data make_data(uint64_t seed, int32_t len, int32_t queries) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  Data d;
  for (int64_t i = 0; i < int64_t{queries} * kHeads * kDim; ++i)
    d.q.push_back(float_to_bf16(n(rng)));
  for (int64_t i = 0; i < int64_t{len} * kKvHeads * kDim; ++i) {
    d.k.push_back(float_to_bf16(n(rng)));
    d.v.push_back(float_to_bf16(n(rng)));
  }
  d.page_ids.resize(static_cast<size_t>(len));
  for (int32_t t = 0; t < len; ++t)
    d.page_ids[t] = t;
  std::shuffle(d.page_ids.begin(), d.page_ids.end(), rng);
  return d;
}

ops::PagedDecodeParams decode_params(const Data& d, const int32_t* indptr, const int32_t* lens,
                                     int32_t batch) {
  ops::PagedDecodeParams p;
  p.q = d.q.data();
  p.k_cache = d.k.data();
  p.v_cache = d.v.data();
  p.page_indptr = indptr;
  p.page_ids = d.page_ids.data();
  p.seq_lens = lens;
  p.batch = batch;
  p.num_q_heads = kHeads;
  p.num_kv_heads = kKvHeads;
  p.head_dim = kDim;
  p.page_size = 1;
  p.sm_scale = 2.0f / std::sqrt(float{kDim});
  return p;
}

TEST(AttentionWindowReference, DecodeWindowIsTheUnwindowedLastPositions) {
  constexpr int32_t kLen = 50;
  const uint64_t seed = 11;
  std::cout << "[ seed     ] " << seed << std::endl;
  const Data d = make_data(seed, kLen, 1);
  for (const int32_t w : {0, 1, 17, 48, 49, 1000}) {
    for (const float cap : {0.0f, 3.0f}) {
      const int32_t indptr0 = 0, len = kLen;
      ops::PagedDecodeParams p = decode_params(d, &indptr0, &len, 1);
      p.window_left = w;
      p.logit_softcap = cap;
      std::vector<float> got(kHeads * kDim), want(kHeads * kDim), full(kHeads * kDim);
      ops::reference::paged_decode(p, got.data());
      // The last min(w + 1, len) positions, unwindowed: the page list starts further on.
      const int32_t keep = std::min(w + 1, kLen);
      const int32_t first = kLen - keep;
      ops::PagedDecodeParams q = decode_params(d, &first, &keep, 1);
      q.logit_softcap = cap;
      ops::reference::paged_decode(q, want.data());
      ops::PagedDecodeParams all = decode_params(d, &indptr0, &len, 1);
      all.logit_softcap = cap;
      ops::reference::paged_decode(all, full.data());
      double diff_from_full = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i], want[i]) << "window " << w << " cap " << cap << " element " << i;
        diff_from_full = std::max(diff_from_full, double(std::abs(got[i] - full[i])));
      }
      if (w + 1 < kLen) {
        EXPECT_GT(diff_from_full, 1e-3) << "the window changes the output: " << w;
      } else {
        EXPECT_EQ(diff_from_full, 0.0) << "a window past the start is the whole context";
      }
    }
  }
}

TEST(AttentionWindowReference, SoftcapMatchesScoresCappedByHand) {
  // One query head over two positions with k_0 = 0 (score 0) and k_1 chosen so the scaled score
  // is 3: capped at 2 it is 2 tanh(1.5); the output is the softmax-weighted mean of v.
  std::vector<uint16_t> q(kDim, float_to_bf16(0.0f)), k(2 * kDim, float_to_bf16(0.0f));
  std::vector<uint16_t> v(2 * kDim);
  q[0] = float_to_bf16(1.0f);
  k[kDim] = float_to_bf16(3.0f);
  for (int32_t i = 0; i < kDim; ++i) {
    v[i] = float_to_bf16(1.0f);
    v[kDim + i] = float_to_bf16(-2.0f);
  }
  const int32_t ids[] = {0, 1};
  const int32_t indptr = 0, len = 2;
  ops::PagedDecodeParams p;
  p.q = q.data();
  p.k_cache = k.data();
  p.v_cache = v.data();
  p.page_indptr = &indptr;
  p.page_ids = ids;
  p.seq_lens = &len;
  p.batch = 1;
  p.num_q_heads = 1;
  p.num_kv_heads = 1;
  p.head_dim = kDim;
  p.page_size = 1;
  p.sm_scale = 1.0f;
  p.logit_softcap = 2.0f;
  std::vector<float> out(kDim);
  ops::reference::paged_decode(p, out.data());
  const double s1 = 2.0 * std::tanh(1.5);
  const double w1 = std::exp(s1) / (1.0 + std::exp(s1));
  const double want = (1.0 - w1) * 1.0 + w1 * -2.0;
  for (int32_t i = 0; i < kDim; ++i)
    EXPECT_NEAR(out[i], want, 1e-6) << i;
  // The prefill reference (a one-token extend) agrees.
  std::vector<float> pre(kDim);
  ops::reference::paged_decode_parallel(p, pre.data());
  for (int32_t i = 0; i < kDim; ++i)
    EXPECT_NEAR(pre[i], want, 1e-6) << i;
}

TEST(AttentionWindowReference, PrefillRowsAreDecodeQueriesOfTheirPosition) {
  // An extend of 9 tokens after a prefix of 30: row i is the decode query at position 30 + i.
  constexpr int32_t kPrefix = 30;
  constexpr int32_t kNew = 9;
  const uint64_t seed = 12;
  std::cout << "[ seed     ] " << seed << std::endl;
  const Data d = make_data(seed, kPrefix + kNew, kNew);
  for (const int32_t w : {0, 1, 5, 17, 100}) {
    for (const float cap : {0.0f, 3.0f}) {
      const int32_t qo[] = {0, kNew};
      const int32_t indptr = 0, kv_len = kPrefix + kNew;
      ops::PagedPrefillParams p;
      p.q = d.q.data();
      p.k_cache = d.k.data();
      p.v_cache = d.v.data();
      p.qo_indptr = qo;
      p.page_indptr = &indptr;
      p.page_ids = d.page_ids.data();
      p.kv_lens = &kv_len;
      p.batch = 1;
      p.total_q = kNew;
      p.num_q_heads = kHeads;
      p.num_kv_heads = kKvHeads;
      p.head_dim = kDim;
      p.page_size = 1;
      p.sm_scale = 2.0f / std::sqrt(float{kDim});
      p.window_left = w;
      p.logit_softcap = cap;
      std::vector<float> got(kNew * kHeads * kDim);
      ops::reference::paged_prefill(p, got.data());
      // The same rows as decode queries: query i sees positions [0, kPrefix + i].
      std::vector<int32_t> starts(kNew, 0), lens(kNew);
      for (int32_t i = 0; i < kNew; ++i)
        lens[i] = kPrefix + i + 1;
      ops::PagedDecodeParams dp = decode_params(d, starts.data(), lens.data(), kNew);
      dp.sm_scale = p.sm_scale;
      dp.window_left = w;
      dp.logit_softcap = cap;
      std::vector<float> want(got.size());
      ops::reference::paged_decode(dp, want.data());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-6) << "window " << w << " cap " << cap << " " << i;
    }
  }
}

TEST(AttentionWindowReference, DecodePlansSplitTheWindowOnly) {
  constexpr int32_t kSms = 132;
  for (const int32_t w : {0, 17, 255, 1000, 5000}) {
    const ops::PagedDecodePlan windowed = ops::plan_paged_decode(2, 32, 8, 128, 100000, kSms, w);
    const ops::PagedDecodePlan as_short =
        ops::plan_paged_decode(2, 32, 8, 128, std::min(100000, w + 1), kSms);
    EXPECT_EQ(windowed.num_splits, as_short.num_splits) << w;
    EXPECT_EQ(windowed.tokens_per_split, as_short.tokens_per_split) << w;
    EXPECT_EQ(windowed.workspace_floats, as_short.workspace_floats) << w;
    const ops::PagedDecodePlan tc = ops::plan_paged_decode_tc(2, 32, 8, 128, 100000, kSms, 0, w);
    const ops::PagedDecodePlan tc_short =
        ops::plan_paged_decode_tc(2, 32, 8, 128, std::min(100000, w + 1), kSms);
    EXPECT_EQ(tc.num_splits, tc_short.num_splits) << w;
    EXPECT_EQ(tc.tokens_per_split, tc_short.tokens_per_split) << w;
  }
  // A short window reads one split's worth: no splitting; the unwindowed plan splits.
  EXPECT_EQ(ops::plan_paged_decode(2, 32, 8, 128, 100000, kSms, 17).num_splits, 1);
  EXPECT_GT(ops::plan_paged_decode(2, 32, 8, 128, 100000, kSms).num_splits, 1);
  EXPECT_EQ(ops::plan_paged_decode_tc(2, 32, 8, 128, 100000, kSms, 0, 17).num_splits, 1);
  EXPECT_GT(ops::plan_paged_decode_tc(2, 32, 8, 128, 100000, kSms).num_splits, 1);
  // window_first / windowed_len: the positions a query at seq_len - 1 reads.
  EXPECT_EQ(ops::window_first(100, -1), 0);
  EXPECT_EQ(ops::window_first(100, 0), 99);
  EXPECT_EQ(ops::window_first(100, 17), 82);
  EXPECT_EQ(ops::window_first(100, 99), 0);
  EXPECT_EQ(ops::window_first(100, 1000), 0);
  EXPECT_EQ(ops::window_first(0, 5), 0);
  EXPECT_EQ(ops::windowed_len(100, 17), 18);
  EXPECT_EQ(ops::windowed_len(10, 17), 10);
  EXPECT_EQ(ops::windowed_len(0, 0), 0);
}

TEST(AttentionWindowReference, DecodeTcStagesFitSharedMemory) {
  for (const int32_t d : {64, 80, 96, 128, 256}) {
    for (const int32_t requested : {0, 2, 3, 4}) {
      const int32_t s = ops::resolve_decode_tc_stages(requested, d);
      EXPECT_LE(ops::decode_tc_smem_bytes(d, s), ops::kMaxSmemPerBlock) << d << " " << requested;
      EXPECT_GE(s, 2);
    }
  }
  EXPECT_EQ(ops::resolve_decode_tc_stages(4, 256), 3);
  EXPECT_EQ(ops::resolve_decode_tc_stages(0, 128), 3);
  EXPECT_EQ(ops::tc_smem_row_elems(80), 128);
  EXPECT_EQ(ops::tc_smem_row_elems(96), 128);
  EXPECT_EQ(ops::tc_smem_row_elems(256), 256);
}

}  // namespace
}  // namespace kvserve

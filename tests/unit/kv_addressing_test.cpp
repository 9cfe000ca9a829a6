// The two K/V addressings of the paged kernels' params (paged_decode_params.h) in the float64
// references: in place through page ids, and contiguous rows (page_ids null, row = indptr +
// position: the rows cuda-ragged gathers). The same K/V read either way must give the same
// result, bit for bit, for decode, the parallel decode and prefill (causal and not); the GPU
// suite contiguous_kv_test holds the kernels to the same. A contiguous read with a page size other
// than 1 is a bug: a CHECK. And the prefill reference's strided rows (packed q|k|v).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "support/packed_qkv.h"

namespace kvserve {
namespace {

constexpr int32_t kKvHeads = 2, kQHeads = 4, kDim = 8, kPage = 4;
constexpr int64_t kRow = int64_t{kKvHeads} * kDim;

// A shuffled paged pool of bf16 K/V for requests of `lens` positions, and the same rows gathered.
struct Pool {
  std::vector<int32_t> lens = {0, 1, 6, 13};
  std::vector<int32_t> page_indptr{0}, row_indptr{0}, pages;
  std::vector<uint16_t> k, v, gk, gv;

  explicit Pool(uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    for (const int32_t n : lens) {
      page_indptr.push_back(page_indptr.back() + (n + kPage - 1) / kPage);
      row_indptr.push_back(row_indptr.back() + n);
    }
    const int32_t num_pages = page_indptr.back() + 3;
    pages.resize(static_cast<size_t>(page_indptr.back()));
    std::iota(pages.begin(), pages.end(), 1);
    std::shuffle(pages.begin(), pages.end(), rng);
    const size_t elems = static_cast<size_t>(num_pages) * kPage * kRow;
    for (auto* cache : {&k, &v}) {
      cache->resize(elems);
      for (uint16_t& e : *cache)
        e = float_to_bf16(normal(rng));
    }
    for (size_t b = 0; b < lens.size(); ++b) {
      for (int32_t t = 0; t < lens[b]; ++t) {
        const int64_t slot = ops::kv_row_of(pages.data(), page_indptr[b], kPage, t);
        EXPECT_EQ(slot, int64_t{pages[page_indptr[b] + t / kPage]} * kPage + t % kPage);
        gk.insert(gk.end(), k.begin() + slot * kRow, k.begin() + (slot + 1) * kRow);
        gv.insert(gv.end(), v.begin() + slot * kRow, v.begin() + (slot + 1) * kRow);
      }
    }
  }

  template <typename Params>
  void address(Params& p, bool contiguous) const {
    p.k_cache = contiguous ? gk.data() : k.data();
    p.v_cache = contiguous ? gv.data() : v.data();
    p.page_indptr = contiguous ? row_indptr.data() : page_indptr.data();
    p.page_ids = contiguous ? nullptr : pages.data();
    p.page_size = contiguous ? 1 : kPage;
  }
};

std::vector<uint16_t> random_q(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<uint16_t> q(n);
  for (uint16_t& x : q)
    x = float_to_bf16(normal(rng));
  return q;
}

TEST(KvAddressing, ContiguousRowIsIndptrPlusPosition) {
  EXPECT_EQ(ops::kv_row_of(nullptr, 40, 1, 7), 47);
  const std::vector<int32_t> pages = {9, 2};
  EXPECT_EQ(ops::kv_row_of(pages.data(), 0, 16, 17), 2 * 16 + 1);
}

TEST(KvAddressing, DecodeReferencesReadBothAlike) {
  for (const uint64_t seed : {1u, 2u, 3u}) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    const Pool pool(seed);
    const auto batch = static_cast<int32_t>(pool.lens.size());
    const std::vector<uint16_t> q = random_q(seed + 100, size_t{4} * kQHeads * kDim);
    std::vector<float> out[2][2];
    for (const bool contiguous : {false, true}) {
      ops::PagedDecodeParams p;
      p.q = q.data();
      pool.address(p, contiguous);
      p.seq_lens = pool.lens.data();
      p.batch = batch;
      p.num_q_heads = kQHeads;
      p.num_kv_heads = kKvHeads;
      p.head_dim = kDim;
      p.sm_scale = 0.35f;
      for (std::vector<float>& o : out[contiguous])
        o.assign(q.size(), -1.f);
      ops::reference::paged_decode(p, out[contiguous][0].data());
      ops::reference::paged_decode_parallel(p, out[contiguous][1].data());
    }
    EXPECT_EQ(out[0][0], out[1][0]);
    EXPECT_EQ(out[0][1], out[1][1]);
    // Not trivially equal: request 1's one position gives its V row, request 0 zeros.
    EXPECT_EQ(out[1][0][0], 0.f);
    EXPECT_EQ(out[1][0][kQHeads * kDim], bf16_to_float(pool.gv[0]));
  }
}

TEST(KvAddressing, PrefillReferencesReadBothAlike) {
  const Pool pool(7);
  const std::vector<int32_t> q_lens = {0, 1, 3, 13};
  std::vector<int32_t> qo{0};
  for (const int32_t n : q_lens)
    qo.push_back(qo.back() + n);
  const std::vector<uint16_t> q = random_q(8, static_cast<size_t>(qo.back()) * kQHeads * kDim);
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "cross");
    std::vector<float> out[2];
    for (const bool contiguous : {false, true}) {
      ops::PagedPrefillParams p;
      p.q = q.data();
      pool.address(p, contiguous);
      p.qo_indptr = qo.data();
      p.kv_lens = pool.lens.data();
      p.batch = static_cast<int32_t>(q_lens.size());
      p.total_q = qo.back();
      p.num_q_heads = kQHeads;
      p.num_kv_heads = kKvHeads;
      p.head_dim = kDim;
      p.causal = causal;
      p.sm_scale = 0.35f;
      out[contiguous].assign(q.size(), -1.f);
      ops::reference::paged_prefill(p, out[contiguous].data());
    }
    EXPECT_EQ(out[0], out[1]);
  }
}

// Strided rows (PagedPrefillParams::q_stride / kv_stride): the reference reading packed q|k|v rows
// in place equals it on dense copies.
TEST(KvAddressing, PrefillReferenceReadsPackedRows) {
  const std::vector<int32_t> cu = {0, 5, 12};
  const int32_t n = cu.back();
  const int64_t qw = int64_t{kQHeads} * kDim, kw = kRow, row = qw + 2 * kw;
  const std::vector<uint16_t> packed = random_q(21, static_cast<size_t>(n * row));
  const auto [q, k, v] = test_support::split_packed_rows(packed, n, qw, kw);
  const std::vector<int32_t> lens = {5, 7};
  for (const bool causal : {true, false}) {
    std::vector<float> out[2];
    for (const bool strided : {false, true}) {
      ops::PagedPrefillParams p;
      p.q = strided ? packed.data() : q.data();
      p.k_cache = strided ? packed.data() + qw : k.data();
      p.v_cache = strided ? packed.data() + qw + kw : v.data();
      p.q_stride = strided ? row : 0;
      p.kv_stride = strided ? row : 0;
      p.qo_indptr = cu.data();
      p.page_indptr = cu.data();
      p.kv_lens = lens.data();
      p.batch = 2;
      p.total_q = n;
      p.num_q_heads = kQHeads;
      p.num_kv_heads = kKvHeads;
      p.head_dim = kDim;
      p.causal = causal;
      p.sm_scale = 0.35f;
      out[strided].assign(static_cast<size_t>(n * qw), -1.f);
      ops::reference::paged_prefill(p, out[strided].data());
    }
    EXPECT_EQ(out[0], out[1]) << (causal ? "causal" : "full");
  }
}

TEST(KvAddressing, ContiguousWithPagesOfMoreThanOneIsABug) {
  EXPECT_THROW(ops::check_kv_addressing(nullptr, 16), CheckError);
  EXPECT_NO_THROW(ops::check_kv_addressing(nullptr, 1));
  const int32_t page = 0;
  EXPECT_NO_THROW(ops::check_kv_addressing(&page, 16));
}

}  // namespace
}  // namespace kvserve

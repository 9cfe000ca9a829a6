// The float64 references of the paged attention kernels (ops::reference::paged_decode,
// paged_decode_parallel, paged_prefill) over an fp8 KV cache: the GPU tests hold the fp8 kernels
// to these, so they must read fp8 as the kernels do (value = stored * scale). Checked against a
// second path: the same references over a bf16 cache holding the dequantised values, which is
// exact when the scale is a power of two (every e4m3 / e5m2 value times 2^k is a bf16 value), so
// the outputs must be equal bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"

namespace kvserve {
namespace {

struct Fixture {
  static constexpr int32_t kPage = 4, kKvHeads = 2, kQHeads = 6, kDim = 8;
  std::vector<int32_t> lens = {0, 1, 7, 13};  // per request (0: empty KV)
  std::vector<int32_t> indptr, pages;
  std::vector<uint16_t> q;
  std::vector<uint8_t> k8, v8;     // the fp8 cache
  std::vector<uint16_t> kbf, vbf;  // the same values dequantised, as bf16
  float k_scale, v_scale;

  Fixture(DType dtype, float ks, float vs, uint64_t seed) : k_scale(ks), v_scale(vs) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> normal(0.f, 1.f);
    indptr.push_back(0);
    for (const int32_t n : lens)
      indptr.push_back(indptr.back() + (n + kPage - 1) / kPage);
    const int32_t num_pages = indptr.back() + 2;
    pages.resize(static_cast<size_t>(indptr.back()));
    std::iota(pages.begin(), pages.end(), 1);
    std::shuffle(pages.begin(), pages.end(), rng);
    const size_t elems = static_cast<size_t>(num_pages) * kPage * kKvHeads * kDim;
    auto fill = [&](std::vector<uint8_t>& f8, std::vector<uint16_t>& bf, float scale) {
      std::vector<float> x(elems);
      for (float& e : x)
        e = normal(rng) * scale * 8;  // a range where the format's rounding matters
      f8.resize(elems);
      convert_elements(x.data(), DType::kF32, f8.data(), dtype, elems, 1.0f / scale);
      bf.resize(elems);
      for (size_t i = 0; i < elems; ++i) {
        const float v =
            (dtype == DType::kFP8E4M3 ? fp8_e4m3_to_float(f8[i]) : fp8_e5m2_to_float(f8[i])) *
            scale;
        bf[i] = float_to_bf16(v);
        ASSERT_EQ(bf16_to_float(bf[i]), v) << "not exact in bf16: the scale must be 2^k";
      }
    };
    fill(k8, kbf, k_scale);
    fill(v8, vbf, v_scale);
    q.resize(static_cast<size_t>(lens.back() + 20) * kQHeads * kDim);
    for (uint16_t& e : q)
      e = float_to_bf16(normal(rng));
  }

  ops::PagedDecodeParams decode(bool fp8, DType dtype) const {
    ops::PagedDecodeParams p;
    p.q = q.data();
    p.k_cache = fp8 ? static_cast<const void*>(k8.data()) : kbf.data();
    p.v_cache = fp8 ? static_cast<const void*>(v8.data()) : vbf.data();
    p.kv_dtype = fp8 ? dtype : DType::kBF16;
    p.k_scale = fp8 ? k_scale : 1.0f;
    p.v_scale = fp8 ? v_scale : 1.0f;
    p.page_indptr = indptr.data();
    p.page_ids = pages.data();
    p.seq_lens = lens.data();
    p.batch = static_cast<int32_t>(lens.size());
    p.num_q_heads = kQHeads;
    p.num_kv_heads = kKvHeads;
    p.head_dim = kDim;
    p.page_size = kPage;
    p.sm_scale = 0.35f;
    return p;
  }
};

class PagedAttentionFp8Reference : public testing::TestWithParam<DType> {};

TEST_P(PagedAttentionFp8Reference, DecodeReadsDequantisedValues) {
  const DType dt = GetParam();
  for (const float ks : {0.25f, 2.0f}) {
    const uint64_t seed = 11 + static_cast<uint64_t>(ks * 4) + (dt == DType::kFP8E5M2 ? 100 : 0);
    std::cout << "[ seed     ] " << seed << std::endl;
    const Fixture f(dt, ks, 0.5f, seed);
    const size_t n = f.lens.size() * Fixture::kQHeads * Fixture::kDim;
    std::vector<float> a(n), b(n), c(n);
    ops::reference::paged_decode(f.decode(true, dt), a.data());
    ops::reference::paged_decode(f.decode(false, dt), b.data());
    ops::reference::paged_decode_parallel(f.decode(true, dt), c.data());
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(a[i], b[i]) << i;
      ASSERT_NEAR(c[i], b[i], 1e-6 * (1 + std::abs(b[i]))) << i;  // another summation order
    }
    // The empty request (seq_lens 0) is zeros; the others are not.
    for (size_t i = 0; i < Fixture::kQHeads * Fixture::kDim; ++i)
      ASSERT_EQ(a[i], 0.0f);
    EXPECT_NE(a[n - 1], 0.0f);
  }
}

TEST_P(PagedAttentionFp8Reference, PrefillReadsDequantisedValues) {
  const DType dt = GetParam();
  const uint64_t seed = 57 + (dt == DType::kFP8E5M2 ? 100 : 0);
  std::cout << "[ seed     ] " << seed << std::endl;
  const Fixture f(dt, 0.125f, 4.0f, seed);
  // Extends of 0 / 1 / 3 / 5 new tokens at the end of each request's positions.
  const std::vector<int32_t> qo = {0, 0, 1, 4, 9};
  auto params = [&](bool fp8) {
    const ops::PagedDecodeParams d = f.decode(fp8, dt);
    ops::PagedPrefillParams p;
    p.q = d.q;
    p.k_cache = d.k_cache;
    p.v_cache = d.v_cache;
    p.kv_dtype = d.kv_dtype;
    p.k_scale = d.k_scale;
    p.v_scale = d.v_scale;
    p.qo_indptr = qo.data();
    p.page_indptr = d.page_indptr;
    p.page_ids = d.page_ids;
    p.kv_lens = d.seq_lens;
    p.batch = d.batch;
    p.total_q = qo.back();
    p.num_q_heads = d.num_q_heads;
    p.num_kv_heads = d.num_kv_heads;
    p.head_dim = d.head_dim;
    p.page_size = d.page_size;
    p.causal = true;
    p.sm_scale = d.sm_scale;
    return p;
  };
  const size_t n = static_cast<size_t>(qo.back()) * Fixture::kQHeads * Fixture::kDim;
  std::vector<float> a(n), b(n);
  ops::reference::paged_prefill(params(true), a.data());
  ops::reference::paged_prefill(params(false), b.data());
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(a[i], b[i]) << i;
}

TEST(PagedAttentionFp8ReferenceValue, KvValueIsStoredTimesScale) {
  const uint8_t e4m3[] = {0x00, 0x38, 0xb8, 0x7e, 0x01};  // 0, 1, -1, 448, 2^-9
  const double want4[] = {0, 1, -1, 448, std::ldexp(1.0, -9)};
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(ops::reference::kv_value(e4m3, DType::kFP8E4M3, i, 0.5f), want4[i] * 0.5) << i;
  const uint8_t e5m2[] = {0x3c, 0x7b};  // 1, 57344
  EXPECT_EQ(ops::reference::kv_value(e5m2, DType::kFP8E5M2, 0, 3.0f), 3.0);
  EXPECT_EQ(ops::reference::kv_value(e5m2, DType::kFP8E5M2, 1, 1.0f), 57344.0);
  const uint16_t bf[] = {float_to_bf16(1.5f)};
  EXPECT_EQ(ops::reference::kv_value(bf, DType::kBF16, 0, 7.0f), 1.5) << "bf16 has no scale";
  EXPECT_TRUE(ops::is_paged_kv_dtype(DType::kFP8E5M2));
  EXPECT_FALSE(ops::is_paged_kv_dtype(DType::kF32));
}

INSTANTIATE_TEST_SUITE_P(Fp8, PagedAttentionFp8Reference,
                         testing::Values(DType::kFP8E4M3, DType::kFP8E5M2),
                         [](const testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

}  // namespace
}  // namespace kvserve

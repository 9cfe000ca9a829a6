// Varlen attention on the CPU platform (platform/cpu/varlen_attention.cpp, the kernel of Whisper's
// encoder self-attention on the CPU) against the float64 reference of
// tests/support/whisper_test_util.h: several sequences (decode, extend over a prefix, prefill,
// no keys, no queries, more queries than one block), causal and not, GQA, strided rows, and the
// one-sequence form (no cu_q / cu_kv) that the encoder uses.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/platform/ops/varlen_attention.h"
#include "kvserve/platform/platform.h"
#include "support/whisper_test_util.h"

namespace kvserve {
namespace {

using model::testing::rel_l2;
using model::testing::varlen_attention_reference;

std::vector<float> random_values(std::mt19937_64& rng, size_t n) {
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(rng);
  return v;
}

// Packed [tokens, width] rows copied into rows of `stride` elements (the rest NaN: never read).
std::vector<float> strided(const std::vector<float>& packed, int64_t width, int64_t stride) {
  const auto rows = static_cast<int64_t>(packed.size()) / width;
  std::vector<float> out(std::max<int64_t>(rows, 1) * stride, std::nanf(""));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(packed.data() + r * width, width, out.data() + r * stride);
  return out;
}

TEST(VarlenAttentionCpu, SequencesCausalAndNotWithGqaMatchFloat64) {
  // (q_len, kv_len): decode, decode over a prefix, an extend, a prefill longer than one query
  // block, no keys (a text-only request's cross-attention), no queries, a causal row seeing none.
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{1, 1}, {1, 57}, {4, 40},    {300, 300},
                                                         {3, 0}, {0, 12}, {130, 131}, {5, 2}};
  std::vector<int32_t> cu_q = {0}, cu_kv = {0};
  for (const auto& [ql, kl] : seqs) {
    cu_q.push_back(cu_q.back() + ql);
    cu_kv.push_back(cu_kv.back() + kl);
  }
  std::mt19937_64 rng(20261201);
  for (const int dim : {16, 40, 64}) {
    for (const auto& [heads, kv_heads] : {std::pair{4, 2}, std::pair{3, 3}, std::pair{4, 1}}) {
      for (const bool causal : {false, true}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " heads " + std::to_string(heads) + "/" +
                     std::to_string(kv_heads) + (causal ? " causal" : ""));
        const int64_t qw = int64_t{heads} * dim, kw = int64_t{kv_heads} * dim;
        const std::vector<float> q = random_values(rng, cu_q.back() * qw);
        const std::vector<float> k = random_values(rng, cu_kv.back() * kw);
        const std::vector<float> v = random_values(rng, cu_kv.back() * kw);
        const float scaling = 1.0f / std::sqrt(static_cast<float>(dim));
        // Rows wider than their heads: q, k, v and out each with a stride of their own.
        const std::vector<float> sq = strided(q, qw, qw + 3);
        const std::vector<float> sk = strided(k, kw, kw + 5);
        const std::vector<float> sv = strided(v, kw, kw + 1);
        std::vector<float> out(std::max<int64_t>(cu_q.back(), 1) * (qw + 2), -7.0f);
        ops::cpu::varlen_attention({.q = sq.data(),
                                    .k = sk.data(),
                                    .v = sv.data(),
                                    .out = out.data(),
                                    .cu_q = cu_q.data(),
                                    .cu_kv = cu_kv.data(),
                                    .dtype = DType::kF32,
                                    .num_seqs = static_cast<int32_t>(seqs.size()),
                                    .max_q_len = 300,
                                    .q_stride = qw + 3,
                                    .k_stride = kw + 5,
                                    .v_stride = kw + 1,
                                    .out_stride = qw + 2,
                                    .num_heads = heads,
                                    .num_kv_heads = kv_heads,
                                    .head_dim = dim,
                                    .scaling = scaling,
                                    .causal = causal});
        std::vector<float> got(q.size());
        for (int64_t t = 0; t < cu_q.back(); ++t) {
          std::copy_n(out.data() + t * (qw + 2), qw, got.data() + t * qw);
          ASSERT_EQ(out[t * (qw + 2) + qw], -7.0f) << "wrote past the row, token " << t;
        }
        const std::vector<float> want =
            varlen_attention_reference(q, k, v, cu_q, cu_kv, heads, kv_heads, dim, scaling, causal);
        EXPECT_LT(rel_l2(want, got), 1e-5);
        // Queries that see no key (the kv_len 0 sequence; causal rows before the first key) are
        // exactly zero.
        for (int64_t t = cu_q[4]; t < cu_q[5]; ++t) {
          for (int64_t e = 0; e < qw; ++e)
            ASSERT_EQ(got[t * qw + e], 0.0f) << "token " << t;
        }
        if (causal) {
          for (int64_t t = cu_q[7]; t < cu_q[7] + 3; ++t) {
            for (int64_t e = 0; e < qw; ++e)
              ASSERT_EQ(got[t * qw + e], 0.0f) << "token " << t;
          }
        }
      }
    }
  }
}

// Sliding windows (0, 1, a few keys, more than one query block, longer than every sequence) and
// soft-capping, causal and not: the window's edge falls inside and across the 128-query blocks.
TEST(VarlenAttentionCpu, SlidingWindowAndSoftcapMatchFloat64) {
  const std::vector<std::pair<int32_t, int32_t>> seqs = {
      {1, 1}, {1, 57}, {4, 40}, {300, 300}, {3, 0}, {0, 12}, {130, 131}, {5, 2}, {200, 260}};
  std::vector<int32_t> cu_q = {0}, cu_kv = {0};
  for (const auto& [ql, kl] : seqs) {
    cu_q.push_back(cu_q.back() + ql);
    cu_kv.push_back(cu_kv.back() + kl);
  }
  const uint64_t seed = 20261203;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const int dim = 32, heads = 4, kv_heads = 2;
  const int64_t qw = int64_t{heads} * dim, kw = int64_t{kv_heads} * dim;
  const std::vector<float> q = random_values(rng, cu_q.back() * qw);
  const std::vector<float> k = random_values(rng, cu_kv.back() * kw);
  const std::vector<float> v = random_values(rng, cu_kv.back() * kw);
  const float scaling = 1.0f / std::sqrt(static_cast<float>(dim));
  for (const bool causal : {true, false}) {
    for (const int32_t window_left : {-1, 0, 1, 7, 150, 4096}) {
      for (const float softcap : {0.0f, 0.7f, 20.0f}) {
        SCOPED_TRACE(testing::Message() << (causal ? "causal" : "not causal") << " window_left "
                                        << window_left << " softcap " << softcap);
        std::vector<float> got(q.size(), -7.0f);
        ops::cpu::varlen_attention({.q = q.data(),
                                    .k = k.data(),
                                    .v = v.data(),
                                    .out = got.data(),
                                    .cu_q = cu_q.data(),
                                    .cu_kv = cu_kv.data(),
                                    .dtype = DType::kF32,
                                    .num_seqs = static_cast<int32_t>(seqs.size()),
                                    .max_q_len = 300,
                                    .q_stride = qw,
                                    .k_stride = kw,
                                    .v_stride = kw,
                                    .out_stride = qw,
                                    .num_heads = heads,
                                    .num_kv_heads = kv_heads,
                                    .head_dim = dim,
                                    .scaling = scaling,
                                    .window_left = window_left,
                                    .logit_softcap = softcap,
                                    .causal = causal});
        const std::vector<float> want = varlen_attention_reference(
            q, k, v, cu_q, cu_kv, heads, kv_heads, dim, scaling, causal, window_left, softcap);
        EXPECT_LT(rel_l2(want, got), 1e-5);
        double worst = 0;
        for (size_t i = 0; i < got.size(); ++i)
          worst = std::max(worst, double(std::fabs(got[i] - want[i])));
        EXPECT_LT(worst, 1e-4);
      }
    }
  }
}

// The encoder's form: one sequence without cu_q / cu_kv, not causal, over packed q|k|v rows,
// bit-identical to the same sequence given through cu_q / cu_kv.
TEST(VarlenAttentionCpu, OneSequenceOnPackedQkvEqualsTheSequenceForm) {
  std::mt19937_64 rng(7);
  const int32_t heads = 6, dim = 64, n = 1500;
  const int64_t width = int64_t{heads} * dim;
  const std::vector<float> qkv = random_values(rng, n * 3 * width);
  const float scaling = 0.125f;
  const auto platform = platform::create_platform(Device{DeviceKind::kCpu, 0});
  ASSERT_TRUE(platform.is_ok()) << platform.status().to_string();
  std::vector<float> one(n * width), seq(n * width);
  ops::VarlenAttentionParams p{.q = qkv.data(),
                               .k = qkv.data() + width,
                               .v = qkv.data() + 2 * width,
                               .out = one.data(),
                               .dtype = DType::kF32,
                               .num_seqs = 1,
                               .max_q_len = n,
                               .num_q = n,
                               .num_kv = n,
                               .q_stride = 3 * width,
                               .k_stride = 3 * width,
                               .v_stride = 3 * width,
                               .out_stride = width,
                               .num_heads = heads,
                               .num_kv_heads = heads,
                               .head_dim = dim,
                               .scaling = scaling};
  ops::varlen_attention(**platform, p);  // dispatched to the CPU kernel
  const std::vector<int32_t> cu = {0, n};
  p.out = seq.data();
  p.cu_q = cu.data();
  p.cu_kv = cu.data();
  ops::cpu::varlen_attention(p);
  EXPECT_EQ(one, seq);
  // Against float64 on a few rows' worth of the packed layout, unpacked.
  std::vector<float> q(n * width), k(n * width), v(n * width);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(qkv.data() + t * 3 * width, width, q.data() + t * width);
    std::copy_n(qkv.data() + t * 3 * width + width, width, k.data() + t * width);
    std::copy_n(qkv.data() + t * 3 * width + 2 * width, width, v.data() + t * width);
  }
  const std::vector<float> want =
      varlen_attention_reference(q, k, v, cu, cu, heads, heads, dim, scaling, false);
  EXPECT_LT(rel_l2(want, one), 1e-5);
}

TEST(VarlenAttentionCpu, RejectsOtherDtypesAndBadHeadCounts) {
  const std::vector<float> x(64, 0.0f);
  std::vector<float> out(64);
  ops::VarlenAttentionParams p{.q = x.data(),
                               .k = x.data(),
                               .v = x.data(),
                               .out = out.data(),
                               .dtype = DType::kBF16,
                               .num_q = 1,
                               .num_kv = 1,
                               .q_stride = 64,
                               .k_stride = 64,
                               .v_stride = 64,
                               .out_stride = 64,
                               .num_heads = 4,
                               .num_kv_heads = 4,
                               .head_dim = 16};
  const auto message = [&] {
    try {
      ops::cpu::varlen_attention(p);
    } catch (const CheckError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message().find("the CPU platform computes in f32, got bf16"), std::string::npos)
      << message();
  p.dtype = DType::kF32;
  p.num_kv_heads = 3;
  EXPECT_NE(message().find("4 query heads over 3 KV heads"), std::string::npos) << message();
}

}  // namespace
}  // namespace kvserve

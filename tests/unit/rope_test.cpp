// Rotary embedding frequencies (model/rope.h) against a float64 implementation written from
// transformers 5's formulas (modeling_rope_utils.py: _compute_*_parameters and the dynamic update
// of the rotary embedding's forward), and the CPU rope op (attention factor, per-token rows)
// against a float64 rotation.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <random>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/model/rope.h"
#include "kvserve/platform/ops/layer_ops.h"

namespace kvserve {
namespace {

using checkpoint::ModelConfig;

// ---- the float64 reference ----------------------------------------------------------------------

std::vector<double> ref_default(double base, int dim) {
  std::vector<double> inv(dim / 2);
  for (int i = 0; i < dim / 2; ++i)
    inv[i] = 1.0 / std::pow(base, 2.0 * i / dim);
  return inv;
}

// seq_len: max(position_ids) + 1 of the forward (0: the frequencies at load).
std::vector<double> ref_inv_freq(const ModelConfig& c, int64_t seq_len) {
  const auto& s = c.rope_scaling;
  const int dim = c.head_dim;
  if (s.rope_type == "linear") {
    auto inv = ref_default(c.rope_theta, dim);
    for (double& f : inv)
      f /= s.factor;
    return inv;
  }
  if (s.rope_type == "dynamic") {
    const double len = static_cast<double>(std::max(seq_len, c.max_position_embeddings));
    const double mp = static_cast<double>(c.max_position_embeddings);
    const double base = c.rope_theta * std::pow(s.factor * len / mp - (s.factor - 1.0),
                                                static_cast<double>(dim) / (dim - 2));
    return ref_default(base, dim);
  }
  if (s.rope_type == "longrope") {
    const auto& ext = seq_len > s.original_max_position_embeddings ? s.long_factor : s.short_factor;
    auto inv = ref_default(c.rope_theta, dim);
    for (int i = 0; i < dim / 2; ++i)
      inv[i] /= ext[i];
    return inv;
  }
  if (s.rope_type == "yarn") {
    auto correction = [&](double rotations) {
      return dim *
             std::log(static_cast<double>(s.original_max_position_embeddings) /
                      (rotations * 2.0 * std::numbers::pi)) /
             (2.0 * std::log(c.rope_theta));
    };
    double low = correction(s.beta_fast);
    double high = correction(s.beta_slow);
    if (s.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, dim - 1.0);
    if (low == high) high += 0.001;
    auto inv = ref_default(c.rope_theta, dim);
    for (int i = 0; i < dim / 2; ++i) {
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;
      inv[i] = inv[i] / s.factor * (1.0 - extrapolation) + inv[i] * extrapolation;
    }
    return inv;
  }
  return ref_default(c.rope_theta, dim);
}

ModelConfig config_of(const std::string& type) {
  ModelConfig c;
  c.head_dim = 64;
  c.max_position_embeddings = 64;
  c.rope_theta = 10000.0;
  auto& s = c.rope_scaling;
  s.rope_type = type;
  s.factor = 4.0;
  s.original_max_position_embeddings = 64;
  if (type == "dynamic") s.factor = 2.0;
  if (type == "yarn") {
    c.rope_theta = 1000000.0;
    c.max_position_embeddings = 256;
    s.attention_factor = 0.1 * std::log(4.0) + 1.0;
  }
  if (type == "longrope") {
    c.max_position_embeddings = 256;
    for (int i = 0; i < c.head_dim / 2; ++i) {
      s.short_factor.push_back(1.0 + 0.6 * i / 31.0);
      s.long_factor.push_back(1.0 + 5.0 * i / 31.0);
    }
    s.attention_factor = std::sqrt(1.0 + std::log(4.0) / std::log(64.0));
  }
  return c;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], rel * std::fabs(want[i])) << what << " i=" << i;
}

class RopeTypes : public testing::TestWithParam<std::string> {};

TEST_P(RopeTypes, InvFreqMatchesTheFloat64Formulas) {
  ModelConfig c = config_of(GetParam());
  for (const int64_t len : {int64_t{0}, int64_t{1}, int64_t{33}, int64_t{64}, int64_t{65},
                            int64_t{100}, int64_t{164}}) {
    // f32 pow and products: a few ulp.
    expect_close(model::rope_inv_freq(c, c.head_dim, len), ref_inv_freq(c, len), 2e-6,
                 GetParam() + " seq_len " + std::to_string(len));
  }
  if (GetParam() == "yarn") {
    c.rope_scaling.truncate = false;
    c.rope_scaling.beta_fast = 16.0;
    expect_close(model::rope_inv_freq(c, c.head_dim, 0), ref_inv_freq(c, 0), 2e-6,
                 "yarn untruncated");
  }
}

TEST_P(RopeTypes, TableRowsFollowTheLengthTransformersSees) {
  const ModelConfig c = config_of(GetParam());
  const int64_t context = 200;
  const model::RopeTable t = model::make_rope_table(c, c.head_dim, context);
  EXPECT_EQ(t.half, c.head_dim / 2);
  const bool scaled_cos = GetParam() == "yarn" || GetParam() == "longrope";
  EXPECT_EQ(t.attention_factor,
            scaled_cos ? static_cast<float>(c.rope_scaling.attention_factor) : 1.0f);
  for (int64_t len = 1; len <= context; ++len) {
    const int32_t row = t.row_for(len);
    ASSERT_LT(row, t.rows);
    const std::vector<float> got(t.inv_freq.begin() + row * t.half,
                                 t.inv_freq.begin() + (row + 1) * t.half);
    expect_close(got, ref_inv_freq(c, len), 2e-6, GetParam() + " len " + std::to_string(len));
  }
  const bool by_length = GetParam() == "dynamic" || GetParam() == "longrope";
  EXPECT_EQ(t.length_dependent, by_length);
  EXPECT_EQ(t.rows, GetParam() == "dynamic" ? context - 64 + 1 : by_length ? 2 : 1);
}

INSTANTIATE_TEST_SUITE_P(Types, RopeTypes,
                         testing::Values("default", "linear", "dynamic", "yarn", "longrope"));

// The CPU op: each token's row, its position, and the attention factor on cos and sin, against a
// float64 rotation of the same f32 frequencies.
TEST(RopeOp, RowsAndAttentionFactorAgainstFloat64) {
  const unsigned seed = std::random_device{}();
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  const int32_t heads = 3, kv_heads = 1, dim = 16, half = dim / 2, n = 9, rows = 3;
  std::vector<float> inv(rows * half);
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = 1.0f / std::pow(10000.0f, static_cast<float>(i % half) * 2.0f / dim) /
             static_cast<float>(1 + i / half);
  std::vector<int32_t> positions(n), row_of(n);
  for (int32_t t = 0; t < n; ++t) {
    positions[t] = static_cast<int32_t>(rng() % 300);
    row_of[t] = static_cast<int32_t>(rng() % rows);
  }
  std::vector<float> q(n * heads * dim), k(n * kv_heads * dim);
  for (float& x : q)
    x = normal(rng);
  for (float& x : k)
    x = normal(rng);
  const std::vector<float> q0 = q, k0 = k;
  const float factor = 1.1386294f;
  ops::cpu::rope({.q = q.data(),
                  .k = k.data(),
                  .dtype = DType::kF32,
                  .positions = positions.data(),
                  .inv_freq = inv.data(),
                  .rope_rows = row_of.data(),
                  .attention_factor = factor,
                  .num_tokens = n,
                  .q_stride = heads * dim,
                  .k_stride = kv_heads * dim,
                  .num_heads = heads,
                  .num_kv_heads = kv_heads,
                  .head_dim = dim,
                  .rotary_dim = dim});
  auto check = [&](const std::vector<float>& before, const std::vector<float>& after, int h_count) {
    for (int32_t t = 0; t < n; ++t) {
      for (int32_t h = 0; h < h_count; ++h) {
        const float* x = before.data() + (t * h_count + h) * dim;
        const float* y = after.data() + (t * h_count + h) * dim;
        for (int32_t i = 0; i < half; ++i) {
          const double angle =
              static_cast<double>(positions[t]) * static_cast<double>(inv[row_of[t] * half + i]);
          const double c = std::cos(angle) * factor, s = std::sin(angle) * factor;
          EXPECT_NEAR(y[i], x[i] * c - x[i + half] * s, 1e-4) << "t " << t << " i " << i;
          EXPECT_NEAR(y[i + half], x[i + half] * c + x[i] * s, 1e-4) << "t " << t << " i " << i;
        }
      }
    }
  };
  check(q0, q, heads);
  check(k0, k, kv_heads);
}

}  // namespace
}  // namespace kvserve

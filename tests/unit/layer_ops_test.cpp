// CPU layer ops and rope frequencies against float64 references written from the definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>

#include "kvserve/core/check.h"
#include "kvserve/model/rope.h"
#include "kvserve/platform/ops/gemm.h"
#include "kvserve/platform/ops/layer_ops.h"

namespace kvserve::ops {
namespace {

std::vector<float> random(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v)
    x = d(rng);
  return v;
}

class LayerOps : public testing::Test {
 protected:
  std::unique_ptr<platform::Platform> p_ = std::move(platform::create_platform(Device{}).value());
};

TEST_F(LayerOps, GemmWithBiasAndStrides) {
  const int64_t m = 7, n = 33, k = 65, lda = 70, ldc = 40;
  const auto a = random(m * lda, 1), b = random(n * k, 2), bias = random(n, 3);
  std::vector<float> c(m * ldc, -7.0f);
  gemm(*p_, {.a = a.data(),
             .b = b.data(),
             .bias = bias.data(),
             .c = c.data(),
             .m = m,
             .n = n,
             .k = k,
             .lda = lda,
             .ldb = k,
             .ldc = ldc});
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double want = bias[j];
      for (int64_t x = 0; x < k; ++x)
        want += double(a[i * lda + x]) * b[j * k + x];
      EXPECT_NEAR(c[i * ldc + j], want, 1e-4) << i << "," << j;
    }
    for (int64_t j = n; j < ldc; ++j)
      EXPECT_EQ(c[i * ldc + j], -7.0f);  // padding untouched
  }
}

TEST_F(LayerOps, RmsNormWithAndWithoutResidual) {
  const int64_t rows = 5, cols = 96;
  const auto x = random(rows * cols, 4), w = random(cols, 5);
  auto residual = random(rows * cols, 6);
  const auto residual_in = residual;
  std::vector<float> out(rows * cols);
  rms_norm(*p_, {.x = x.data(),
                 .residual = residual.data(),
                 .out = out.data(),
                 .weight = w.data(),
                 .rows = rows,
                 .cols = cols,
                 .x_stride = cols,
                 .eps = 1e-5f});
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < cols; ++i) {
      const double s = double(x[r * cols + i]) + residual_in[r * cols + i];
      EXPECT_NEAR(residual[r * cols + i], s, 1e-6);
      ss += s * s;
    }
    const double inv = 1.0 / std::sqrt(ss / cols + 1e-5);
    for (int64_t i = 0; i < cols; ++i) {
      const double s = double(x[r * cols + i]) + residual_in[r * cols + i];
      EXPECT_NEAR(out[r * cols + i], s * inv * w[i], 1e-5);
    }
  }
  // In place, no residual.
  auto y = x;
  rms_norm(*p_, {.x = y.data(),
                 .out = y.data(),
                 .weight = w.data(),
                 .rows = rows,
                 .cols = cols,
                 .x_stride = cols,
                 .eps = 1e-6f});
  double ss = 0;
  for (int64_t i = 0; i < cols; ++i)
    ss += double(x[i]) * x[i];
  EXPECT_NEAR(y[3], x[3] / std::sqrt(ss / cols + 1e-6) * w[3], 1e-5);
}

// The rotary frequencies of a config with this base and scaling (model/rope).
std::vector<float> inv_freq_of(double theta, int32_t dim, const checkpoint::RopeScaling& s = {}) {
  checkpoint::ModelConfig c;
  c.rope_theta = theta;
  c.rope_scaling = s;
  c.max_position_embeddings = 8192;
  return model::rope_inv_freq(c, dim);
}

TEST_F(LayerOps, RopeRotatesHalvesByPositionTimesFrequency) {
  const int32_t heads = 3, kv_heads = 1, dim = 16;
  const std::vector<int32_t> pos = {0, 1, 7, 1000};
  const auto inv = inv_freq_of(10000.0, dim);
  auto q = random(pos.size() * heads * dim, 7);
  auto k = random(pos.size() * kv_heads * dim, 8);
  const auto q0 = q, k0 = k;
  rope(*p_, {.q = q.data(),
             .k = k.data(),
             .positions = pos.data(),
             .inv_freq = inv.data(),
             .num_tokens = int64_t(pos.size()),
             .q_stride = heads * dim,
             .k_stride = kv_heads * dim,
             .num_heads = heads,
             .num_kv_heads = kv_heads,
             .head_dim = dim,
             .rotary_dim = dim});
  for (size_t t = 0; t < pos.size(); ++t) {
    for (int32_t h = 0; h < heads; ++h) {
      for (int32_t i = 0; i < dim / 2; ++i) {
        const double a = pos[t] * std::pow(10000.0, -2.0 * i / dim);
        const double x1 = q0[(t * heads + h) * dim + i],
                     x2 = q0[(t * heads + h) * dim + i + dim / 2];
        // f32 angles (as transformers computes them): error grows with the position.
        const double tol = 1e-5 + 2e-7 * pos[t];
        EXPECT_NEAR(q[(t * heads + h) * dim + i], x1 * std::cos(a) - x2 * std::sin(a), tol);
        EXPECT_NEAR(q[(t * heads + h) * dim + i + dim / 2], x2 * std::cos(a) + x1 * std::sin(a),
                    tol);
      }
    }
  }
  EXPECT_EQ(k[0], k0[0]);  // position 0 is the identity
}

// split_qkv_rope with the KV store fused in: q as without it, k and v in the cache rows named by
// cache_loc (the unfused split's k and v, exactly), every other row untouched; a slot outside
// the cache is a CHECK.
TEST_F(LayerOps, SplitQkvRopeFusedStoreWritesTheCacheRows) {
  const int32_t heads = 4, kv_heads = 2, dim = 8;
  const int64_t n = 3, qd = heads * dim, kvd = kv_heads * dim, slots = 9;
  const std::vector<int32_t> pos = {5, 0, 300};
  const std::vector<int32_t> loc = {7, 2, 4};
  const auto inv = inv_freq_of(10000.0, dim);
  const auto qkv = random(n * (qd + 2 * kvd), 11);
  std::vector<float> q(n * qd), k(n * kvd), v(n * kvd);
  SplitQkvRopeParams p{.qkv = qkv.data(),
                       .q = q.data(),
                       .k = k.data(),
                       .v = v.data(),
                       .positions = pos.data(),
                       .inv_freq = inv.data(),
                       .num_tokens = n,
                       .num_heads = heads,
                       .num_kv_heads = kv_heads,
                       .head_dim = dim,
                       .rotary_dim = dim};
  split_qkv_rope(*p_, p);
  std::vector<float> fq(n * qd), kc(slots * kvd, -1.0f), vc(slots * kvd, -2.0f);
  SplitQkvRopeParams f = p;
  f.q = fq.data();
  f.k = f.v = nullptr;
  f.k_cache = kc.data();
  f.v_cache = vc.data();
  f.cache_loc = loc.data();
  f.num_slots = slots;
  split_qkv_rope(*p_, f);
  EXPECT_EQ(fq, q);
  for (int64_t slot = 0; slot < slots; ++slot) {
    const auto t = std::find(loc.begin(), loc.end(), slot) - loc.begin();
    for (int64_t i = 0; i < kvd; ++i) {
      EXPECT_EQ(kc[slot * kvd + i], t < n ? k[t * kvd + i] : -1.0f) << slot << "," << i;
      EXPECT_EQ(vc[slot * kvd + i], t < n ? v[t * kvd + i] : -2.0f) << slot << "," << i;
    }
  }
  const std::vector<int32_t> bad = {7, 9, 4};
  f.cache_loc = bad.data();
  try {
    split_qkv_rope(*p_, f);
    ADD_FAILURE() << "slot 9 of a 9-row cache was accepted";
  } catch (const CheckError& e) {
    EXPECT_NE(std::string(e.what()).find("slot 9 of 9"), std::string::npos) << e.what();
  }
}

TEST(Rope, Llama3ScalingBands) {
  checkpoint::RopeScaling s;
  s.rope_type = "llama3";
  s.factor = 8;
  s.low_freq_factor = 1;
  s.high_freq_factor = 4;
  s.original_max_position_embeddings = 8192;
  const int32_t dim = 128;
  const auto base = inv_freq_of(500000.0, dim);
  const auto scaled = inv_freq_of(500000.0, dim, s);
  for (int32_t i = 0; i < dim / 2; ++i) {
    const double f = base[i];
    const double wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen < 8192.0 / 4) {
      want = f;  // high frequencies unchanged
    } else if (wavelen > 8192.0 / 1) {
      want = f / 8;  // low frequencies divided by the factor
    } else {
      const double smooth = (8192.0 / wavelen - 1) / (4 - 1);
      want = (1 - smooth) * f / 8 + smooth * f;
    }
    EXPECT_NEAR(scaled[i], want, 1e-6 * want) << i;
  }
  EXPECT_NEAR(base[1], std::pow(500000.0, -2.0 / 128), 1e-7);
}

TEST_F(LayerOps, SiluAndMulAndEmbedding) {
  const int64_t n = 3, inter = 10;
  const auto x = random(n * 2 * inter, 9);
  std::vector<float> out(n * inter);
  act_and_mul(*p_, {.x = x.data(), .out = out.data(), .num_tokens = n, .inter = inter});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < inter; ++i) {
      const double g = x[t * 2 * inter + i], u = x[t * 2 * inter + inter + i];
      EXPECT_NEAR(out[t * inter + i], g / (1 + std::exp(-g)) * u, 1e-6);
    }
  }
  const auto table = random(5 * 4, 10);
  const std::vector<int32_t> ids = {4, 0, 4};
  std::vector<float> emb(3 * 4);
  embedding(*p_, {.table = table.data(),
                  .ids = ids.data(),
                  .out = emb.data(),
                  .num_tokens = 3,
                  .hidden = 4,
                  .vocab = 5});
  EXPECT_EQ(emb[0], table[16]);
  EXPECT_EQ(emb[4], table[0]);
  const std::vector<int32_t> bad = {5};
  EXPECT_THROW(embedding(*p_, {.table = table.data(),
                               .ids = bad.data(),
                               .out = emb.data(),
                               .num_tokens = 1,
                               .hidden = 4,
                               .vocab = 5}),
               CheckError);
}

// Gemma's ops, against float64 references written from transformers' definitions (seeds fixed:
// 21..27).
TEST_F(LayerOps, GeluTanhAndMul) {
  const int64_t n = 4, inter = 33;
  auto x = random(n * 2 * inter, 21);
  for (auto& v : x)
    v *= 3.0f;  // reach the tails of tanh
  std::vector<float> out(n * inter);
  act_and_mul(*p_, {.x = x.data(),
                    .out = out.data(),
                    .activation = GatedActivation::kGeluTanh,
                    .num_tokens = n,
                    .inter = inter});
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t i = 0; i < inter; ++i) {
      const double g = x[t * 2 * inter + i], u = x[t * 2 * inter + inter + i];
      const double gelu =
          0.5 * g * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (g + 0.044715 * g * g * g)));
      EXPECT_NEAR(out[t * inter + i], gelu * u, 1e-5 * (1 + std::fabs(gelu * u))) << t << "," << i;
    }
  }
}

TEST_F(LayerOps, RmsNormWeightOffsetIsGemmasOnePlusWeight) {
  const int64_t rows = 6, cols = 64;  // also: per-head norms are rows of head_dim
  const auto x = random(rows * cols, 22), w = random(cols, 23);
  std::vector<float> out(rows * cols);
  rms_norm(*p_, {.x = x.data(),
                 .out = out.data(),
                 .weight = w.data(),
                 .rows = rows,
                 .cols = cols,
                 .x_stride = cols,
                 .eps = 1e-6f,
                 .weight_offset = 1.0f});
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < cols; ++i)
      ss += double(x[r * cols + i]) * x[r * cols + i];
    const double inv = 1 / std::sqrt(ss / cols + 1e-6);
    for (int64_t i = 0; i < cols; ++i) {
      EXPECT_NEAR(out[r * cols + i], x[r * cols + i] * inv * (1.0 + w[i]), 1e-5) << r << "," << i;
    }
  }
}

TEST_F(LayerOps, ScaledEmbeddingAndSoftcap) {
  const auto table = random(6 * 8, 24);
  const std::vector<int32_t> ids = {5, 1};
  std::vector<float> emb(2 * 8);
  const float scale = std::sqrt(8.0f);
  embedding(*p_, {.table = table.data(),
                  .ids = ids.data(),
                  .out = emb.data(),
                  .num_tokens = 2,
                  .hidden = 8,
                  .vocab = 6,
                  .scale = scale});
  for (int64_t i = 0; i < 8; ++i) {
    EXPECT_EQ(emb[i], table[5 * 8 + i] * scale);
    EXPECT_EQ(emb[8 + i], table[1 * 8 + i] * scale);
  }
  auto logits = random(3 * 50, 25);
  for (auto& v : logits)
    v *= 40.0f;
  const auto before = logits;
  softcap(*p_, {.x = logits.data(), .rows = 3, .cols = 50, .cap = 30.0f});
  for (size_t i = 0; i < logits.size(); ++i) {
    const double want = 30.0 * std::tanh(double(before[i]) / 30.0);
    EXPECT_NEAR(logits[i], want, 1e-5 * 30) << i;
    EXPECT_LT(std::fabs(logits[i]), 30.0f + 1e-4f);
  }
  EXPECT_THROW(softcap(*p_, {.x = logits.data(), .rows = 1, .cols = 1, .cap = 0.0f}), CheckError);
}

}  // namespace
}  // namespace kvserve::ops

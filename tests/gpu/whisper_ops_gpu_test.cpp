// The CUDA Whisper ops (platform/cuda/whisper_ops.cu) and varlen attention / K/V gather
// (platform/cuda/varlen_attention.cu) on odd sizes, in f32 and bf16: LayerNorm (with and without
// the fused residual, strided input), GELU, Conv1d (channel-major and token-major input, stride 1
// and 2), the position-embedding add (with and without positions) and the encoder's attention
// (varlen, one sequence over packed q|k|v rows) against the CPU ops on the same rounded inputs;
// varlen attention (causal and not, GQA, empty sequences, head dims 16 to 256, sliding windows and
// soft-capping) against a float64 host reference; the
// gather exactly, and from an fp8 cache (e4m3, e5m2) widened into bf16 rows times the layer's
// scales, exactly as the host computes it (cuda-ragged's fp8 path at head dims 16 and 32). Skips
// itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/varlen_attention.h"
#include "kvserve/platform/ops/whisper_ops.h"
#include "kvserve/platform/platform.h"
#include "support/cuda_param_test.h"
#include "support/whisper_test_util.h"

namespace kvserve {
namespace {

using model::testing::rel_l2;
using model::testing::varlen_attention_reference;

// The platform (cuda_) and the skip come from the CUDA suites' shared fixture.
class WhisperOpsGpuTest : public test_support::CudaParamTest<DType> {
 protected:
  void SetUp() override {
    CudaParamTest::SetUp();
    if (IsSkipped()) return;
    std::cout << "[ seed     ] " << kSeed << std::endl;
  }
  DType dt() const { return GetParam(); }
  // bf16: one rounding of an f32 result; f32: summation-order noise.
  double tol() const { return dt() == DType::kBF16 ? 1e-2 : 1e-4; }

  // Random values rounded to dt(): `host` holds them as f32 (the CPU ops' input).
  Tensor random(std::vector<float>& host, int64_t n, float scale = 1.0f, float mean = 0.0f) {
    std::normal_distribution<float> d(mean, scale);
    host.resize(n);
    for (float& x : host)
      x = d(rng_);
    round(host);
    return upload(host);
  }
  void round(std::vector<float>& v) const {
    std::vector<uint8_t> bits(v.size() * dtype_size(dt()));
    convert_elements(v.data(), DType::kF32, bits.data(), dt(), v.size());
    convert_elements(bits.data(), dt(), v.data(), DType::kF32, v.size());
  }
  Tensor upload(const std::vector<float>& v) {
    auto t = cuda_->empty(dt(), {static_cast<int64_t>(v.size())});
    KV_CHECK(t.is_ok(), "{}", t.status().to_string());
    std::vector<uint8_t> bits(v.size() * dtype_size(dt()));
    convert_elements(v.data(), DType::kF32, bits.data(), dt(), v.size());
    cuda_->copy(t->data(), bits.data(), bits.size(), platform::CopyKind::kHostToDevice);
    return std::move(t).value();
  }
  Tensor upload_ints(const std::vector<int32_t>& v) {
    auto t = cuda_->empty(DType::kI32, {static_cast<int64_t>(std::max<size_t>(v.size(), 1))});
    KV_CHECK(t.is_ok(), "{}", t.status().to_string());
    cuda_->copy(t->data(), v.data(), v.size() * 4, platform::CopyKind::kHostToDevice);
    return std::move(t).value();
  }
  Tensor empty(int64_t n) {
    return std::move(cuda_->empty(dt(), {std::max<int64_t>(n, 1)})).value();
  }
  std::vector<float> download(const void* p, int64_t n) {
    std::vector<uint8_t> bits(n * dtype_size(dt()));
    cuda_->copy(bits.data(), p, bits.size(), platform::CopyKind::kDeviceToHost);
    cuda_->synchronize();
    std::vector<float> out(n);
    convert_elements(bits.data(), dt(), out.data(), DType::kF32, n);
    return out;
  }

  static constexpr uint64_t kSeed = 20261201;
  std::mt19937_64 rng_{kSeed};
};

TEST_P(WhisperOpsGpuTest, LayerNormWithAndWithoutResidual) {
  for (const int64_t rows : {1, 7, 33}) {
    for (const int64_t cols : {64, 385, 1280}) {
      SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(cols));
      const int64_t stride = cols + 3;  // a strided input
      std::vector<float> x, res, w, b;
      Tensor dx = random(x, rows * stride, 2.0f, 0.5f);
      Tensor dres = random(res, rows * cols);
      Tensor dw = random(w, cols, 0.3f, 1.0f);
      Tensor db = random(b, cols, 0.3f);
      Tensor dout = empty(rows * cols);
      std::vector<float> out(rows * cols);
      const ops::LayerNormParams cpu{.x = x.data(),
                                     .out = out.data(),
                                     .weight = w.data(),
                                     .bias = b.data(),
                                     .rows = rows,
                                     .cols = cols,
                                     .x_stride = stride};
      ops::cpu::layer_norm(cpu);
      ops::LayerNormParams gp = cpu;
      gp.x = dx.data();
      gp.out = dout.data();
      gp.weight = dw.data();
      gp.bias = db.data();
      gp.dtype = dt();
      ops::layer_norm(*cuda_, gp);
      EXPECT_LT(rel_l2(out, download(dout.data(), rows * cols)), tol()) << "no residual";
      // residual = x + residual, then the norm of it.
      ops::LayerNormParams cr = cpu;
      cr.residual = res.data();
      ops::cpu::layer_norm(cr);
      gp.residual = dres.data();
      ops::layer_norm(*cuda_, gp);
      EXPECT_LT(rel_l2(res, download(dres.data(), rows * cols)), tol()) << "residual";
      EXPECT_LT(rel_l2(out, download(dout.data(), rows * cols)), tol()) << "residual norm";
    }
  }
}

TEST_P(WhisperOpsGpuTest, GeluAndPositionEmbedding) {
  std::vector<float> x, table;
  const int64_t n = 1001;
  Tensor dx = random(x, n, 3.0f);
  std::vector<float> out(n);
  ops::cpu::gelu({.x = x.data(), .out = out.data(), .n = n});
  ops::gelu(*cuda_, {.x = dx.data(), .out = dx.data(), .dtype = dt(), .n = n});  // in place
  EXPECT_LT(rel_l2(out, download(dx.data(), n)), tol());

  const int64_t rows = 13, cols = 77, positions = 29;
  Tensor dt_table = random(table, positions * cols);
  for (const bool with_positions : {false, true}) {
    std::vector<float> h;
    Tensor dh = random(h, rows * cols);
    std::vector<int32_t> pos(rows);
    for (int64_t r = 0; r < rows; ++r)
      pos[r] = static_cast<int32_t>((r * 7 + 3) % positions);
    Tensor dpos = upload_ints(pos);
    ops::cpu::add_position_embedding({.x = h.data(),
                                      .table = table.data(),
                                      .positions = with_positions ? pos.data() : nullptr,
                                      .rows = rows,
                                      .cols = cols,
                                      .num_positions = positions});
    ops::add_position_embedding(*cuda_,
                                {.x = dh.data(),
                                 .table = dt_table.data(),
                                 .positions = with_positions ? dpos.data_as<int32_t>() : nullptr,
                                 .dtype = dt(),
                                 .rows = rows,
                                 .cols = cols,
                                 .num_positions = positions});
    EXPECT_LT(rel_l2(h, download(dh.data(), rows * cols)), tol()) << with_positions;
  }
}

TEST_P(WhisperOpsGpuTest, Conv1dChannelMajorAndTokenMajor) {
  struct Case {
    int64_t in_ch, in_len, out_ch;
    bool channel_major;
    int32_t stride;
  };
  for (const Case& c : {Case{13, 37, 24, true, 1}, Case{80, 300, 64, true, 1},
                        Case{24, 37, 20, false, 2}, Case{64, 300, 64, false, 2}}) {
    SCOPED_TRACE(std::to_string(c.in_ch) + "x" + std::to_string(c.in_len) + " stride " +
                 std::to_string(c.stride));
    std::vector<float> x, w, b;
    Tensor dx = random(x, c.in_ch * c.in_len);
    Tensor dw = random(w, c.out_ch * c.in_ch * 3, 0.2f);
    Tensor db = random(b, c.out_ch, 0.2f);
    ops::Conv1dParams p{.x = x.data(),
                        .weight = w.data(),
                        .bias = b.data(),
                        .in_channels = c.in_ch,
                        .in_len = c.in_len,
                        .out_channels = c.out_ch,
                        .x_t_stride = c.channel_major ? 1 : c.in_ch,
                        .x_c_stride = c.channel_major ? c.in_len : 1,
                        .kernel_size = 3,
                        .stride = c.stride,
                        .padding = 1};
    const int64_t out_n = p.out_len() * c.out_ch;
    std::vector<float> out(out_n);
    p.out = out.data();
    ops::cpu::conv1d(p);
    Tensor dout = empty(out_n);
    Tensor ws = empty(p.workspace_elems());
    p.x = dx.data();
    p.weight = dw.data();
    p.bias = db.data();
    p.out = dout.data();
    p.workspace = ws.data();
    p.dtype = dt();
    ops::conv1d(*cuda_, p);
    EXPECT_LT(rel_l2(out, download(dout.data(), out_n)), tol());
  }
}

TEST_P(WhisperOpsGpuTest, OneSequenceAttentionOnPackedQkvMatchesCpu) {
  struct Case {
    int64_t num_q, num_kv;
    int32_t heads, head_dim;
  };
  for (const Case& c : {Case{1, 1, 1, 16}, Case{37, 37, 3, 16}, Case{150, 301, 3, 64},
                        Case{65, 1500, 6, 64}, Case{1500, 1500, 2, 64}, Case{9, 33, 2, 128}}) {
    SCOPED_TRACE(std::to_string(c.num_q) + " x " + std::to_string(c.num_kv) + " heads " +
                 std::to_string(c.heads) + " dim " + std::to_string(c.head_dim));
    const int64_t width = int64_t{c.heads} * c.head_dim;
    const int64_t stride = 3 * width;  // q | k | v in one row, as the encoder's fused projection
    const int64_t rows = std::max(c.num_q, c.num_kv);
    std::vector<float> qkv;
    Tensor dqkv = random(qkv, rows * stride, 1.5f);
    std::vector<float> out(c.num_q * width);
    ops::VarlenAttentionParams p{.q = qkv.data(),
                                 .k = qkv.data() + width,
                                 .v = qkv.data() + 2 * width,
                                 .out = out.data(),
                                 .dtype = DType::kF32,
                                 .num_seqs = 1,
                                 .max_q_len = static_cast<int32_t>(c.num_q),
                                 .num_q = c.num_q,
                                 .num_kv = c.num_kv,
                                 .q_stride = stride,
                                 .k_stride = stride,
                                 .v_stride = stride,
                                 .out_stride = width,
                                 .num_heads = c.heads,
                                 .num_kv_heads = c.heads,
                                 .head_dim = c.head_dim,
                                 .scaling = 1.0f / std::sqrt(static_cast<float>(c.head_dim))};
    ops::cpu::varlen_attention(p);
    Tensor dout = empty(c.num_q * width);
    const size_t es = dtype_size(dt());
    p.q = dqkv.data();
    p.k = dqkv.data_as<uint8_t>() + width * es;
    p.v = dqkv.data_as<uint8_t>() + 2 * width * es;
    p.out = dout.data();
    p.dtype = dt();
    ops::varlen_attention(*cuda_, p);
    EXPECT_LT(rel_l2(out, download(dout.data(), c.num_q * width)), tol());
  }
}

TEST_P(WhisperOpsGpuTest, VarlenAttentionCausalAndNotWithGqaAndEmptySequences) {
  // (q_len, kv_len) per sequence: decode, a short extend over a prefix, a long one, a prefill
  // (q == kv), an empty KV (cross-attention of a text-only request) and a sequence without queries.
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{1, 1},   {1, 57}, {4, 40}, {70, 300},
                                                         {33, 33}, {3, 0},  {0, 12}, {130, 131}};
  std::vector<int32_t> cu_q = {0}, cu_kv = {0};
  int32_t max_q = 0;
  for (const auto& [ql, kl] : seqs) {
    cu_q.push_back(cu_q.back() + ql);
    cu_kv.push_back(cu_kv.back() + kl);
    max_q = std::max(max_q, ql);
  }
  for (const int dim : {16, 32, 64, 80, 96, 128, 256}) {
    for (const auto& [heads, kv_heads] : {std::pair{4, 2}, std::pair{3, 3}}) {
      for (const bool causal : {false, true}) {
        SCOPED_TRACE("dim " + std::to_string(dim) + " heads " + std::to_string(heads) + "/" +
                     std::to_string(kv_heads) + (causal ? " causal" : ""));
        std::vector<float> q, k, v;
        Tensor dq = random(q, int64_t{cu_q.back()} * heads * dim);
        Tensor dk = random(k, int64_t{cu_kv.back()} * kv_heads * dim);
        Tensor dv = random(v, int64_t{cu_kv.back()} * kv_heads * dim);
        Tensor dout = empty(q.size());
        Tensor dcu_q = upload_ints(cu_q);
        Tensor dcu_kv = upload_ints(cu_kv);
        const float scaling = 1.0f / std::sqrt(static_cast<float>(dim));
        ops::varlen_attention(*cuda_, {.q = dq.data(),
                                       .k = dk.data(),
                                       .v = dv.data(),
                                       .out = dout.data(),
                                       .cu_q = dcu_q.data_as<int32_t>(),
                                       .cu_kv = dcu_kv.data_as<int32_t>(),
                                       .dtype = dt(),
                                       .num_seqs = static_cast<int32_t>(seqs.size()),
                                       .max_q_len = max_q,
                                       .q_stride = int64_t{heads} * dim,
                                       .k_stride = int64_t{kv_heads} * dim,
                                       .v_stride = int64_t{kv_heads} * dim,
                                       .out_stride = int64_t{heads} * dim,
                                       .num_heads = heads,
                                       .num_kv_heads = kv_heads,
                                       .head_dim = dim,
                                       .scaling = scaling,
                                       .causal = causal});
        const std::vector<float> want =
            varlen_attention_reference(q, k, v, cu_q, cu_kv, heads, kv_heads, dim, scaling, causal);
        const std::vector<float> got = download(dout.data(), q.size());
        EXPECT_LT(rel_l2(want, got), tol());
        // The text-only sequence (kv_len 0) is exactly zero.
        for (int64_t t = cu_q[5]; t < cu_q[6]; ++t) {
          for (int64_t e = 0; e < int64_t{heads} * dim; ++e)
            ASSERT_EQ(got[t * heads * dim + e], 0.0f) << "token " << t;
        }
      }
    }
  }
}

// Sliding windows and soft-capping (the ragged backend's contiguous path): windows 0, 1, 17 and
// one wider than every sequence, with and without a cap of 30, at every head dim above 32 (each
// window x cap pair meets every head dim; causal, and non-causal on every other case), against the
// float64 reference. Scores are scaled up (12 / sqrt(dim)) so that the cap changes them well
// beyond the bound; the test checks that it does where a query sees 17 keys or more.
TEST_P(WhisperOpsGpuTest, VarlenAttentionWindowAndSoftcap) {
  const std::vector<std::pair<int32_t, int32_t>> seqs = {{1, 1},    {1, 57},  {4, 40},
                                                         {70, 300}, {33, 33}, {0, 12}};
  std::vector<int32_t> cu_q = {0}, cu_kv = {0};
  int32_t max_q = 0;
  for (const auto& [ql, kl] : seqs) {
    cu_q.push_back(cu_q.back() + ql);
    cu_kv.push_back(cu_kv.back() + kl);
    max_q = std::max(max_q, ql);
  }
  const int heads = 4, kv_heads = 2;
  int i = 0;
  for (const int32_t window : {0, 1, 17, 100000}) {
    for (const float cap : {0.0f, 30.0f}) {
      for (const int dim : {64, 80, 96, 128, 256}) {
        const bool causal = i++ % 2 == 0 || window == 100000;
        SCOPED_TRACE("window " + std::to_string(window) + " cap " + std::to_string(cap) + " dim " +
                     std::to_string(dim) + (causal ? " causal" : ""));
        std::vector<float> q, k, v;
        Tensor dq = random(q, int64_t{cu_q.back()} * heads * dim);
        Tensor dk = random(k, int64_t{cu_kv.back()} * kv_heads * dim);
        Tensor dv = random(v, int64_t{cu_kv.back()} * kv_heads * dim);
        Tensor dout = empty(q.size());
        Tensor dcu_q = upload_ints(cu_q);
        Tensor dcu_kv = upload_ints(cu_kv);
        const float scaling = 12.0f / std::sqrt(static_cast<float>(dim));
        ops::varlen_attention(*cuda_, {.q = dq.data(),
                                       .k = dk.data(),
                                       .v = dv.data(),
                                       .out = dout.data(),
                                       .cu_q = dcu_q.data_as<int32_t>(),
                                       .cu_kv = dcu_kv.data_as<int32_t>(),
                                       .dtype = dt(),
                                       .num_seqs = static_cast<int32_t>(seqs.size()),
                                       .max_q_len = max_q,
                                       .q_stride = int64_t{heads} * dim,
                                       .k_stride = int64_t{kv_heads} * dim,
                                       .v_stride = int64_t{kv_heads} * dim,
                                       .out_stride = int64_t{heads} * dim,
                                       .num_heads = heads,
                                       .num_kv_heads = kv_heads,
                                       .head_dim = dim,
                                       .scaling = scaling,
                                       .window_left = window,
                                       .logit_softcap = cap,
                                       .causal = causal});
        const std::vector<float> want = varlen_attention_reference(
            q, k, v, cu_q, cu_kv, heads, kv_heads, dim, scaling, causal, window, cap);
        const std::vector<float> got = download(dout.data(), q.size());
        EXPECT_LT(rel_l2(want, got), tol());
        // Under windows 0 and 1 a query sees one or two keys and the cap barely moves their
        // weights; over 17 keys or more it must move the output well beyond the bound.
        if (cap > 0 && window >= 17) {
          const std::vector<float> uncapped = varlen_attention_reference(
              q, k, v, cu_q, cu_kv, heads, kv_heads, dim, scaling, causal, window, 0.0f);
          EXPECT_GT(rel_l2(want, uncapped), 2 * tol()) << "the cap changes too little";
        }
      }
    }
  }
}

TEST_P(WhisperOpsGpuTest, GatherKvCopiesSlotsExactly) {
  const int64_t slots = 97, row = 3 * 64;
  std::vector<float> kc, vc;
  Tensor dk = random(kc, slots * row);
  Tensor dv = random(vc, slots * row);
  std::vector<int32_t> idx = {5, 0, 96, 7, 7, 33, 64, 1, 2, 3, 90};
  Tensor didx = upload_ints(idx);
  const auto n = static_cast<int64_t>(idx.size());
  Tensor ko = empty(n * row), vo = empty(n * row);
  ops::gather_kv(*cuda_, {.k_cache = dk.data(),
                          .v_cache = dv.data(),
                          .slots = didx.data_as<int32_t>(),
                          .k_out = ko.data(),
                          .v_out = vo.data(),
                          .dtype = dt(),
                          .num_tokens = n,
                          .row_elems = row,
                          .num_slots = slots});
  const std::vector<float> gk = download(ko.data(), n * row);
  const std::vector<float> gv = download(vo.data(), n * row);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < row; ++e) {
      ASSERT_EQ(gk[t * row + e], kc[idx[t] * row + e]) << t;
      ASSERT_EQ(gv[t * row + e], vc[idx[t] * row + e]) << t;
    }
  }
}

// cuda-ragged over an fp8 pool: the gather widens every byte (all 256 codes but NaN) into bf16
// times the scale; the host's float(fp8) * scale rounded to bf16 is the same computation.
TEST(GatherKvFp8, WidensIntoBf16WithScales) {
  auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
  if (!p.is_ok()) GTEST_SKIP() << p.status().to_string();
  platform::Platform& gpu = **p;
  const int64_t slots = 97, row = 3 * 64;
  const float k_scale = 0.037f, v_scale = 2.9f;
  constexpr uint32_t kGatherSeed = 20261201;
  std::mt19937 rng(kGatherSeed);
  std::cout << "[ seed     ] " << kGatherSeed << std::endl;
  for (const DType dt : {DType::kFP8E4M3, DType::kFP8E5M2}) {
    auto nan = [&](uint8_t b) {
      return std::isnan(dt == DType::kFP8E4M3 ? fp8_e4m3_to_float(b) : fp8_e5m2_to_float(b));
    };
    std::vector<uint8_t> kc(slots * row), vc(slots * row);
    std::uniform_int_distribution<int> byte(0, 255);
    for (int64_t i = 0; i < slots * row; ++i) {
      // Every code in order first (each slot row holds 192 of them), then random ones.
      auto draw = [&](int64_t salt) {
        uint8_t b = static_cast<uint8_t>(i + salt < 256 ? i + salt : byte(rng));
        while (nan(b))
          b = static_cast<uint8_t>(byte(rng));
        return b;
      };
      kc[i] = draw(0);
      vc[i] = draw(64);
    }
    auto upload = [&](const void* host, size_t bytes) {
      auto buf = std::move(gpu.allocate_buffer(bytes).value());
      gpu.copy(buf.data(), host, bytes, platform::CopyKind::kHostToDevice);
      return buf;
    };
    const std::vector<int32_t> idx = {5, 0, 96, 7, 7, 33, 64, 1, 2, 3, 90};
    const auto n = static_cast<int64_t>(idx.size());
    const Buffer dk = upload(kc.data(), kc.size()), dv = upload(vc.data(), vc.size());
    const Buffer didx = upload(idx.data(), idx.size() * 4);
    Buffer ko = std::move(gpu.allocate_buffer(n * row * 2).value());
    Buffer vo = std::move(gpu.allocate_buffer(n * row * 2).value());
    ops::gather_kv(gpu, {.k_cache = dk.data(),
                         .v_cache = dv.data(),
                         .slots = didx.data_as<int32_t>(),
                         .k_out = ko.data(),
                         .v_out = vo.data(),
                         .dtype = DType::kBF16,
                         .cache_dtype = dt,
                         .k_scale = k_scale,
                         .v_scale = v_scale,
                         .num_tokens = n,
                         .row_elems = row,
                         .num_slots = slots});
    std::vector<uint16_t> gk(n * row), gv(n * row);
    gpu.copy(gk.data(), ko.data(), gk.size() * 2, platform::CopyKind::kDeviceToHost);
    gpu.copy(gv.data(), vo.data(), gv.size() * 2, platform::CopyKind::kDeviceToHost);
    gpu.synchronize();
    auto want = [&](uint8_t b, float scale) {
      const float f = dt == DType::kFP8E4M3 ? fp8_e4m3_to_float(b) : fp8_e5m2_to_float(b);
      return float_to_bf16(f * scale);
    };
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t e = 0; e < row; ++e) {
        ASSERT_EQ(gk[t * row + e], want(kc[idx[t] * row + e], k_scale))
            << dtype_name(dt) << " token " << t << " element " << e;
        ASSERT_EQ(gv[t * row + e], want(vc[idx[t] * row + e], v_scale))
            << dtype_name(dt) << " token " << t << " element " << e;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, WhisperOpsGpuTest, testing::Values(DType::kF32, DType::kBF16),
                         [](const testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

}  // namespace
}  // namespace kvserve

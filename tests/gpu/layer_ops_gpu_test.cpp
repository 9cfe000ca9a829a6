// The CUDA layer ops (platform/cuda/layer_ops.cu, gemm.cpp) against the CPU ops on the same
// bf16-rounded inputs, on odd sizes: embedding and argmax exactly; RMSNorm (with and without the
// fused residual, with Gemma's (1 + w) offset, per-head rows), split-qkv + rope (every
// rope_scaling type), SiLU- and tanh-GELU-and-mul within bf16 rounding of the f32 result, the
// scaled embedding and the logit soft-capping; the cuBLASLt GEMM (bias, f32 output), the skinny
// GEMM and the norm-then-project op against float64. Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <numeric>
#include <random>

#include "kvserve/checkpoint/config.h"
#include "kvserve/core/dtype.h"
#include "kvserve/model/rope.h"
#include "kvserve/platform/ops/gemm.h"
#include "kvserve/platform/ops/layer_ops.h"
#include "kvserve/platform/platform.h"

namespace kvserve {
namespace {

struct GemmShape {
  int64_t m, n, k;
  bool bias, f32_out;
};

// ops::normed_linear's cases: n weight rows (gated: n / 2 outputs), a residual to add or not
// (the first layer), Gemma's (1 + w) norm weight.
struct NormedShape {
  int64_t m, n, k;
  bool gated, bias, residual;
  float weight_offset;
  ops::GatedActivation act;
};

class LayerOpsGpuTest : public testing::Test {
 protected:
  void SetUp() override {
    auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
    if (!p.is_ok()) GTEST_SKIP() << p.status().to_string();
    gpu_ = std::move(p).value();
    std::cout << "[ seed     ] " << kSeed << std::endl;
  }

  // Random values rounded to bf16: `host` holds them as f32 (the CPU ops' input), the returned
  // tensor as bf16 on the device.
  Tensor random_bf16(std::vector<float>& host, int64_t n, float scale = 1.0f) {
    std::normal_distribution<float> d(0.0f, scale);
    host.resize(n);
    std::vector<uint16_t> bits(n);
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16(d(rng_));
      host[i] = bf16_to_float(bits[i]);
    }
    return upload(bits.data(), DType::kBF16, n);
  }
  Tensor upload(const void* data, DType t, int64_t n) {
    auto tensor = gpu_->empty(t, {n});
    KV_CHECK(tensor.is_ok(), "{}", tensor.status().to_string());
    gpu_->copy(tensor->data(), data, n * dtype_size(t), platform::CopyKind::kHostToDevice);
    return std::move(tensor).value();
  }
  Tensor empty(DType t, int64_t n) { return std::move(gpu_->empty(t, {n})).value(); }
  std::vector<float> download_bf16(const Tensor& t, int64_t n) {
    std::vector<uint16_t> bits(n);
    gpu_->copy(bits.data(), t.data(), n * 2, platform::CopyKind::kDeviceToHost);
    gpu_->synchronize();
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i)
      out[i] = bf16_to_float(bits[i]);
    return out;
  }
  // Every element within `rel` of the reference's magnitude (plus a small absolute floor).
  static void expect_close(const std::vector<float>& ref, const std::vector<float>& got, float rel,
                           const std::string& what) {
    ASSERT_EQ(ref.size(), got.size());
    int bad = 0;
    for (size_t i = 0; i < ref.size() && bad < 5; ++i) {
      if (std::abs(ref[i] - got[i]) > rel * std::abs(ref[i]) + 1e-3f) {
        ++bad;
        ADD_FAILURE() << what << " [" << i << "]: reference " << ref[i] << ", cuda " << got[i];
      }
    }
  }

  void check_gemm(const GemmShape& s);
  void check_normed_linear(const NormedShape& s);

  static constexpr uint64_t kSeed = 20261130;
  std::mt19937_64 rng_{kSeed};
  std::unique_ptr<platform::Platform> gpu_;
};

// bf16 keeps 8 significant bits: one rounding of the result is within 2^-8 relative.
constexpr float kBf16 = 1.0f / 128;

TEST_F(LayerOpsGpuTest, RmsNormWithAndWithoutResidual) {
  for (const int64_t rows : {1, 7, 33}) {
    // Widths through each kernel: 16-byte vectors with 128 threads (64, 1000), 512 threads x 1, 2
    // and 4 vectors (4096, 8192, 12288), and the scalar kernel (1001: not a multiple of 8).
    for (const int64_t cols : {64, 1000, 1001, 4096, 8192, 12288}) {
      std::vector<float> x, res, w;
      Tensor dx = random_bf16(x, rows * cols);
      Tensor dres = random_bf16(res, rows * cols);
      Tensor dw = random_bf16(w, cols);
      Tensor dout = empty(DType::kBF16, rows * cols);
      // Without a residual.
      std::vector<float> out(rows * cols);
      ops::cpu::rms_norm({.x = x.data(),
                          .out = out.data(),
                          .weight = w.data(),
                          .rows = rows,
                          .cols = cols,
                          .x_stride = cols,
                          .eps = 1e-5f});
      ops::rms_norm(*gpu_, {.x = dx.data(),
                            .out = dout.data(),
                            .weight = dw.data(),
                            .dtype = DType::kBF16,
                            .rows = rows,
                            .cols = cols,
                            .x_stride = cols,
                            .eps = 1e-5f});
      expect_close(out, download_bf16(dout, rows * cols), 2 * kBf16, "rms_norm");
      // With the fused residual: residual = x + residual (rounded to bf16 on the device).
      std::vector<float> res_cpu = res;
      ops::cpu::rms_norm({.x = x.data(),
                          .residual = res_cpu.data(),
                          .out = out.data(),
                          .weight = w.data(),
                          .rows = rows,
                          .cols = cols,
                          .x_stride = cols,
                          .eps = 1e-5f});
      ops::rms_norm(*gpu_, {.x = dx.data(),
                            .residual = dres.data(),
                            .out = dout.data(),
                            .weight = dw.data(),
                            .dtype = DType::kBF16,
                            .rows = rows,
                            .cols = cols,
                            .x_stride = cols,
                            .eps = 1e-5f});
      expect_close(res_cpu, download_bf16(dres, rows * cols), kBf16, "residual");
      expect_close(out, download_bf16(dout, rows * cols), 3 * kBf16, "fused rms_norm");
    }
  }
}

TEST_F(LayerOpsGpuTest, SplitQkvRopeAndSiluAndMul) {
  struct Shape {
    int32_t heads, kv_heads, head_dim;
  };
  std::uniform_int_distribution<int32_t> pos(0, 4097);
  // head_dim 128, 64, 80 take the 16-byte path; 72 (not a multiple of 16) the scalar kernel;
  // 3 x 72 gives SiLU-and-mul an inter of 108 (not a multiple of 8): its scalar kernel.
  for (const Shape s : {Shape{32, 8, 128}, Shape{14, 2, 64}, Shape{6, 2, 64}, Shape{5, 1, 80},
                        Shape{4, 2, 72}, Shape{3, 1, 72}}) {
    for (const int64_t n : {1, 7, 33}) {
      const int64_t qd = int64_t{s.heads} * s.head_dim, kvd = int64_t{s.kv_heads} * s.head_dim;
      std::vector<float> qkv;
      Tensor dqkv = random_bf16(qkv, n * (qd + 2 * kvd));
      std::vector<int32_t> positions(n);
      for (int32_t& p : positions)
        p = pos(rng_);
      std::vector<float> inv_freq(s.head_dim / 2);
      for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = std::pow(500000.0f, -2.0f * i / s.head_dim);
      Tensor dpos = upload(positions.data(), DType::kI32, n);
      Tensor dfreq = upload(inv_freq.data(), DType::kF32, static_cast<int64_t>(inv_freq.size()));
      std::vector<float> q(n * qd), k(n * kvd), v(n * kvd);
      Tensor dq = empty(DType::kBF16, n * qd), dk = empty(DType::kBF16, n * kvd),
             dv = empty(DType::kBF16, n * kvd);
      ops::SplitQkvRopeParams p{.qkv = qkv.data(),
                                .q = q.data(),
                                .k = k.data(),
                                .v = v.data(),
                                .positions = positions.data(),
                                .inv_freq = inv_freq.data(),
                                .num_tokens = n,
                                .num_heads = s.heads,
                                .num_kv_heads = s.kv_heads,
                                .head_dim = s.head_dim,
                                .rotary_dim = s.head_dim};
      ops::cpu::split_qkv_rope(p);
      p.qkv = dqkv.data();
      p.q = dq.data();
      p.k = dk.data();
      p.v = dv.data();
      p.dtype = DType::kBF16;
      p.positions = dpos.data_as<int32_t>();
      p.inv_freq = dfreq.data_as<float>();
      ops::split_qkv_rope(*gpu_, p);
      expect_close(q, download_bf16(dq, n * qd), 2 * kBf16, "q");
      expect_close(k, download_bf16(dk, n * kvd), 2 * kBf16, "k");
      expect_close(v, download_bf16(dv, n * kvd), 0, "v");  // a copy

      // The fused KV store: k and v land in shuffled cache rows, bitwise what the unfused split
      // wrote; every other row stays zero.
      const int64_t slots = 3 * n + 5;
      std::vector<int32_t> loc(static_cast<size_t>(slots));
      std::iota(loc.begin(), loc.end(), 0);
      std::shuffle(loc.begin(), loc.end(), rng_);
      loc.resize(static_cast<size_t>(n));
      Tensor dloc = upload(loc.data(), DType::kI32, n);
      Tensor dkc = empty(DType::kBF16, slots * kvd), dvc = empty(DType::kBF16, slots * kvd);
      gpu_->memset(dkc.data(), 0, dkc.bytes());
      gpu_->memset(dvc.data(), 0, dvc.bytes());
      ops::SplitQkvRopeParams fused = p;
      fused.k = fused.v = nullptr;
      fused.k_cache = dkc.data();
      fused.v_cache = dvc.data();
      fused.cache_loc = dloc.data_as<int32_t>();
      fused.num_slots = slots;
      ops::split_qkv_rope(*gpu_, fused);
      const std::vector<float> kg = download_bf16(dk, n * kvd), vg = download_bf16(dv, n * kvd);
      const std::vector<float> kc = download_bf16(dkc, slots * kvd);
      const std::vector<float> vc = download_bf16(dvc, slots * kvd);
      std::vector<float> k_expect(static_cast<size_t>(slots * kvd), 0.0f), v_expect = k_expect;
      for (int64_t t = 0; t < n; ++t) {
        std::copy_n(kg.begin() + t * kvd, kvd, k_expect.begin() + loc[t] * kvd);
        std::copy_n(vg.begin() + t * kvd, kvd, v_expect.begin() + loc[t] * kvd);
      }
      EXPECT_EQ(kc, k_expect) << "fused k, " << s.heads << "/" << s.kv_heads << " x " << n;
      EXPECT_EQ(vc, v_expect) << "fused v, " << s.heads << "/" << s.kv_heads << " x " << n;

      std::vector<float> act(n * qd / 2);
      Tensor dact = empty(DType::kBF16, n * qd / 2);
      ops::cpu::act_and_mul({.x = q.data(), .out = act.data(), .num_tokens = n, .inter = qd / 2});
      ops::act_and_mul(*gpu_, {.x = dq.data(),
                               .out = dact.data(),
                               .dtype = DType::kBF16,
                               .num_tokens = n,
                               .inter = qd / 2});
      // The device read its own bf16 q, the CPU its f32 q: two roundings apart at most.
      expect_close(act, download_bf16(dact, n * qd / 2), 4 * kBf16, "silu_and_mul");
    }
  }
}

// Every rope_scaling type (model/rope.h tables: rows per length, attention factor), on the
// split + rope kernels (head_dim 64: the 16-byte path; 72: the scalar kernel) and the in-place
// rope kernel, against the CPU ops; each token picks the row of a random request length.
TEST_F(LayerOpsGpuTest, RopeScalingTypesMatchTheCpuOps) {
  for (const std::string type : {"default", "linear", "dynamic", "yarn", "longrope", "llama3"}) {
    for (const int32_t head_dim : {64, 72}) {
      checkpoint::ModelConfig c;
      c.head_dim = head_dim;
      c.max_position_embeddings = 64;
      c.rope_theta = 10000.0;
      auto& sc = c.rope_scaling;
      sc.rope_type = type;
      sc.factor = 4.0;
      sc.original_max_position_embeddings = 64;
      sc.attention_factor = type == "yarn" || type == "longrope" ? 1.1386 : 1.0;
      for (int32_t i = 0; i < head_dim / 2; ++i) {
        sc.short_factor.push_back(1.0 + 0.02 * i);
        sc.long_factor.push_back(1.0 + 0.2 * i);
      }
      const int64_t context = 300;
      const model::RopeTable table = model::make_rope_table(c, head_dim, context);
      const int32_t heads = 4, kv_heads = 2;
      const int64_t n = 37, qd = int64_t{heads} * head_dim, kvd = int64_t{kv_heads} * head_dim;
      std::vector<float> qkv;
      Tensor dqkv = random_bf16(qkv, n * (qd + 2 * kvd));
      std::vector<int32_t> positions(n), rows(n);
      std::uniform_int_distribution<int64_t> len(1, context);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t l = len(rng_);
        positions[t] = static_cast<int32_t>(l - 1);
        rows[t] = table.row_for(l);
      }
      Tensor dpos = upload(positions.data(), DType::kI32, n);
      Tensor drows = upload(rows.data(), DType::kI32, n);
      Tensor dfreq =
          upload(table.inv_freq.data(), DType::kF32, static_cast<int64_t>(table.inv_freq.size()));
      std::vector<float> q(n * qd), k(n * kvd), v(n * kvd);
      Tensor dq = empty(DType::kBF16, n * qd), dk = empty(DType::kBF16, n * kvd),
             dv = empty(DType::kBF16, n * kvd);
      ops::SplitQkvRopeParams p{.qkv = qkv.data(),
                                .q = q.data(),
                                .k = k.data(),
                                .v = v.data(),
                                .positions = positions.data(),
                                .inv_freq = table.inv_freq.data(),
                                .rope_rows = table.length_dependent ? rows.data() : nullptr,
                                .attention_factor = table.attention_factor,
                                .num_tokens = n,
                                .num_heads = heads,
                                .num_kv_heads = kv_heads,
                                .head_dim = head_dim,
                                .rotary_dim = head_dim};
      ops::cpu::split_qkv_rope(p);
      p.qkv = dqkv.data();
      p.q = dq.data();
      p.k = dk.data();
      p.v = dv.data();
      p.dtype = DType::kBF16;
      p.positions = dpos.data_as<int32_t>();
      p.inv_freq = dfreq.data_as<float>();
      p.rope_rows = table.length_dependent ? drows.data_as<int32_t>() : nullptr;
      ops::split_qkv_rope(*gpu_, p);
      const std::string what = type + " head_dim " + std::to_string(head_dim);
      expect_close(q, download_bf16(dq, n * qd), 2 * kBf16, what + " split q");
      expect_close(k, download_bf16(dk, n * kvd), 2 * kBf16, what + " split k");

      // The in-place op on the unrotated q / k (the split's v-less copy of the inputs).
      std::vector<float> q2(n * qd), k2(n * kvd);
      std::vector<uint16_t> q2_bits(n * qd), k2_bits(n * kvd);
      for (int64_t t = 0; t < n; ++t) {
        for (int64_t i = 0; i < qd; ++i)
          q2[t * qd + i] = qkv[t * (qd + 2 * kvd) + i];
        for (int64_t i = 0; i < kvd; ++i)
          k2[t * kvd + i] = qkv[t * (qd + 2 * kvd) + qd + i];
      }
      for (size_t i = 0; i < q2.size(); ++i)
        q2_bits[i] = float_to_bf16(q2[i]);
      for (size_t i = 0; i < k2.size(); ++i)
        k2_bits[i] = float_to_bf16(k2[i]);
      Tensor dq2 = upload(q2_bits.data(), DType::kBF16, n * qd);
      Tensor dk2 = upload(k2_bits.data(), DType::kBF16, n * kvd);
      ops::RopeParams r{.q = q2.data(),
                        .k = k2.data(),
                        .positions = positions.data(),
                        .inv_freq = table.inv_freq.data(),
                        .rope_rows = p.rope_rows != nullptr ? rows.data() : nullptr,
                        .attention_factor = table.attention_factor,
                        .num_tokens = n,
                        .q_stride = qd,
                        .k_stride = kvd,
                        .num_heads = heads,
                        .num_kv_heads = kv_heads,
                        .head_dim = head_dim,
                        .rotary_dim = head_dim};
      ops::cpu::rope(r);
      r.q = dq2.data();
      r.k = dk2.data();
      r.dtype = DType::kBF16;
      r.positions = p.positions;
      r.inv_freq = p.inv_freq;
      r.rope_rows = p.rope_rows;
      ops::rope(*gpu_, r);
      expect_close(q2, download_bf16(dq2, n * qd), 2 * kBf16, what + " rope q");
      expect_close(k2, download_bf16(dk2, n * kvd), 2 * kBf16, what + " rope k");
    }
  }
}

TEST_F(LayerOpsGpuTest, EmbeddingAndArgmaxAreExact) {
  const int64_t vocab = 1000, hidden = 72, n = 33;
  std::vector<float> table;
  Tensor dtable = random_bf16(table, vocab * hidden);
  std::vector<int32_t> ids(n);
  std::uniform_int_distribution<int32_t> id(0, vocab - 1);
  for (int32_t& i : ids)
    i = id(rng_);
  Tensor dids = upload(ids.data(), DType::kI32, n);
  Tensor dout = empty(DType::kBF16, n * hidden);
  ops::embedding(*gpu_, {.table = dtable.data(),
                         .ids = dids.data_as<int32_t>(),
                         .out = dout.data(),
                         .dtype = DType::kBF16,
                         .num_tokens = n,
                         .hidden = hidden,
                         .vocab = vocab});
  const std::vector<float> got = download_bf16(dout, n * hidden);
  for (int64_t t = 0; t < n; ++t) {
    for (int64_t j = 0; j < hidden; ++j)
      ASSERT_EQ(got[t * hidden + j], table[ids[t] * hidden + j]) << t << "," << j;
  }
  // Argmax over rows of 128,256 with planted ties: the lowest index wins, as on the host.
  const int64_t rows = 7, cols = 128256;
  std::vector<float> logits(rows * cols);
  std::normal_distribution<float> d(0.0f, 3.0f);
  for (float& x : logits)
    x = d(rng_);
  logits[2 * cols + 5] = logits[2 * cols + 90000] = 100.0f;
  Tensor dlogits = upload(logits.data(), DType::kF32, rows * cols);
  Tensor dbest = empty(DType::kI32, rows);
  ops::argmax_rows(*gpu_, dlogits.data_as<float>(), rows, cols, dbest.data_as<int32_t>());
  std::vector<int32_t> best(rows), host(rows);
  gpu_->copy(best.data(), dbest.data(), rows * 4, platform::CopyKind::kDeviceToHost);
  gpu_->synchronize();
  ops::argmax_rows(*platform::create_platform(Device{}).value(), logits.data(), rows, cols,
                   host.data());
  EXPECT_EQ(best, host);
  EXPECT_EQ(best[2], 5);
}

// ops::gemm on `s` (bf16 inputs, row-major, packed) against a float64 product of the same values.
void LayerOpsGpuTest::check_gemm(const GemmShape& s) {
  std::vector<float> a, b, bias;
  Tensor da = random_bf16(a, s.m * s.k);
  Tensor db = random_bf16(b, s.n * s.k, 0.05f);
  Tensor dbias = random_bf16(bias, s.n);
  Tensor dc = empty(s.f32_out ? DType::kF32 : DType::kBF16, s.m * s.n);
  ops::gemm(*gpu_, {.a = da.data(),
                    .b = db.data(),
                    .bias = s.bias ? dbias.data() : nullptr,
                    .c = dc.data(),
                    .dtype = DType::kBF16,
                    .c_f32 = s.f32_out,
                    .m = s.m,
                    .n = s.n,
                    .k = s.k,
                    .lda = s.k,
                    .ldb = s.k,
                    .ldc = s.n});
  std::vector<float> got;
  if (s.f32_out) {
    got.resize(s.m * s.n);
    gpu_->copy(got.data(), dc.data(), got.size() * 4, platform::CopyKind::kDeviceToHost);
    gpu_->synchronize();
  } else {
    got = download_bf16(dc, s.m * s.n);
  }
  double worst = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    for (int64_t j = 0; j < s.n; ++j) {
      double ref = s.bias ? bias[j] : 0.0, mag = std::abs(ref);
      for (int64_t p = 0; p < s.k; ++p) {
        ref += double(a[i * s.k + p]) * b[j * s.k + p];
        mag += std::abs(double(a[i * s.k + p]) * b[j * s.k + p]);
      }
      // f32 accumulation error is far below the output's bf16 rounding; bound by both.
      const double err = std::abs(got[i * s.n + j] - ref);
      const double tol = (s.f32_out ? 1e-5 : kBf16) * std::abs(ref) + 4e-5 * mag + 1e-6;
      worst = std::max(worst, err / tol);
      if (err > tol) {
        ADD_FAILURE() << s.m << "x" << s.n << "x" << s.k << " [" << i << "," << j << "]: reference "
                      << ref << ", cuda " << got[i * s.n + j];
        return;
      }
    }
  }
  std::cout << "[ gemm     ] " << s.m << "x" << s.n << "x" << s.k << (s.bias ? " +bias" : "")
            << (s.f32_out ? " f32 out" : "") << ": worst error " << worst << " of tolerance"
            << std::endl;
}

// m = 7, 200 and 64 are decode-batch shapes whose algorithm is timed among cuBLASLt's candidates
// at the first call (gemm.cpp: fastest); 33 keeps the heuristic's first answer. 64 x 4096 x 14336
// is the 8B shape's down projection at batch 64 (split-K on the H100).
TEST_F(LayerOpsGpuTest, CublasLtGemmMatchesFloat64) {
  for (const GemmShape s :
       {GemmShape{7, 1000, 64, true, false}, GemmShape{33, 6144, 1000, true, false},
        GemmShape{33, 128256, 64, false, true}, GemmShape{200, 896, 896, false, true},
        GemmShape{64, 4096, 14336, false, false}}) {
    check_gemm(s);
    if (HasFailure()) return;
  }
}

// m = 1 runs the skinny kernel (platform/cuda/skinny_gemm.cu) where it applies: odd n (a last
// warp with one row), k not a multiple of the unrolled stride, bias, f32 logits; k = 100 is not a
// multiple of 8 and goes to cuBLASLt, as do m = 2..4 (the same checks, the other path).
TEST_F(LayerOpsGpuTest, SkinnyGemmMatchesFloat64) {
  for (const int64_t m : {1, 2, 3, 4}) {
    for (const GemmShape s :
         {GemmShape{m, 4096, 4096, false, false}, GemmShape{m, 1001, 64, true, false},
          GemmShape{m, 6144, 1000, true, false}, GemmShape{m, 7, 14336, false, false},
          GemmShape{m, 32003, 512, false, true}, GemmShape{m, 33, 100, true, false}}) {
      check_gemm(s);
      if (HasFailure()) return;
    }
  }
}

// ops::normed_linear on `s` against float64: the residual stream bit for bit (bf16(x + residual),
// as rms_norm rounds it), the output within its roundings: the normed row (at most 2^-9 of each
// product's magnitude), gate and up before the activation, and the output.
void LayerOpsGpuTest::check_normed_linear(const NormedShape& s) {
  std::vector<float> x, res, g, w, bias;
  Tensor dx = random_bf16(x, s.m * s.k);
  Tensor dres = random_bf16(res, s.m * s.k);
  Tensor dg = random_bf16(g, s.k, 0.5f);
  Tensor dw = random_bf16(w, s.n * s.k, 0.05f);
  Tensor dbias = random_bf16(bias, s.n);
  const int64_t outs = s.gated ? s.n / 2 : s.n;
  Tensor dout = empty(DType::kBF16, s.m * outs);
  Tensor dres_out = empty(DType::kBF16, s.m * s.k);
  Tensor dnormed = empty(DType::kBF16, s.m * s.k);
  Tensor dgate_up = empty(DType::kBF16, s.m * s.n);
  constexpr float kEps = 1e-5f;
  ops::normed_linear(*gpu_, {.x = dx.data(),
                             .residual_in = s.residual ? dres.data() : nullptr,
                             .residual_out = dres_out.data(),
                             .norm_weight = dg.data(),
                             .eps = kEps,
                             .weight_offset = s.weight_offset,
                             .w = dw.data(),
                             .bias = s.bias ? dbias.data() : nullptr,
                             .out = dout.data(),
                             .dtype = DType::kBF16,
                             .m = s.m,
                             .n = s.n,
                             .k = s.k,
                             .gated = s.gated,
                             .activation = s.act,
                             .normed = dnormed.data(),
                             .gate_up = dgate_up.data()});
  const std::vector<float> got = download_bf16(dout, s.m * outs);
  const std::vector<float> got_res = download_bf16(dres_out, s.m * s.k);
  const std::string what = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" +
                           std::to_string(s.k) + (s.gated ? " gated" : "") +
                           (s.bias ? " +bias" : "") + (s.residual ? " +residual" : "");
  auto act = [&](double v) {
    if (s.act == ops::GatedActivation::kSilu) return v / (1.0 + std::exp(-v));
    return 0.5 * v * (1.0 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
  };
  double worst = 0;
  for (int64_t i = 0; i < s.m; ++i) {
    std::vector<double> v(s.k);
    double sumsq = 0;
    for (int64_t p = 0; p < s.k; ++p) {
      const float sum = s.residual ? x[i * s.k + p] + res[i * s.k + p] : x[i * s.k + p];
      v[p] = bf16_to_float(float_to_bf16(sum));
      ASSERT_EQ(got_res[i * s.k + p], v[p]) << what << ": residual [" << i << "," << p << "]";
      sumsq += v[p] * v[p];
    }
    const double inv = 1.0 / std::sqrt(sumsq / s.k + kEps);
    // y[j] and the sum of its terms' magnitudes.
    auto row = [&](int64_t j, double* mag) {
      double y = s.bias ? bias[j] : 0.0;
      *mag = std::abs(y);
      for (int64_t p = 0; p < s.k; ++p) {
        const double t = double(w[j * s.k + p]) * v[p] * inv * (g[p] + s.weight_offset);
        y += t;
        *mag += std::abs(t);
      }
      return y;
    };
    // How far y may be off: f32 accumulation, and the normed row in bf16.
    const double per_mag = 4e-5 + 1.0 / 512;
    for (int64_t j = 0; j < outs; ++j) {
      double ref, tol;
      if (s.gated) {
        double mag_g, mag_u;
        const double yg = row(j, &mag_g), yu = row(outs + j, &mag_u);
        ref = act(yg) * yu;
        // Gate and up are rounded to bf16 (2^-8 relative) and off by per_mag of their
        // magnitudes; the activation's slope carries the gate's error.
        const double h = 1e-6 * (1 + std::abs(yg));
        const double slope = (act(yg + h) - act(yg - h)) / (2 * h);
        const double err_g = kBf16 * std::abs(yg) + per_mag * mag_g;
        const double err_u = kBf16 * std::abs(yu) + per_mag * mag_u;
        tol =
            kBf16 * std::abs(ref) + std::abs(slope * yu) * err_g + std::abs(act(yg)) * err_u + 1e-5;
      } else {
        double mag;
        ref = row(j, &mag);
        tol = kBf16 * std::abs(ref) + per_mag * mag + 1e-6;
      }
      const double err = std::abs(got[i * outs + j] - ref);
      worst = std::max(worst, err / tol);
      if (err > tol) {
        ADD_FAILURE() << what << " [" << i << "," << j << "]: reference " << ref << ", cuda "
                      << got[i * outs + j] << " (tolerance " << tol << ")";
        return;
      }
    }
  }
  std::cout << "[ normed   ] " << what << ": worst error " << worst << " of tolerance" << std::endl;
}

// rms_norm, the GEMM (the skinny kernel at m = 1, cuBLASLt above) and act_and_mul as one op.
// Shapes: the 8B's qkv (with Qwen2's bias) and gate_up, a first layer (no residual to add), Gemma's
// (1 + w) with tanh-GELU, a last warp with one output, k = 100 (not a multiple of 8).
TEST_F(LayerOpsGpuTest, NormedLinearMatchesFloat64) {
  using A = ops::GatedActivation;
  for (const int64_t m : {1, 2, 3}) {
    for (const NormedShape s : {NormedShape{m, 6144, 4096, false, true, true, 0.0f, A::kSilu},
                                NormedShape{m, 28672, 4096, true, false, true, 0.0f, A::kSilu},
                                NormedShape{m, 1001, 1000, false, false, false, 0.0f, A::kSilu},
                                NormedShape{m, 2 * 999, 512, true, false, true, 1.0f, A::kGeluTanh},
                                NormedShape{m, 2 * 7, 14336, true, false, true, 0.0f, A::kSilu},
                                NormedShape{m, 33, 100, false, true, true, 0.0f, A::kSilu}}) {
      check_normed_linear(s);
      if (HasFailure()) return;
    }
  }
}

TEST_F(LayerOpsGpuTest, GemmRejectsABiasWithAnF32OutputOf16BitInputs) {
  std::vector<float> a, b, bias;
  Tensor da = random_bf16(a, 8 * 64), db = random_bf16(b, 16 * 64), dbias = random_bf16(bias, 16);
  Tensor dc = empty(DType::kF32, 8 * 16);
  EXPECT_THROW(ops::gemm(*gpu_, {.a = da.data(),
                                 .b = db.data(),
                                 .bias = dbias.data(),
                                 .c = dc.data(),
                                 .dtype = DType::kBF16,
                                 .c_f32 = true,
                                 .m = 8,
                                 .n = 16,
                                 .k = 64,
                                 .lda = 64,
                                 .ldb = 64,
                                 .ldc = 16}),
               CheckError);
}

// Gemma's and Qwen3's additions: RMSNorm with the (1 + w) offset over hidden rows and over
// per-head rows (head_dim 128 and 256: the q/k norms), tanh-GELU-and-mul (both kernels), the
// scaled embedding (exact: a bf16 product rounded once) and the f32 logit soft-capping.
TEST_F(LayerOpsGpuTest, GemmaAndQwen3Ops) {
  for (const int64_t cols : {128, 256, 1001, 3584}) {
    const int64_t rows = 37;
    std::vector<float> x, w;
    Tensor dx = random_bf16(x, rows * cols);
    Tensor dw = random_bf16(w, cols, 0.3f);
    Tensor dout = empty(DType::kBF16, rows * cols);
    std::vector<float> out(rows * cols);
    ops::cpu::rms_norm({.x = x.data(),
                        .out = out.data(),
                        .weight = w.data(),
                        .rows = rows,
                        .cols = cols,
                        .x_stride = cols,
                        .eps = 1e-6f,
                        .weight_offset = 1.0f});
    ops::rms_norm(*gpu_, {.x = dx.data(),
                          .out = dout.data(),
                          .weight = dw.data(),
                          .dtype = DType::kBF16,
                          .rows = rows,
                          .cols = cols,
                          .x_stride = cols,
                          .eps = 1e-6f,
                          .weight_offset = 1.0f});
    expect_close(out, download_bf16(dout, rows * cols), 2 * kBf16, "rms_norm (1 + w)");
  }
  for (const int64_t inter : {8 * 37, 1001}) {  // the bf16x8 kernel and the scalar one
    const int64_t n = 9;
    std::vector<float> x;
    Tensor dx = random_bf16(x, n * 2 * inter, 2.0f);
    Tensor dact = empty(DType::kBF16, n * inter);
    std::vector<float> act(n * inter);
    ops::cpu::act_and_mul({.x = x.data(),
                           .out = act.data(),
                           .activation = ops::GatedActivation::kGeluTanh,
                           .num_tokens = n,
                           .inter = inter});
    ops::act_and_mul(*gpu_, {.x = dx.data(),
                             .out = dact.data(),
                             .dtype = DType::kBF16,
                             .activation = ops::GatedActivation::kGeluTanh,
                             .num_tokens = n,
                             .inter = inter});
    expect_close(act, download_bf16(dact, n * inter), 2 * kBf16, "gelu_tanh_and_mul");
  }
  {
    const int64_t vocab = 300, hidden = 72, n = 17;
    std::vector<float> table;
    Tensor dtable = random_bf16(table, vocab * hidden);
    std::vector<int32_t> ids(n);
    std::uniform_int_distribution<int32_t> id(0, vocab - 1);
    for (auto& i : ids)
      i = id(rng_);
    Tensor dids = upload(ids.data(), DType::kI32, n);
    Tensor dout = empty(DType::kBF16, n * hidden);
    const float scale = bf16_to_float(float_to_bf16(std::sqrt(3584.0f)));  // as the model rounds it
    ops::embedding(*gpu_, {.table = dtable.data(),
                           .ids = dids.data_as<int32_t>(),
                           .out = dout.data(),
                           .dtype = DType::kBF16,
                           .num_tokens = n,
                           .hidden = hidden,
                           .vocab = vocab,
                           .scale = scale});
    const std::vector<float> got = download_bf16(dout, n * hidden);
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < hidden; ++i) {
        const float want = bf16_to_float(float_to_bf16(table[ids[t] * hidden + i] * scale));
        ASSERT_EQ(got[t * hidden + i], want) << t << "," << i;
      }
    }
  }
  {
    const int64_t rows = 5, vocab = 70001;
    std::vector<float> logits(rows * vocab);
    std::normal_distribution<float> d(0.0f, 40.0f);
    for (auto& v : logits)
      v = d(rng_);
    Tensor dl = upload(logits.data(), DType::kF32, rows * vocab);
    std::vector<float> want = logits;
    ops::cpu::softcap({.x = want.data(), .rows = rows, .cols = vocab, .cap = 30.0f});
    ops::softcap(*gpu_, {.x = dl.data_as<float>(), .rows = rows, .cols = vocab, .cap = 30.0f});
    std::vector<float> got(rows * vocab);
    gpu_->copy(got.data(), dl.data(), got.size() * sizeof(float),
               platform::CopyKind::kDeviceToHost);
    gpu_->synchronize();
    expect_close(want, got, 1e-5f, "softcap");
  }
}

}  // namespace
}  // namespace kvserve

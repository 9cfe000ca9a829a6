// Attention backends against a float64 reference computed from plain per-position K/V arrays
// (never through the pool): extend with cached prefixes on and off page boundaries, decode, GQA,
// cross-attention with empty encoders, page sizes 1..128, f32 and bf16 caches.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kvserve/attention/backend.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/encoder_layout.h"

namespace kvserve::attention {
namespace {

using mem::KvReqState;

struct Case {
  std::string backend;
  int32_t page_size;
  int32_t heads;
  int32_t kv_heads;
  int32_t head_dim;
  DType kv_dtype;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  const Case& c = info.param;
  return fmt::format("{}_p{}_h{}kv{}_d{}_{}", c.backend, c.page_size, c.heads, c.kv_heads,
                     c.head_dim, dtype_name(c.kv_dtype));
}

// Rounds through the cache dtype.
float through(DType t, float x) {
  float y;
  uint8_t buf[4];
  convert_elements(&x, DType::kF32, buf, t, 1);
  convert_elements(buf, t, &y, DType::kF32, 1);
  return y;
}

class AttentionTest : public testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    const Case& c = GetParam();
    platform_ = std::move(platform::create_platform(Device{}).value());
    pool_ = std::move(mem::MHATokenToKVPool::create(*platform_, {.num_layers = 2,
                                                                 .num_kv_heads = c.kv_heads,
                                                                 .head_dim = c.head_dim,
                                                                 .size = 8192,
                                                                 .page_size = c.page_size,
                                                                 .dtype = c.kv_dtype})
                          .value());
    backend_ = std::move(create_attention_backend(c.backend, *platform_).value());
    layer_ = {.layer_id = 1,
              .num_heads = c.heads,
              .num_kv_heads = c.kv_heads,
              .head_dim = c.head_dim,
              .scaling = 1.0f / std::sqrt(float(c.head_dim))};
  }

  int64_t kv_row() const { return int64_t{GetParam().kv_heads} * GetParam().head_dim; }
  int64_t q_row() const { return int64_t{GetParam().heads} * GetParam().head_dim; }

  std::vector<float> random(size_t n) {
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v)
      x = d(rng_);
    return v;
  }

  // K/V values exactly representable in the cache dtype, so the pool stores them unchanged.
  std::vector<float> random_kv(size_t n) {
    std::vector<float> v = random(n);
    for (auto& x : v)
      x = through(GetParam().kv_dtype, x);
    return v;
  }

  // out[t] for query row `q` over reference K/V positions [0, visible), or with a window_left
  // w >= 0 over [visible - 1 - w, visible); scores soft-capped by `softcap` > 0.
  void reference(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                 int32_t visible, float* out, int32_t window_left = -1, double softcap = 0) const {
    const Case& c = GetParam();
    const int32_t group = c.heads / c.kv_heads;
    const int32_t first = window_left >= 0 ? std::max(0, visible - 1 - window_left) : 0;
    for (int32_t h = 0; h < c.heads; ++h) {
      const int32_t g = h / group;
      std::vector<double> s;
      double mx = -INFINITY;
      for (int32_t j = first; j < visible; ++j) {
        double dot = 0;
        for (int32_t d = 0; d < c.head_dim; ++d) {
          dot += double(q[h * c.head_dim + d]) * k[j * kv_row() + g * c.head_dim + d];
        }
        double x = dot * layer_.scaling;
        if (softcap > 0) x = softcap * std::tanh(x / softcap);
        s.push_back(x);
        mx = std::max(mx, x);
      }
      double sum = 0;
      for (auto& x : s)
        sum += x = std::exp(x - mx);
      for (int32_t d = 0; d < c.head_dim; ++d) {
        double acc = 0;
        for (int32_t j = first; j < visible; ++j) {
          acc += s[j - first] * v[j * kv_row() + g * c.head_dim + d];
        }
        out[h * c.head_dim + d] = visible == 0 ? 0.0f : static_cast<float>(acc / sum);
      }
    }
  }

  // Extend with cached prefixes, then one decode step, with `layer_`'s window and soft-cap.
  void extend_with_prefixes_then_decode();

  void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = std::max(worst, double(std::fabs(got[i] - want[i])));
    EXPECT_LT(worst, 2e-5) << "max abs error";
  }

  std::mt19937 rng_{12345};
  std::unique_ptr<platform::Platform> platform_;
  std::unique_ptr<mem::MHATokenToKVPool> pool_;
  std::unique_ptr<AttentionBackend> backend_;
  AttentionLayer layer_;
};

void AttentionTest::extend_with_prefixes_then_decode() {
  const int32_t ps = GetParam().page_size;
  const int32_t wl = layer_.window_left;
  const double cap = layer_.logit_softcap;
  mem::ReqToTokenPool rows(8, 1024);
  auto alloc = mem::make_allocator(8192, ps);
  mem::ChunkCache cache(rows, *alloc);
  const mem::KvMemory memory{rows, *alloc, cache};
  // Prefix lengths on, before and after page boundaries; extends of various lengths.
  const std::vector<int32_t> prefix = {0, ps - 1, ps, ps + 1, 2 * ps + 3, 5};
  const std::vector<int32_t> extend = {7, 1, ps, 3, 20, 1};
  const size_t bs = prefix.size();
  std::vector<KvReqState> kv(bs);
  std::vector<std::vector<float>> keys(bs);  // per request, [positions, kv_heads, dim]
  std::vector<std::vector<float>> values(bs);

  // 1. The prefixes: computed by an earlier forward (stored straight into the pool here).
  for (size_t b = 0; b < bs; ++b) {
    const int32_t total = prefix[b] + extend[b] + 1;  // +1 for the decode step
    keys[b] = random_kv(total * kv_row());
    values[b] = random_kv(total * kv_row());
    if (prefix[b] == 0) continue;
    KvReqState* p = &kv[b];
    int32_t seq = prefix[b];
    std::vector<int32_t> loc;
    ASSERT_TRUE(mem::alloc_for_extend(memory, std::span(&p, 1), std::span(&seq, 1), loc).is_ok());
    pool_->set_kv_buffer(1, TensorView(loc.data(), DType::kI32, {seq}),
                         TensorView(keys[b].data(), DType::kF32, {seq, kv_row()}),
                         TensorView(values[b].data(), DType::kF32, {seq, kv_row()}));
    cache.cache_unfinished_req(kv[b], std::vector<int32_t>(seq, 7));  // prefix_indices = row
  }

  // 2. One batched extend over all requests.
  std::vector<KvReqState*> ptrs;
  std::vector<int32_t> seq_lens;
  std::vector<mem::ForwardRequest> fwd;
  for (size_t b = 0; b < bs; ++b) {
    ptrs.push_back(&kv[b]);
    seq_lens.push_back(prefix[b] + extend[b]);
  }
  std::vector<int32_t> loc;
  ASSERT_TRUE(mem::alloc_for_extend(memory, ptrs, seq_lens, loc).is_ok());
  for (size_t b = 0; b < bs; ++b) {
    fwd.push_back({kv[b].row, prefix[b], std::vector<int32_t>(extend[b], 1)});
  }
  mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, loc, rows);
  batch.kv_pool = pool_.get();
  const int64_t n = batch.num_tokens();
  std::vector<float> q = random(n * q_row());
  std::vector<float> k(n * kv_row()), v(n * kv_row()), out(n * q_row(), NAN), want(n * q_row());
  for (size_t b = 0; b < bs; ++b) {
    for (int32_t i = 0; i < extend[b]; ++i) {
      const int64_t t = batch.extend_start_loc[b] + i;
      std::copy_n(&keys[b][(prefix[b] + i) * kv_row()], kv_row(), &k[t * kv_row()]);
      std::copy_n(&values[b][(prefix[b] + i) * kv_row()], kv_row(), &v[t * kv_row()]);
      reference(&q[t * q_row()], keys[b], values[b], prefix[b] + i + 1, &want[t * q_row()], wl,
                cap);
    }
  }
  ASSERT_TRUE(backend_->init_forward_metadata(batch).is_ok());
  ASSERT_TRUE(
      backend_
          ->forward({.q = q.data(), .k = k.data(), .v = v.data(), .out = out.data()}, layer_, batch)
          .is_ok());
  expect_close(out, want);

  // 3. One decode step for every request.
  std::vector<int32_t> dloc;
  ASSERT_TRUE(mem::alloc_for_decode(memory, ptrs, dloc).is_ok());
  fwd.clear();
  for (size_t b = 0; b < bs; ++b)
    fwd.push_back({kv[b].row, seq_lens[b], {1}});
  batch = mem::make_forward_batch(mem::ForwardMode::kDecode, fwd, dloc, rows);
  batch.kv_pool = pool_.get();
  q = random(bs * q_row());
  k.assign(bs * kv_row(), 0);
  v.assign(bs * kv_row(), 0);
  out.assign(bs * q_row(), NAN);
  want.assign(bs * q_row(), 0);
  for (size_t b = 0; b < bs; ++b) {
    std::copy_n(&keys[b][seq_lens[b] * kv_row()], kv_row(), &k[b * kv_row()]);
    std::copy_n(&values[b][seq_lens[b] * kv_row()], kv_row(), &v[b * kv_row()]);
    reference(&q[b * q_row()], keys[b], values[b], seq_lens[b] + 1, &want[b * q_row()], wl, cap);
  }
  ASSERT_TRUE(backend_->init_forward_metadata(batch).is_ok());
  ASSERT_TRUE(
      backend_
          ->forward({.q = q.data(), .k = k.data(), .v = v.data(), .out = out.data()}, layer_, batch)
          .is_ok());
  expect_close(out, want);
}

TEST_P(AttentionTest, ExtendWithPrefixesThenDecode) {
  extend_with_prefixes_then_decode();
}

// Sliding windows of 0 (the token itself), 1, a few tokens and longer than any sequence here,
// each with and without soft-capping; and soft-capping alone. The prefixes of the test put the
// window's edge before, inside and after the cached part, on and off page boundaries.
TEST_P(AttentionTest, SlidingWindowAndSoftcap) {
  for (const int32_t window_left : {-1, 0, 1, 5, 17, 4096}) {
    for (const float softcap : {0.0f, 0.5f, 30.0f}) {
      if (window_left < 0 && softcap == 0) continue;  // ExtendWithPrefixesThenDecode
      SCOPED_TRACE(testing::Message() << "window_left " << window_left << " softcap " << softcap);
      layer_.window_left = window_left;
      layer_.logit_softcap = softcap;
      extend_with_prefixes_then_decode();
      if (HasFatalFailure()) return;
    }
  }
}

TEST_P(AttentionTest, CrossAttentionOverEncoderRegions) {
  const int32_t ps = GetParam().page_size;
  mem::ReqToTokenPool rows(8, 2048);
  auto alloc = mem::make_allocator(8192, ps);
  mem::ChunkCache cache(rows, *alloc);
  const mem::KvMemory memory{rows, *alloc, cache};
  const std::vector<int32_t> enc = {3 * ps + 5, 0, 1, ps};  // 0: a text-only request
  const std::vector<int32_t> dec = {2, 3, 1, 4};
  const size_t bs = enc.size();
  for (const mem::EncoderKvLayout layout :
       {mem::EncoderKvLayout::kAligned, mem::EncoderKvLayout::kRagged}) {
    std::vector<KvReqState> kv(bs);
    std::vector<KvReqState*> ptrs;
    std::vector<int32_t> seq;
    std::vector<int32_t> starts;
    for (size_t b = 0; b < bs; ++b) {
      ptrs.push_back(&kv[b]);
      starts.push_back(mem::encoder_reserved_len(enc[b], ps, layout));
      seq.push_back(starts.back() + dec[b]);
    }
    std::vector<int32_t> loc;
    ASSERT_TRUE(mem::alloc_for_extend(memory, ptrs, seq, loc).is_ok());
    std::vector<mem::EncDecRow> er;
    for (size_t b = 0; b < bs; ++b)
      er.push_back({kv[b].row, enc[b], dec[b]});
    std::vector<int32_t> enc_loc, dec_loc;
    mem::split_encoder_decoder_loc(loc, er, ps, layout, enc_loc, dec_loc);
    std::vector<mem::ForwardRequest> fwd;
    for (size_t b = 0; b < bs; ++b)
      fwd.push_back({kv[b].row, 0, std::vector<int32_t>(dec[b], 1), starts[b]});
    mem::ForwardBatch batch =
        mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, dec_loc, rows);
    batch.kv_pool = pool_.get();
    batch.encoder_lens = enc;
    batch.encoder_out_cache_loc = enc_loc;
    const int64_t n = batch.num_tokens();
    const auto total_enc = static_cast<int64_t>(enc_loc.size());
    std::vector<float> ek = random_kv(total_enc * kv_row()), ev = random_kv(total_enc * kv_row());
    std::vector<float> q = random(n * q_row()), out(n * q_row(), NAN), want(n * q_row());
    int64_t e0 = 0;
    for (size_t b = 0; b < bs; ++b) {
      const std::vector<float> kb(ek.begin() + e0 * kv_row(),
                                  ek.begin() + (e0 + enc[b]) * kv_row());
      const std::vector<float> vb(ev.begin() + e0 * kv_row(),
                                  ev.begin() + (e0 + enc[b]) * kv_row());
      for (int32_t i = 0; i < dec[b]; ++i) {
        const int64_t t = batch.extend_start_loc[b] + i;
        reference(&q[t * q_row()], kb, vb, enc[b], &want[t * q_row()]);  // non-causal: all
      }
      e0 += enc[b];
    }
    AttentionLayer cross = layer_;
    cross.is_cross_attention = true;
    ASSERT_TRUE(backend_->init_forward_metadata(batch).is_ok());
    ASSERT_TRUE(backend_
                    ->forward({.q = q.data(), .k = ek.data(), .v = ev.data(), .out = out.data()},
                              cross, batch)
                    .is_ok());
    expect_close(out, want);
    // A later forward reads the cached encoder K/V (no encoder slots: nothing stored, k and v
    // not read).
    mem::ForwardBatch cached = batch;
    cached.encoder_out_cache_loc.clear();
    out.assign(out.size(), NAN);
    ASSERT_TRUE(backend_->init_forward_metadata(cached).is_ok());
    ASSERT_TRUE(
        backend_
            ->forward({.q = q.data(), .k = nullptr, .v = nullptr, .out = out.data()}, cross, cached)
            .is_ok());
    expect_close(out, want);
    for (auto& r : kv)
      mem::release_kv_cache(memory, r, {}, false);
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const std::string backend : {"native", "cpu"}) {
    for (const int32_t ps : {1, 16, 64, 128}) {
      for (const auto& [h, kvh] : {std::pair{8, 8}, std::pair{8, 2}, std::pair{8, 1}}) {
        out.push_back({backend, ps, h, kvh, 64, DType::kF32});
      }
    }
    out.push_back({backend, 16, 8, 2, 128, DType::kF32});
    out.push_back({backend, 16, 8, 2, 128, DType::kBF16});
    out.push_back({backend, 1, 4, 4, 64, DType::kFP8E4M3});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, AttentionTest, testing::ValuesIn(cases()), case_name);

TEST(AttentionRegistry, NamesAndErrors) {
  auto cpu = std::move(platform::create_platform(Device{}).value());
  EXPECT_EQ(default_attention_backend(DeviceKind::kCpu), AttentionBackendKind::kCpu);
  EXPECT_EQ(default_attention_backend(DeviceKind::kCuda), AttentionBackendKind::kCudaPaged);
  EXPECT_EQ(attention_backend_names(DeviceKind::kCpu), (std::vector<std::string>{"cpu", "native"}));
  EXPECT_TRUE(create_attention_backend("native", *cpu).is_ok());
  const auto bad = create_attention_backend("flashinfer", *cpu);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cpu, native, cuda-paged, cuda-ragged"), std::string::npos)
      << bad.status().message();
  // A backend of another device is refused by kind, not created.
  const auto elsewhere = create_attention_backend(AttentionBackendKind::kCudaPaged, *cpu);
  ASSERT_FALSE(elsewhere.is_ok());
  EXPECT_EQ(elsewhere.status().code(), StatusCode::kUnimplemented);
  // Every name of the table parses back to its kind.
  for (const AttentionCapabilities& c : attention_backend_table()) {
    EXPECT_EQ(parse_attention_backend(c.name).value(), c.kind) << c.name;
    EXPECT_EQ(attention_backend_name(c.kind), c.name);
  }
}

}  // namespace
}  // namespace kvserve::attention

// cuda-paged prefill attention (the tensor-core kernels) against the float64 reference
// (ops::reference::paged_prefill) on a fragmented pool: ragged batches of 1, 3 and 7 requests
// (new tokens 1 / 17 / 300 after cached prefixes 0 / 17 / 1000), page sizes 1..128 and contiguous
// K/V, GQA groups 1 / 4 / 8, head_dim 64 and 128 (80, 96 and 256 on a sample), causal and not
// (with empty KV), every mma.sync tile variant and the sm_90a kernel (on a Hopper device, where
// the test checks that it ran); and the
// cuda-paged backend's extend output against the per-token decode path it replaced. The same for
// an fp8 KV cache (e4m3 / e5m2, scales that are not 1): the kernel against the reference on the
// dequantised fp8 values (the bf16 bound), and the backend's two paths over an fp8 pool whose
// layer scales were set. Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>

#include "kvserve/attention/cuda_backends.h"
#include "kvserve/bench/attention.h"
#include "kvserve/core/dtype.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "kvserve/platform/platform.h"
#include "support/cuda_param_test.h"

namespace kvserve {
namespace {

std::unique_ptr<platform::Platform> cuda_or_null() {
  auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
  return p.is_ok() ? std::move(p).value() : nullptr;
}

// `elems` bf16 values drawn from `normal` with `rng`, in a new device buffer.
Buffer upload_normal_bf16(platform::Platform& cuda, std::mt19937& rng,
                          std::normal_distribution<float>& normal, int64_t elems) {
  std::vector<uint16_t> h(static_cast<size_t>(elems));
  for (auto& x : h)
    x = float_to_bf16(normal(rng));
  auto buf = std::move(cuda.allocate_buffer(h.size() * 2).value());
  cuda.copy(buf.data(), h.data(), h.size() * 2, platform::CopyKind::kHostToDevice);
  return buf;
}

struct Case {
  int32_t page_size;
  int32_t group;
  int32_t head_dim;
  bool causal;
  std::string variant;
  bool contiguous = false;  // page_ids null, page_size 1
};

using PagedPrefillTest = test_support::CudaParamTest<Case>;

TEST_P(PagedPrefillTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  struct Shape {
    std::vector<int32_t> q_lens, prefix_lens;
  };
  const std::vector<Shape> shapes = {
      {{300}, {1000}},
      {{1, 17, 300}, {17, 1000, 0}},
      {{17, 300, 1, 300, 17, 1, 300}, {0, 17, 1000, 1000, 1000, 0, 17}},
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    bench::AttentionBenchConfig cfg = test_support::check_config(c.page_size, c.group, c.head_dim);
    cfg.mode = "prefill";
    cfg.variant = c.variant;
    cfg.causal = c.causal;
    cfg.contiguous = c.contiguous;
    cfg.check_max_work = 1e9;
    cfg.seed = 31 + c.page_size + 100 * c.group + c.head_dim + 7 * i;
    cfg.q_lens = shapes[i].q_lens;
    // Causal: the prefix and the new tokens; not causal (cross-attention): the prefix alone is
    // the KV, so prefix 0 is the empty-KV case.
    for (size_t b = 0; b < cfg.q_lens.size(); ++b) {
      cfg.kv_lens.push_back(shapes[i].prefix_lens[b] + (c.causal ? cfg.q_lens[b] : 0));
    }
    const auto r = bench::run_attention_bench(*cuda_, cfg);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    // The sm_90a kernel must not be quietly replaced by the fallback where it can run.
    if ((c.variant == "sm90" || c.variant == "sm90pp") && ops::prefill_sm90_device(*cuda_)) {
      EXPECT_EQ(r->variant, c.variant);
    }
    // bf16 P in the P V product adds a few bf16 ulps at most. The bound is in ulps of the
    // reference value: an absolute bound fails on outputs of magnitude 2-4, where one bf16 ulp is
    // already 0.0156 (seen on the H200: 0.0103 abs = 2.3 ulp).
    EXPECT_LE(r->max_ulp_err, 8.0) << "shape " << i << " seed " << cfg.seed << " kernel "
                                   << r->variant << " abs " << r->max_abs_err;
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const int32_t ps : {1, 16, 64, 128}) {
    for (const int32_t group : {1, 4, 8}) {
      for (const int32_t d : {64, 128}) {
        for (const bool causal : {true, false}) {
          for (const char* v : {"m64w4", "m128w8", "m128w4", "sm90"})
            out.push_back({ps, group, d, causal, v});
        }
      }
    }
  }
  // Odd groups once each.
  out.push_back({16, 3, 128, true, "auto"});
  out.push_back({32, 7, 64, true, "auto"});
  // Head dims 80 and 96 (128-element shared-memory rows) and 256 (Q re-read from shared memory;
  // m128w4 runs as m128w8): every variant on a sample of page sizes and groups.
  for (const int32_t d : {80, 96, 256}) {
    for (const char* v : {"m64w4", "m128w8", "m128w4"}) {
      out.push_back({16, 4, d, true, v});
      out.push_back({1, 1, d, false, v});
    }
    out.push_back({128, 8, d, true, "auto"});
  }
  // The sm_90a kernel at head dim 256 (64-position K/V tiles, two stages).
  for (const int32_t ps : {1, 16, 64}) {
    for (const int32_t group : {1, 4, 8})
      out.push_back({ps, group, 256, ps != 16, "sm90"});
  }
  // The sm_90a kernel's TMA boxes at page 32 (pages 16, 64, 128 and contiguous K/V above; the
  // backend's smallest paged size for them is 16, page 1 gathers by cp.async).
  for (const int32_t d : {64, 128, 256}) {
    out.push_back({32, 4, d, true, "sm90"});
    out.push_back({32, 1, d, false, "sm90"});
  }
  // Ping-pong consumers: a sample of page sizes, groups and head dims.
  for (const int32_t d : {64, 128, 256}) {
    out.push_back({16, 4, d, true, "sm90pp"});
    out.push_back({1, 8, d, false, "sm90pp"});
    out.push_back({1, 1, d, true, "sm90pp", true});
  }
  // Contiguous K/V (no page list): both kernels.
  for (const int32_t group : {1, 4, 8}) {
    for (const int32_t d : {64, 128, 256}) {
      for (const bool causal : {true, false}) {
        out.push_back({1, group, d, causal, "sm90", true});
        out.push_back({1, group, d, causal, "mma", true});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, PagedPrefillTest, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.contiguous ? "contig" : "ps") +
                                  std::to_string(i.param.page_size) + "_g" +
                                  std::to_string(i.param.group) + "_d" +
                                  std::to_string(i.param.head_dim) +
                                  (i.param.causal ? "_causal_" : "_full_") + i.param.variant;
                         });

// The backend's extend output with the prefill kernel equals the per-token decode path.
class CudaPagedBackendPrefill : public testing::TestWithParam<DType> {};

TEST_P(CudaPagedBackendPrefill, ExtendMatchesPerTokenDecode) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const DType kv_dtype = GetParam();
  constexpr int32_t kHeads = 8, kKvHeads = 2, kDim = 128;
  for (const int32_t ps : {1, 16, 64}) {
    auto pool = std::move(mem::MHATokenToKVPool::create(*cuda, {.num_layers = 1,
                                                                .num_kv_heads = kKvHeads,
                                                                .head_dim = kDim,
                                                                .size = 16384,
                                                                .page_size = ps,
                                                                .dtype = kv_dtype})
                              .value());
    // fp8: the store divides by these and both kernels multiply back.
    if (is_float8(kv_dtype)) pool->set_kv_scales(0, 0.29f, 1.3f);
    mem::ReqToTokenPool rows(8, 4096);
    auto mirror = std::move(mem::DeviceReqToToken::create(*cuda, rows).value());
    auto alloc = mem::make_allocator(16384, ps);
    mem::ChunkCache cache(rows, *alloc);
    const mem::KvMemory memory{rows, *alloc, cache};
    auto with_prefill = attention::make_cuda_paged_backend(*cuda);
    auto per_token = attention::make_cuda_paged_backend(*cuda, {.prefill_kernel = false});
    const attention::AttentionLayer layer{.layer_id = 0,
                                          .num_heads = kHeads,
                                          .num_kv_heads = kKvHeads,
                                          .head_dim = kDim,
                                          .scaling = 1.0f / std::sqrt(float(kDim))};
    std::mt19937 rng(ps);
    std::normal_distribution<float> normal(0.f, 1.f);
    // Device activations: q/out [n, heads, dim], k/v [n, kv_heads, dim], bf16.
    auto upload = [&](int64_t elems) { return upload_normal_bf16(*cuda, rng, normal, elems); };
    auto run = [&](attention::AttentionBackend& backend, const mem::ForwardBatch& batch,
                   const Buffer& q, const Buffer& k, const Buffer& v) {
      const int64_t n = batch.num_tokens();
      auto out = std::move(cuda->allocate_buffer(n * kHeads * kDim * 2).value());
      KV_CHECK(backend.init_forward_metadata(batch).is_ok());
      const attention::AttentionIO io{
          .q = q.data(), .k = k.data(), .v = v.data(), .out = out.data(), .dtype = DType::kBF16};
      attention::store_kv(backend, io, layer, batch);
      KV_CHECK(backend.forward(io, layer, batch).is_ok());
      std::vector<uint16_t> h(static_cast<size_t>(n * kHeads * kDim));
      cuda->copy(h.data(), out.data(), h.size() * 2, platform::CopyKind::kDeviceToHost);
      cuda->synchronize();
      return h;
    };

    const std::vector<int32_t> prefix = {0, 17, 1000, 5};
    const std::vector<int32_t> extend = {300, 17, 1, 64};
    std::vector<mem::KvReqState> kv(prefix.size());
    // 1. The prefixes, stored by an earlier extend.
    {
      std::vector<mem::KvReqState*> ptrs;
      std::vector<int32_t> seq;
      std::vector<mem::ForwardRequest> fwd;
      for (size_t b = 0; b < prefix.size(); ++b) {
        if (prefix[b] == 0) continue;
        ptrs.push_back(&kv[b]);
        seq.push_back(prefix[b]);
      }
      std::vector<int32_t> loc;
      ASSERT_TRUE(mem::alloc_for_extend(memory, ptrs, seq, loc).is_ok());
      for (size_t i = 0; i < ptrs.size(); ++i)
        fwd.push_back({ptrs[i]->row, 0, std::vector<int32_t>(seq[i], 1)});
      mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, loc, rows);
      batch.kv_pool = pool.get();
      batch.req_to_token_device = mirror.get();
      const int64_t n = batch.num_tokens();
      run(*with_prefill, batch, upload(n * kHeads * kDim), upload(n * kKvHeads * kDim),
          upload(n * kKvHeads * kDim));
      for (size_t i = 0; i < ptrs.size(); ++i)
        cache.cache_unfinished_req(*ptrs[i], std::vector<int32_t>(seq[i], 1));
    }
    // 2. One extend over every request, through both paths.
    std::vector<mem::KvReqState*> ptrs;
    std::vector<int32_t> seq;
    std::vector<mem::ForwardRequest> fwd;
    for (size_t b = 0; b < prefix.size(); ++b) {
      ptrs.push_back(&kv[b]);
      seq.push_back(prefix[b] + extend[b]);
    }
    std::vector<int32_t> loc;
    ASSERT_TRUE(mem::alloc_for_extend(memory, ptrs, seq, loc).is_ok());
    for (size_t b = 0; b < prefix.size(); ++b)
      fwd.push_back({kv[b].row, prefix[b], std::vector<int32_t>(extend[b], 1)});
    mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, loc, rows);
    batch.kv_pool = pool.get();
    batch.req_to_token_device = mirror.get();
    const int64_t n = batch.num_tokens();
    const Buffer q = upload(n * kHeads * kDim), k = upload(n * kKvHeads * kDim),
                 v = upload(n * kKvHeads * kDim);
    const std::vector<uint16_t> got = run(*with_prefill, batch, q, k, v);
    const std::vector<uint16_t> want = run(*per_token, batch, q, k, v);
    // The two kernels sum in different orders, so bf16 outputs may differ by rounding: measure
    // in bf16 ulps (2^(exponent - 7)) of the larger magnitude, at least 1.0 (the scale of V):
    // outputs near zero come from cancellation and carry the absolute error of the inputs' scale
    // (the H200 run saw 0.0156 at most = one ulp at magnitude 2-4, and 176 "ulps" near zero when
    // the floor was 1e-3).
    double worst_ulp = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double a = bf16_to_float(got[i]), b = bf16_to_float(want[i]);
      const double mag = std::max({std::abs(a), std::abs(b), 1.0});
      const double ulp = std::ldexp(1.0, std::ilogb(mag) - 7);
      const double d = std::abs(a - b) / ulp;
      worst_ulp = std::max(worst_ulp, std::isnan(d) ? INFINITY : d);
    }
    EXPECT_LE(worst_ulp, 2.0) << "page size " << ps << " KV " << dtype_name(kv_dtype);
    for (auto& r : kv)
      mem::release_kv_cache(memory, r, {}, false);
  }
}

// A fresh prefill (no request with cached positions) whose caller kept its k / v rows
// (AttentionIO::new_kv_rows) is read from those rows in the kernels' contiguous mode: the output
// equals the read through the pool bit for bit (same values, same tiles), for cuda-paged at pages
// 1 / 16 / 64 and for cuda-ragged; and the rows are what it reads (rows changed after the store
// change the output, the pool read does not see them).
TEST(CudaPagedBackendFreshPrefill, ReadsTheNewRowsLikeThePool) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  constexpr int32_t kHeads = 32, kKvHeads = 8, kDim = 128;
  const std::vector<int32_t> lens = {700, 17, 1, 300, 129};
  for (const bool ragged : {false, true}) {
    for (const int32_t ps : {1, 16, 64}) {
      if (ragged && ps != 1) continue;
      SCOPED_TRACE(std::string(ragged ? "cuda-ragged" : "cuda-paged") + " page " +
                   std::to_string(ps));
      auto pool = std::move(mem::MHATokenToKVPool::create(*cuda, {.num_layers = 1,
                                                                  .num_kv_heads = kKvHeads,
                                                                  .head_dim = kDim,
                                                                  .size = 8192,
                                                                  .page_size = ps,
                                                                  .dtype = DType::kBF16})
                                .value());
      mem::ReqToTokenPool rows(8, 2048);
      auto mirror = std::move(mem::DeviceReqToToken::create(*cuda, rows).value());
      auto alloc = mem::make_allocator(8192, ps);
      mem::ChunkCache cache(rows, *alloc);
      const mem::KvMemory memory{rows, *alloc, cache};
      auto backend = ragged ? attention::make_cuda_ragged_backend(*cuda)
                            : attention::make_cuda_paged_backend(*cuda);
      const attention::AttentionLayer layer{.layer_id = 0,
                                            .num_heads = kHeads,
                                            .num_kv_heads = kKvHeads,
                                            .head_dim = kDim,
                                            .scaling = 1.0f / std::sqrt(float(kDim))};
      std::vector<mem::KvReqState> kv(lens.size());
      std::vector<mem::KvReqState*> ptrs;
      std::vector<mem::ForwardRequest> fwd;
      for (auto& r : kv)
        ptrs.push_back(&r);
      std::vector<int32_t> loc;
      ASSERT_TRUE(mem::alloc_for_extend(memory, ptrs, lens, loc).is_ok());
      for (size_t b = 0; b < lens.size(); ++b)
        fwd.push_back({kv[b].row, 0, std::vector<int32_t>(lens[b], 1)});
      mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, loc, rows);
      batch.kv_pool = pool.get();
      batch.req_to_token_device = mirror.get();
      const int64_t n = batch.num_tokens();
      const uint32_t seed = 7 + ps + (ragged ? 100 : 0);
      std::cout << "[ seed     ] " << seed << "\n";
      std::mt19937 rng(seed);
      std::normal_distribution<float> normal(0.f, 1.f);
      auto upload = [&](int64_t elems) { return upload_normal_bf16(*cuda, rng, normal, elems); };
      const Buffer q = upload(n * kHeads * kDim), k = upload(n * kKvHeads * kDim),
                   v = upload(n * kKvHeads * kDim);
      KV_CHECK(backend->init_forward_metadata(batch).is_ok());
      attention::AttentionIO io{
          .q = q.data(), .k = k.data(), .v = v.data(), .out = nullptr, .dtype = DType::kBF16};
      attention::store_kv(*backend, io, layer, batch);
      auto forward = [&](bool new_rows) {
        auto out = std::move(cuda->allocate_buffer(n * kHeads * kDim * 2).value());
        io.out = out.data();
        io.new_kv_rows = new_rows;
        KV_CHECK(backend->forward(io, layer, batch).is_ok());
        std::vector<uint16_t> h(static_cast<size_t>(n * kHeads * kDim));
        cuda->copy(h.data(), out.data(), h.size() * 2, platform::CopyKind::kDeviceToHost);
        cuda->synchronize();
        return h;
      };
      const std::vector<uint16_t> from_pool = forward(false);
      const std::vector<uint16_t> from_rows = forward(true);
      EXPECT_TRUE(from_rows == from_pool);
      // Scale the rows' V after the store: the output from the rows moves, the pool's does not.
      std::vector<uint16_t> hv(static_cast<size_t>(n * kKvHeads * kDim));
      cuda->copy(hv.data(), v.data(), hv.size() * 2, platform::CopyKind::kDeviceToHost);
      for (auto& x : hv)
        x = float_to_bf16(2.0f * bf16_to_float(x));
      cuda->copy(const_cast<void*>(v.data()), hv.data(), hv.size() * 2,
                 platform::CopyKind::kHostToDevice);
      EXPECT_FALSE(forward(true) == from_pool);
      EXPECT_TRUE(forward(false) == from_pool);
      for (auto& r : kv)
        mem::release_kv_cache(memory, r, {}, false);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, CudaPagedBackendPrefill,
                         testing::Values(DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2),
                         [](const testing::TestParamInfo<DType>& i) {
                           return std::string(dtype_name(i.param));
                         });

// --- an fp8 KV cache: the kernel against the reference on the dequantised values -------------
struct Fp8Case {
  test_support::Fp8GridPoint kv;
  bool causal;
};

using PagedPrefillFp8Test = test_support::CudaParamTest<Fp8Case>;

TEST_P(PagedPrefillFp8Test, MatchesFloat64ReferenceOnDequantisedValues) {
  const Fp8Case f = GetParam();
  const test_support::Fp8GridPoint& c = f.kv;
  // Ragged: new tokens after cached prefixes (odd lengths), one request with no prefix; not
  // causal, a request with prefix 0 has no KV at all (the empty-KV rows).
  const std::vector<int32_t> q_lens = {17, 300, 1, 33, 129};
  const std::vector<int32_t> prefix_lens = {0, 1000, 17, 65, 0};
  for (const char* variant : {"m64w4", "m128w8", "m128w4"}) {
    bench::AttentionBenchConfig cfg = test_support::check_config(c.page_size, c.group, c.head_dim);
    cfg.mode = "prefill";
    cfg.variant = variant;
    cfg.kv_dtype = c.dtype;
    cfg.k_scale = 0.061f;
    cfg.v_scale = 1.9f;
    cfg.causal = f.causal;
    cfg.check_max_work = 1e9;
    cfg.seed = 7031 + c.page_size + 100 * c.group + c.head_dim + (f.causal ? 1 : 0) +
               (c.dtype == DType::kFP8E5M2 ? 30000 : 0);
    cfg.q_lens = q_lens;
    for (size_t b = 0; b < q_lens.size(); ++b)
      cfg.kv_lens.push_back(prefix_lens[b] + (f.causal ? q_lens[b] : 0));
    std::cout << "[ seed     ] " << cfg.seed << " variant " << variant << std::endl;
    const auto r = bench::run_attention_bench(*cuda_, cfg);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    // The bf16 cases' bound (the reference is exact with respect to quantisation).
    EXPECT_LE(r->max_ulp_err, 8.0)
        << "seed " << cfg.seed << " kernel " << r->variant << " abs " << r->max_abs_err;
  }
}

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> out;
  for (const test_support::Fp8GridPoint& kv : test_support::fp8_grid()) {
    for (const bool causal : {true, false})
      out.push_back({kv, causal});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fp8, PagedPrefillFp8Test, testing::ValuesIn(fp8_cases()),
                         [](const testing::TestParamInfo<Fp8Case>& i) {
                           return test_support::fp8_grid_name(i.param.kv) +
                                  (i.param.causal ? "_causal" : "_full");
                         });

}  // namespace
}  // namespace kvserve

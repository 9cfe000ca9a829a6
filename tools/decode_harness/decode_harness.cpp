// Old-vs-new timing of the tensor-core paged decode kernel (docs/perf/2026-12-03-decode-small-
// batch.md): main's kernel and plan (old_decode.cu) against this branch's (the last-block merge
// through split counters, the one-wave plan), on one shuffled bf16 pool, GQA 32/8, head_dim 128,
// against the copy bandwidth measured in the same run (a 1 GiB device-to-device copy, as
// bench-attention, and a copy of the same bytes as the KV read). Each launch is timed alone
// between two events after 5 warm-ups (bench-attention's method); the median of `iters`.
// Usage: decode_harness [iters]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "harness_args.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/cuda/paged_decode_tc.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"

namespace {

using decode_harness::DecodeArgs;

#define CK(x)                                                                                 \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

constexpr int32_t kHq = 32, kHkv = 8, kHd = 128;
constexpr int64_t kRow = int64_t{kHkv} * kHd;
constexpr int64_t kPoolSlots = int64_t{64} * 4096 + 4096;  // 64 x 4096 positions and spare

int g_iters = 50;
cudaStream_t g_stream;
void* g_flush = nullptr;
constexpr size_t kFlushBytes = size_t{256} << 20;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds of one launch, the median over g_iters (flush: 256 MiB memset before each).
double time_us(const std::function<void()>& launch, bool flush) {
  for (int i = 0; i < 5; ++i)
    launch();
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(g_iters));
  for (auto& e : ev)
    CK(cudaEventCreate(&e));
  for (int i = 0; i < g_iters; ++i) {
    if (flush) CK(cudaMemsetAsync(g_flush, i & 1, kFlushBytes, g_stream));
    CK(cudaEventRecord(ev[2 * i], g_stream));
    launch();
    CK(cudaEventRecord(ev[2 * i + 1], g_stream));
  }
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaGetLastError());
  std::vector<double> us;
  for (int i = 0; i < g_iters; ++i) {
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
    us.push_back(ms * 1e3);
  }
  for (auto& e : ev)
    CK(cudaEventDestroy(e));
  return median(us);
}

// Copy bandwidth (bytes read + written per second, GB/s) of a device-to-device copy of `bytes`.
double copy_gbps(size_t bytes) {
  void *a = nullptr, *b = nullptr;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMemset(a, 1, bytes));
  const double us =
      time_us([&] { CK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, g_stream)); }, false);
  CK(cudaFree(a));
  CK(cudaFree(b));
  return 2.0 * static_cast<double>(bytes) / (us * 1e-6) / 1e9;
}

struct Pool {
  void* k = nullptr;
  void* v = nullptr;
  void* q = nullptr;
  void* out = nullptr;
  void* out_ref = nullptr;
  float* ws = nullptr;
  uint32_t* counters = nullptr;
};

struct Config {
  int32_t batch, len, page;
  bool flush;
  std::vector<int32_t> forced;  // extra split counts to time with this branch's kernel
};

size_t ws_floats(int32_t batch, int32_t splits) {
  return static_cast<size_t>(batch) * kHq * splits * (kHd + 1);
}

void run_config(const Pool& pool, const Config& c, int32_t num_sms, double copy_big) {
  std::mt19937_64 rng(1234 + c.batch * 7 + c.len + c.page);
  const int32_t pages_per = (c.len + c.page - 1) / c.page;
  const int32_t pool_pages = static_cast<int32_t>(kPoolSlots / c.page);
  std::vector<int32_t> all(static_cast<size_t>(pool_pages));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<int32_t> indptr(static_cast<size_t>(c.batch) + 1, 0), lens(c.batch, c.len);
  for (int32_t b = 0; b < c.batch; ++b)
    indptr[b + 1] = indptr[b] + pages_per;
  std::vector<int32_t> ids(all.begin(), all.begin() + indptr[c.batch]);
  int32_t *d_indptr, *d_ids, *d_lens;
  CK(cudaMalloc(&d_indptr, indptr.size() * 4));
  CK(cudaMalloc(&d_ids, ids.size() * 4));
  CK(cudaMalloc(&d_lens, lens.size() * 4));
  CK(cudaMemcpy(d_indptr, indptr.data(), indptr.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_ids, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d_lens, lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));

  DecodeArgs a;
  a.q = pool.q;
  a.k_cache = pool.k;
  a.v_cache = pool.v;
  a.page_indptr = d_indptr;
  a.page_ids = d_ids;
  a.seq_lens = d_lens;
  a.out = pool.out_ref;
  a.batch = c.batch;
  a.num_q_heads = kHq;
  a.num_kv_heads = kHkv;
  a.head_dim = kHd;
  a.page_size = c.page;
  a.max_seq_len = c.len;
  a.sm_scale = 1.0f / std::sqrt(float(kHd));

  const double kv_bytes = 2.0 * c.batch * double(c.len) * kRow * 2;
  const double copy_same = copy_gbps(static_cast<size_t>(kv_bytes));
  const size_t out_elems = static_cast<size_t>(c.batch) * kHq * kHd;
  auto report = [&](const char* what, int32_t splits, double us) {
    const double gbps = kv_bytes / (us * 1e-6) / 1e9;
    std::printf(
        "%4d x %5d ps%-3d %s %-22s splits %2d  %8.2f us  %7.1f GB/s  %5.1f %% copy(1GiB)  "
        "%5.1f %% copy(same bytes)\n",
        c.batch, c.len, c.page, c.flush ? "flush" : "warm ", what, splits, us, gbps,
        100.0 * gbps / copy_big, 100.0 * gbps / copy_same);
  };
  // main's kernel and plan.
  const decode_harness::OldPlan op = decode_harness::old_plan(a, num_sms);
  report("old (main)", op.num_splits,
         time_us([&] { decode_harness::old_decode(a, op, pool.ws, g_stream); }, c.flush));
  std::vector<uint16_t> ref(out_elems), got(out_elems);
  CK(cudaStreamSynchronize(g_stream));
  CK(cudaMemcpy(ref.data(), pool.out_ref, out_elems * 2, cudaMemcpyDeviceToHost));

  // This branch's kernel: planned, with counters and with the merge kernel; forced splits.
  auto new_params = [&](const kvserve::ops::PagedDecodePlan& plan, bool counters) {
    kvserve::ops::PagedDecodeParams p;
    p.q = a.q;
    p.k_cache = a.k_cache;
    p.v_cache = a.v_cache;
    p.page_indptr = a.page_indptr;
    p.page_ids = a.page_ids;
    p.seq_lens = a.seq_lens;
    p.out = pool.out;
    kvserve::ops::PagedDecodePlan sized = plan;
    sized.workspace_counters = counters ? static_cast<size_t>(c.batch) * kHkv : 0;
    const kvserve::ops::PagedDecodeWorkspace w =
        kvserve::ops::paged_decode_workspace(sized, pool.ws, pool.counters, kHd);
    p.partial_out = w.partial_out;
    p.partial_lse = w.partial_lse;
    p.split_counters = w.split_counters;
    p.batch = c.batch;
    p.num_q_heads = kHq;
    p.num_kv_heads = kHkv;
    p.head_dim = kHd;
    p.page_size = c.page;
    p.num_splits = plan.num_splits;
    p.tokens_per_split = plan.tokens_per_split;
    p.min_tokens_per_split = plan.min_tokens_per_split;
    p.sm_scale = a.sm_scale;
    return p;
  };
  auto run_new = [&](const char* what, const kvserve::ops::PagedDecodePlan& plan, bool counters) {
    const kvserve::ops::PagedDecodeParams p = new_params(plan, counters);
    const double us = time_us(
        [&] {
          kvserve::platform::cuda::paged_decode_tc(p, 3, kvserve::platform::StreamHandle{g_stream});
        },
        c.flush);
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaMemcpy(got.data(), pool.out, out_elems * 2, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (size_t i = 0; i < out_elems; ++i) {
      const double x = kvserve::bf16_to_float(got[i]), y = kvserve::bf16_to_float(ref[i]);
      worst = std::max(worst, std::isnan(x) ? INFINITY : std::abs(x - y));
    }
    report(what, plan.num_splits, us);
    std::printf("      max |new - old| %.3g\n", worst);
  };
  const kvserve::ops::PagedDecodePlan plan =
      kvserve::ops::plan_paged_decode_tc(c.batch, kHq, kHkv, kHd, c.len, num_sms, 3);
  run_new("new (planned)", plan, true);
  if (plan.num_splits > 1) run_new("new, merge kernel", plan, false);
  for (const int32_t s : c.forced) {
    kvserve::ops::PagedDecodePlan f = plan;
    f.num_splits = s;
    f.min_tokens_per_split = 2 * kvserve::ops::kDecodeTcTileTokens;
    f.tokens_per_split = (c.len + s - 1) / s;
    f.workspace_floats = ws_floats(c.batch, s);
    run_new(("new, forced " + std::to_string(s)).c_str(), f, true);
  }
  CK(cudaFree(d_indptr));
  CK(cudaFree(d_ids));
  CK(cudaFree(d_lens));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1) g_iters = std::max(5, std::atoi(argv[1]));
  CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
  int num_sms = 0;
  CK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device %s, %d SMs, L2 %d MiB, iters %d\n", prop.name, num_sms,
              prop.l2CacheSize >> 20, g_iters);
  Pool pool;
  const size_t kv_elems = static_cast<size_t>(kPoolSlots * kRow);
  CK(cudaMalloc(&pool.k, kv_elems * 2));
  CK(cudaMalloc(&pool.v, kv_elems * 2));
  {
    // 16 Mi random bf16 values (about normal(0, 1)), tiled over the pool.
    const size_t chunk = size_t{1} << 24;
    std::vector<uint16_t> h(chunk);
    std::mt19937_64 rng(42);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& x : h)
      x = kvserve::float_to_bf16(nd(rng));
    for (void* dst : {pool.k, pool.v}) {
      CK(cudaMemcpy(dst, h.data(), chunk * 2, cudaMemcpyHostToDevice));
      for (size_t off = chunk; off < kv_elems; off += chunk) {
        CK(cudaMemcpy(static_cast<uint16_t*>(dst) + off, dst, std::min(chunk, kv_elems - off) * 2,
                      cudaMemcpyDeviceToDevice));
      }
    }
    std::vector<uint16_t> q(static_cast<size_t>(64) * kHq * kHd);
    for (auto& x : q)
      x = kvserve::float_to_bf16(nd(rng));
    CK(cudaMalloc(&pool.q, q.size() * 2));
    CK(cudaMemcpy(pool.q, q.data(), q.size() * 2, cudaMemcpyHostToDevice));
  }
  CK(cudaMalloc(&pool.out, size_t{64} * kHq * kHd * 2));
  CK(cudaMalloc(&pool.out_ref, size_t{64} * kHq * kHd * 2));
  CK(cudaMalloc(&pool.ws, ws_floats(64, 64) * 4));
  CK(cudaMalloc(&pool.counters, size_t{64} * kHkv * 64 * 4));
  CK(cudaMemset(pool.counters, 0, size_t{64} * kHkv * 64 * 4));
  CK(cudaMalloc(&g_flush, kFlushBytes));
  const double copy_big = copy_gbps(size_t{1} << 30);
  std::printf("copy bandwidth (1 GiB device-to-device, read + write): %.1f GB/s\n", copy_big);

  std::vector<Config> configs;
  for (const int32_t ps : {1, 16, 64, 128})
    configs.push_back({1, 4096, ps, false, {16, 64}});
  for (const int32_t ps : {1, 16, 64, 128})
    configs.push_back({16, 4096, ps, false, {1, 3, 4}});
  configs.push_back({1, 4096, 16, true, {}});
  configs.push_back({16, 4096, 16, true, {1}});
  configs.push_back({1, 1024, 16, false, {}});
  configs.push_back({1, 16384, 16, false, {}});
  configs.push_back({4, 4096, 16, false, {}});
  configs.push_back({20, 4096, 16, false, {2, 3, 4}});
  configs.push_back({64, 1024, 16, false, {}});
  configs.push_back({64, 4096, 16, false, {}});
  for (const Config& c : configs)
    run_config(pool, c, num_sms, copy_big);
  // The counters must be zero after every launch with them.
  std::vector<uint32_t> cnt(size_t{64} * kHkv * 64);
  CK(cudaMemcpy(cnt.data(), pool.counters, cnt.size() * 4, cudaMemcpyDeviceToHost));
  size_t nonzero = 0;
  for (const uint32_t x : cnt)
    nonzero += x != 0;
  std::printf("split counters left nonzero: %zu\n", nonzero);
  return nonzero == 0 ? 0 : 1;
}

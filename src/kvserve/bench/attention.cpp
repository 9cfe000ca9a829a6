#include "kvserve/bench/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/paged_decode.h"

namespace kvserve::bench {
namespace {

// Device memory owned for the duration of the run.
struct DeviceBuffers {
  platform::Platform& p;
  std::vector<std::pair<void*, size_t>> owned;
  ~DeviceBuffers() {
    for (auto& [ptr, bytes] : owned)
      p.deallocate(ptr, bytes);
  }
  Result<void*> alloc(size_t bytes) {
    KV_ASSIGN_OR_RETURN(void* ptr, p.allocate(std::max<size_t>(bytes, 16)));
    owned.emplace_back(ptr, std::max<size_t>(bytes, 16));
    return ptr;
  }
  template <typename T>
  Result<void*> upload(const std::vector<T>& host) {
    KV_ASSIGN_OR_RETURN(void* ptr, alloc(host.size() * sizeof(T)));
    p.copy(ptr, host.data(), host.size() * sizeof(T), platform::CopyKind::kHostToDevice);
    return ptr;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

Result<AttentionBenchResult> run_attention_bench(platform::Platform& platform,
                                                 const AttentionBenchConfig& c) {
  if (c.backend != "cuda-paged") {
    return invalid_argument("--backend {}: bench-attention knows cuda-paged", c.backend);
  }
  if (platform.device().kind != DeviceKind::kCuda) {
    return invalid_argument("--backend cuda-paged needs --device cuda");
  }
  if (c.batch <= 0 || c.seq_len < 0 || c.num_kv_heads <= 0 || c.num_q_heads % c.num_kv_heads ||
      c.num_q_heads / c.num_kv_heads > 8 || (c.head_dim != 64 && c.head_dim != 128)) {
    return invalid_argument(
        "unsupported shape: batch {} heads {}/{} head_dim {} (group <= 8, head_dim 64 or 128)",
        c.batch, c.num_q_heads, c.num_kv_heads, c.head_dim);
  }
  const std::vector<int32_t> sizes = {1, 16, 32, 64, 128};
  if (std::find(sizes.begin(), sizes.end(), c.page_size) == sizes.end()) {
    return invalid_argument("--page-size {}: one of 1, 16, 32, 64, 128", c.page_size);
  }
  std::mt19937_64 rng(c.seed);
  const int32_t ps = c.page_size;
  std::vector<int32_t> seq_lens =
      c.seq_lens.empty() ? std::vector<int32_t>(c.batch, c.seq_len) : c.seq_lens;
  const auto batch = static_cast<int32_t>(seq_lens.size());
  const int32_t max_len = *std::max_element(seq_lens.begin(), seq_lens.end());
  std::vector<int32_t> indptr(batch + 1, 0);
  for (int32_t b = 0; b < batch; ++b)
    indptr[b + 1] = indptr[b] + (seq_lens[b] + ps - 1) / ps;
  const int64_t num_pages = indptr[batch] + 1;  // page 0: padding
  const int64_t slots = num_pages * ps;
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;

  // A fragmented pool: every request's pages are a random subset of the pool, in random order.
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages - 1));
  std::iota(page_ids.begin(), page_ids.end(), 1);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);

  std::normal_distribution<float> normal(0.f, 1.f);
  auto random_bf16 = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v)
      x = float_to_bf16(normal(rng));
    return v;
  };
  const std::vector<uint16_t> k = random_bf16(slots * row), v = random_bf16(slots * row);
  const std::vector<uint16_t> q =
      random_bf16(static_cast<int64_t>(batch) * c.num_q_heads * c.head_dim);

  ops::PagedDecodePlan plan =
      ops::plan_paged_decode(batch, c.num_q_heads, c.num_kv_heads, c.head_dim, max_len,
                             platform::cuda::multiprocessor_count());
  if (c.num_splits > 0) {
    plan.num_splits = c.num_splits;
    plan.tokens_per_split = std::max(1, (max_len + c.num_splits - 1) / c.num_splits);
    plan.workspace_floats = static_cast<size_t>(batch) * c.num_q_heads * c.num_splits *
                            (static_cast<size_t>(c.head_dim) + 1);
  }

  DeviceBuffers dev{platform, {}};
  ops::PagedDecodeParams p;
  KV_ASSIGN_OR_RETURN(p.q, dev.upload(q));
  KV_ASSIGN_OR_RETURN(p.k_cache, dev.upload(k));
  KV_ASSIGN_OR_RETURN(p.v_cache, dev.upload(v));
  KV_ASSIGN_OR_RETURN(void* d_indptr, dev.upload(indptr));
  KV_ASSIGN_OR_RETURN(void* d_pages, dev.upload(page_ids));
  KV_ASSIGN_OR_RETURN(void* d_lens, dev.upload(seq_lens));
  p.page_indptr = static_cast<const int32_t*>(d_indptr);
  p.page_ids = static_cast<const int32_t*>(d_pages);
  p.seq_lens = static_cast<const int32_t*>(d_lens);
  const size_t out_elems = static_cast<size_t>(batch) * c.num_q_heads * c.head_dim;
  KV_ASSIGN_OR_RETURN(p.out, dev.alloc(out_elems * 2));
  if (plan.num_splits > 1) {
    KV_ASSIGN_OR_RETURN(void* ws, dev.alloc(plan.workspace_floats * sizeof(float)));
    p.partial_out = static_cast<float*>(ws);
    p.partial_lse =
        p.partial_out + static_cast<size_t>(batch) * c.num_q_heads * plan.num_splits * c.head_dim;
  }
  p.batch = batch;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.page_size = ps;
  p.num_splits = plan.num_splits;
  p.tokens_per_split = plan.tokens_per_split;
  p.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));

  // Time each iteration between events; the median is reported.
  const platform::StreamHandle stream = platform.create_stream();
  std::vector<platform::EventHandle> events(2 * static_cast<size_t>(c.iters) + 2);
  for (auto& e : events)
    e = platform.create_event();
  for (int i = 0; i < 5; ++i)
    ops::paged_decode(platform, p, stream);  // warm-up
  std::vector<double> ms;
  for (int i = 0; i < c.iters; ++i) {
    platform.record_event(events[2 * i], stream);
    ops::paged_decode(platform, p, stream);
    platform.record_event(events[2 * i + 1], stream);
  }
  platform.synchronize_stream(stream);
  for (int i = 0; i < c.iters; ++i)
    ms.push_back(platform.elapsed_ms(events[2 * i], events[2 * i + 1]));

  // Copy bandwidth in the same run: 1 GiB device to device.
  const size_t copy_bytes = size_t{1} << 30;
  std::vector<double> copy_ms;
  void* a = nullptr;
  void* bbuf = nullptr;
  if (c.measure_copy) {
    KV_ASSIGN_OR_RETURN(a, dev.alloc(copy_bytes));
    KV_ASSIGN_OR_RETURN(bbuf, dev.alloc(copy_bytes));
  }
  for (int i = 0; c.measure_copy && i < 6; ++i) {
    platform.record_event(events[0], stream);
    platform.copy(bbuf, a, copy_bytes, platform::CopyKind::kDeviceToDevice, stream);
    platform.record_event(events[1], stream);
    platform.synchronize_stream(stream);
    if (i > 0) copy_ms.push_back(platform.elapsed_ms(events[0], events[1]));
  }
  for (auto& e : events)
    platform.destroy_event(e);
  platform.destroy_stream(stream);

  AttentionBenchResult r;
  r.num_splits = plan.num_splits;
  r.median_ms = median(ms);
  r.kv_bytes = 2.0 * std::accumulate(seq_lens.begin(), seq_lens.end(), 0.0) * row * 2;
  r.gbps = r.kv_bytes / (r.median_ms * 1e-3) / 1e9;
  if (c.measure_copy) {
    r.copy_gbps = 2.0 * copy_bytes / (median(copy_ms) * 1e-3) / 1e9;
    r.roofline_pct = 100.0 * r.gbps / r.copy_gbps;
  }
  if (c.check) {
    std::vector<uint16_t> out(out_elems);
    platform.copy(out.data(), p.out, out_elems * 2, platform::CopyKind::kDeviceToHost);
    platform.synchronize();
    ops::PagedDecodeParams hp = p;
    hp.q = q.data();
    hp.k_cache = k.data();
    hp.v_cache = v.data();
    hp.page_indptr = indptr.data();
    hp.page_ids = page_ids.data();
    hp.seq_lens = seq_lens.data();
    std::vector<float> ref(out_elems);
    ops::reference::paged_decode(hp, ref.data());
    r.max_abs_err = 0;
    r.max_ulp_err = 0;
    for (size_t i = 0; i < out_elems; ++i) {
      const double err = std::abs(double(bf16_to_float(out[i])) - ref[i]);
      const double mag = std::max(std::abs(double(ref[i])), 1e-30);
      const double ulp = std::max(std::ldexp(1.0, std::ilogb(mag) - 7), std::ldexp(1.0, -10));
      r.max_abs_err = std::max(r.max_abs_err, err);
      r.max_ulp_err = std::max(r.max_ulp_err, err / ulp);
    }
  }
  return r;
}

}  // namespace kvserve::bench

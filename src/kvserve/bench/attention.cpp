#include "kvserve/bench/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <vector>

#include "kvserve/attention/capabilities.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"

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

// A fragmented pool holding kv_lens[b] positions per request: every request's pages are a random
// subset of the pool, in random order (page 0 is padding).
struct Pool {
  std::vector<int32_t> indptr;  // [batch + 1]
  std::vector<int32_t> page_ids;
  std::vector<uint8_t> k, v;  // [slots, num_kv_heads, head_dim] of the cache dtype
};

uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// n values close to normal(0, 1) (the sum of four 16-bit uniforms, rescaled: mean 0, variance 1,
// |x| < 3.47), counter-based from one draw of `rng` so that gigabyte pools fill in parallel.
std::vector<uint16_t> random_bf16(std::mt19937_64& rng, int64_t n) {
  const uint64_t seed = rng();
  std::vector<uint16_t> v(static_cast<size_t>(n));
  uint16_t* out = v.data();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = splitmix64(seed ^ (static_cast<uint64_t>(i) * 0xD6E8FEB86659FD93ull));
    const float sum =
        static_cast<float>((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48));
    out[i] = float_to_bf16((sum * (1.0f / 65536.0f) - 2.0f) * 1.7320508f);
  }
  return v;
}

// bf16 values as a cache of `dtype`: the bytes as they are, or quantised to fp8 as the KV store
// does it (stored = value / scale; the values are about normal(0, 1), so scale 1 stays well
// inside e4m3's and e5m2's range).
std::vector<uint8_t> as_cache(const std::vector<uint16_t>& bf16, DType dtype, float scale) {
  std::vector<uint8_t> out(bf16.size() * dtype_size(dtype));
  if (dtype == DType::kBF16) {
    std::memcpy(out.data(), bf16.data(), out.size());
    return out;
  }
  convert_elements(bf16.data(), DType::kBF16, out.data(), dtype, bf16.size(),
                   is_float8(dtype) ? 1.0f / scale : 1.0f);
  return out;
}

Pool make_pool(std::mt19937_64& rng, const std::vector<int32_t>& kv_lens, int32_t ps, int64_t row,
               const AttentionBenchConfig& c) {
  Pool pool;
  const auto batch = static_cast<int32_t>(kv_lens.size());
  pool.indptr.assign(batch + 1, 0);
  for (int32_t b = 0; b < batch; ++b)
    pool.indptr[b + 1] = pool.indptr[b] + (kv_lens[b] + ps - 1) / ps;
  const int64_t num_pages = pool.indptr[batch] + 1;
  pool.page_ids.resize(static_cast<size_t>(num_pages - 1));
  std::iota(pool.page_ids.begin(), pool.page_ids.end(), 1);
  std::shuffle(pool.page_ids.begin(), pool.page_ids.end(), rng);
  pool.k = as_cache(random_bf16(rng, num_pages * ps * row), c.kv_dtype, c.k_scale);
  pool.v = as_cache(random_bf16(rng, num_pages * ps * row), c.kv_dtype, c.v_scale);
  return pool;
}

Status check_shape(const AttentionBenchConfig& c) {
  if (c.batch <= 0 || c.seq_len < 0 || c.num_q_heads <= 0 || c.num_kv_heads <= 0 ||
      c.num_q_heads % c.num_kv_heads != 0) {
    return invalid_argument("unsupported shape: batch {} seq_len {} heads {}/{}", c.batch,
                            c.seq_len, c.num_q_heads, c.num_kv_heads);
  }
  // What the paged kernels take: cuda-paged's row of the capability table.
  attention::AttentionRequirements need;
  need.source = "bench-attention";
  need.head_dim_field = "--head-dim";
  need.heads_field = "--num-q-heads";
  need.kv_heads_field = "--num-kv-heads";
  need.num_q_heads = c.num_q_heads;
  need.num_kv_heads = c.num_kv_heads;
  need.head_dim = c.head_dim;
  need.page_size = c.page_size;
  need.kv_dtype = c.kv_dtype;
  need.device = DeviceKind::kCuda;
  if (Status s =
          attention::check_attention_support(attention::AttentionBackendKind::kCudaPaged, need);
      !s.is_ok()) {
    return invalid_argument("{}", s.message());
  }
  if (!(c.k_scale > 0 && c.v_scale > 0)) {
    return invalid_argument("KV scales must be positive: {} {}", c.k_scale, c.v_scale);
  }
  return {};
}

// Runs `launch` 5 times to warm up, then `iters` times between events: the times in ms.
// `before` (when given) runs before each timed launch, outside the events.
template <typename Launch>
std::vector<double> time_kernel(platform::Platform& platform, int32_t iters, Launch&& launch,
                                const std::function<void(platform::StreamHandle)>& before = {}) {
  const platform::StreamHandle stream = platform.create_stream();
  std::vector<platform::EventHandle> events(2 * static_cast<size_t>(iters));
  for (auto& e : events)
    e = platform.create_event();
  for (int i = 0; i < 5; ++i)
    launch(stream);
  for (int i = 0; i < iters; ++i) {
    if (before) before(stream);
    platform.record_event(events[2 * i], stream);
    launch(stream);
    platform.record_event(events[2 * i + 1], stream);
  }
  platform.synchronize_stream(stream);
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i)
    ms.push_back(platform.elapsed_ms(events[2 * i], events[2 * i + 1]));
  for (auto& e : events)
    platform.destroy_event(e);
  platform.destroy_stream(stream);
  return ms;
}

// Max abs and ulp error of bf16 `out` against `ref` over rows [r * row_elems, (r + 1) * ...) with
// r % row_step == 0.
void compare(const std::vector<uint16_t>& out, const std::vector<float>& ref, size_t row_elems,
             int32_t row_step, AttentionBenchResult& r) {
  r.max_abs_err = 0;
  r.max_ulp_err = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if ((i / row_elems) % row_step != 0) continue;
    double err = std::abs(double(bf16_to_float(out[i])) - ref[i]);
    if (std::isnan(err)) err = INFINITY;  // a row the kernel never wrote (NaN-filled)
    const double mag = std::max(std::abs(double(ref[i])), 1e-30);
    const double ulp = std::max(std::ldexp(1.0, std::ilogb(mag) - 7), std::ldexp(1.0, -10));
    r.max_abs_err = std::max(r.max_abs_err, err);
    r.max_ulp_err = std::max(r.max_ulp_err, err / ulp);
  }
}

// Device-to-device copy bandwidth, (read + write) bytes / time, over 1 GiB.
Result<double> copy_gbps(platform::Platform& platform, DeviceBuffers& dev) {
  const size_t bytes = size_t{1} << 30;
  KV_ASSIGN_OR_RETURN(void* a, dev.alloc(bytes));
  KV_ASSIGN_OR_RETURN(void* b, dev.alloc(bytes));
  const std::vector<double> ms = time_kernel(platform, 5, [&](platform::StreamHandle s) {
    platform.copy(b, a, bytes, platform::CopyKind::kDeviceToDevice, s);
  });
  return 2.0 * bytes / (median(ms) * 1e-3) / 1e9;
}

Result<AttentionBenchResult> run_prefill_bench(platform::Platform& platform,
                                               const AttentionBenchConfig& c);

}  // namespace

Result<AttentionBenchResult> run_attention_bench(platform::Platform& platform,
                                                 const AttentionBenchConfig& c) {
  if (c.backend != "cuda-paged") {
    return invalid_argument("--backend {}: bench-attention knows cuda-paged", c.backend);
  }
  if (platform.device().kind != DeviceKind::kCuda) {
    return invalid_argument("--backend cuda-paged needs --device cuda");
  }
  KV_RETURN_IF_ERROR(check_shape(c));
  if (c.mode == "prefill") return run_prefill_bench(platform, c);
  if (c.mode != "decode") return invalid_argument("--mode {}: decode or prefill", c.mode);
  const std::string kernel = c.kernel.empty() ? "decode" : c.kernel;
  const bool tc = kernel == "tc" || kernel == "decode-tc";
  if (!tc && kernel != "decode") {
    return invalid_argument("--kernel {}: decode or tc in decode mode", kernel);
  }
  int32_t stages = 0;
  if (c.variant == "s2" || c.variant == "s3" || c.variant == "s4") {
    stages = c.variant[1] - '0';
  } else if (c.variant != "auto") {
    return invalid_argument("--variant {}: auto, s2, s3 or s4 in decode mode", c.variant);
  }
  if (!tc && stages != 0) return invalid_argument("--variant {} needs --kernel tc", c.variant);
  std::mt19937_64 rng(c.seed);
  const int32_t ps = c.page_size;
  std::vector<int32_t> seq_lens =
      c.seq_lens.empty() ? std::vector<int32_t>(c.batch, c.seq_len) : c.seq_lens;
  const auto batch = static_cast<int32_t>(seq_lens.size());
  const int32_t max_len = *std::max_element(seq_lens.begin(), seq_lens.end());
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  const Pool pool = make_pool(rng, seq_lens, ps, row, c);
  const std::vector<uint16_t> q =
      random_bf16(rng, static_cast<int64_t>(batch) * c.num_q_heads * c.head_dim);

  const int32_t num_sms = platform::cuda::multiprocessor_count();
  if (tc && stages == 0) stages = platform.kernel_switches().decode_tc_stages;  // auto
  ops::PagedDecodePlan plan =
      tc ? ops::plan_paged_decode_tc(batch, c.num_q_heads, c.num_kv_heads, c.head_dim, max_len,
                                     num_sms, stages, c.window_left)
         : ops::plan_paged_decode(batch, c.num_q_heads, c.num_kv_heads, c.head_dim, max_len,
                                  num_sms, c.window_left);
  // The positions the longest query reads (a window's at most).
  const int32_t max_read = ops::windowed_len(max_len, c.window_left);
  if (c.num_splits > 0) {
    plan.num_splits = c.num_splits;
    plan.tokens_per_split = c.tokens_per_split > 0
                                ? c.tokens_per_split
                                : std::max(1, (max_read + c.num_splits - 1) / c.num_splits);
    plan.min_tokens_per_split = 0;
    plan.workspace_floats = static_cast<size_t>(batch) * c.num_q_heads * c.num_splits *
                            (static_cast<size_t>(c.head_dim) + 1);
    plan.workspace_counters =
        tc && c.num_splits > 1 ? static_cast<size_t>(batch) * c.num_kv_heads : 0;
  }
  if (c.min_tokens_per_split >= 0) plan.min_tokens_per_split = c.min_tokens_per_split;

  DeviceBuffers dev{platform, {}};
  ops::PagedDecodeParams p;
  KV_ASSIGN_OR_RETURN(p.q, dev.upload(q));
  KV_ASSIGN_OR_RETURN(p.k_cache, dev.upload(pool.k));
  KV_ASSIGN_OR_RETURN(p.v_cache, dev.upload(pool.v));
  KV_ASSIGN_OR_RETURN(void* d_indptr, dev.upload(pool.indptr));
  KV_ASSIGN_OR_RETURN(void* d_pages, dev.upload(pool.page_ids));
  KV_ASSIGN_OR_RETURN(void* d_lens, dev.upload(seq_lens));
  p.page_indptr = static_cast<const int32_t*>(d_indptr);
  p.page_ids = static_cast<const int32_t*>(d_pages);
  p.seq_lens = static_cast<const int32_t*>(d_lens);
  const size_t out_elems = static_cast<size_t>(batch) * c.num_q_heads * c.head_dim;
  KV_ASSIGN_OR_RETURN(p.out, dev.alloc(out_elems * 2));
  platform.memset(p.out, 0xff, out_elems * 2);  // NaN: a row never written shows as an error
  if (plan.num_splits > 1) {
    KV_ASSIGN_OR_RETURN(void* ws, dev.alloc(plan.workspace_floats * sizeof(float)));
    void* counters = nullptr;
    if (plan.workspace_counters > 0) {
      KV_ASSIGN_OR_RETURN(counters, dev.alloc(plan.workspace_counters * sizeof(uint32_t)));
      platform.memset(counters, 0, plan.workspace_counters * sizeof(uint32_t));
    }
    const ops::PagedDecodeWorkspace w = ops::paged_decode_workspace(
        plan, static_cast<float*>(ws), static_cast<uint32_t*>(counters), c.head_dim);
    p.partial_out = w.partial_out;
    p.partial_lse = w.partial_lse;
    p.split_counters = w.split_counters;
  }
  p.batch = batch;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.page_size = ps;
  p.num_splits = plan.num_splits;
  p.tokens_per_split = plan.tokens_per_split;
  p.min_tokens_per_split = plan.min_tokens_per_split;
  p.sm_scale = c.sm_scale > 0 ? c.sm_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.kv_dtype = c.kv_dtype;
  p.k_scale = is_float8(c.kv_dtype) ? c.k_scale : 1.0f;
  p.v_scale = is_float8(c.kv_dtype) ? c.v_scale : 1.0f;
  p.window_left = c.window_left;
  p.logit_softcap = c.logit_softcap;
  // The bench's metadata and K/V are uploaded once, before every launch: stable.
  p.stable_before_wait = c.early_loads;

  if (c.layers < 0) return invalid_argument("--layers {}: 0 or more", c.layers);
  if (c.layers > 0 && c.flush_l2)
    return invalid_argument("--layers and --flush-l2: one or the other");
  // --layers: a K/V copy per layer (the first is p's).
  std::vector<const void*> layer_k{p.k_cache};
  std::vector<const void*> layer_v{p.v_cache};
  for (int32_t l = 1; l < c.layers; ++l) {
    KV_ASSIGN_OR_RETURN(void* k, dev.upload(pool.k));
    KV_ASSIGN_OR_RETURN(void* v, dev.upload(pool.v));
    layer_k.push_back(k);
    layer_v.push_back(v);
  }
  const auto layer_params = [&](int32_t l) {
    ops::PagedDecodeParams lp = p;
    lp.k_cache = layer_k[static_cast<size_t>(l)];
    lp.v_cache = layer_v[static_cast<size_t>(l)];
    return lp;
  };

  std::function<void(platform::StreamHandle)> flush;
  void* flush_buf = nullptr;
  constexpr size_t kFlushBytes = size_t{256} << 20;
  if (c.flush_l2) {
    KV_ASSIGN_OR_RETURN(flush_buf, dev.alloc(kFlushBytes));
    flush = [&](platform::StreamHandle s) { platform.memset(flush_buf, 0, kFlushBytes, s); };
  }
  platform.synchronize();  // the uploads and the memset (default stream) before the timing stream
  AttentionBenchResult r;
  std::vector<double> ms;
  if (tc) {
    stages = ops::resolve_decode_tc_stages(stages, c.head_dim);
    r.variant = "tc-s" + std::to_string(stages);
    r.ctas_per_sm = ops::decode_tc_occupancy(platform, c.head_dim, stages);
  } else {
    r.variant = "decode";
  }
  // One timed launch runs every layer (one without --layers); the times are per layer.
  const int32_t layers = std::max(c.layers, 1);
  ms = time_kernel(
      platform, c.iters,
      [&](platform::StreamHandle s) {
        for (int32_t l = 0; l < layers; ++l) {
          if (tc) {
            ops::paged_decode_tc(platform, layer_params(l), s, stages);
          } else {
            ops::paged_decode(platform, layer_params(l), s);
          }
        }
      },
      flush);
  for (double& m : ms)
    m /= layers;

  r.num_splits = plan.num_splits;
  r.median_ms = median(ms);
  // The bytes a kernel must read: K and V rows of the cache dtype (fp8: half of bf16's).
  double read = 0;
  for (const int32_t n : seq_lens)
    read += ops::windowed_len(n, c.window_left);
  r.kv_bytes = 2.0 * read * row * static_cast<double>(dtype_size(c.kv_dtype));
  r.gbps = r.kv_bytes / (r.median_ms * 1e-3) / 1e9;
  if (c.measure_copy) {
    KV_ASSIGN_OR_RETURN(r.copy_gbps, copy_gbps(platform, dev));
    r.roofline_pct = 100.0 * r.gbps / r.copy_gbps;
  }
  if (c.check) {
    std::vector<uint16_t> out(out_elems);
    platform.copy(out.data(), p.out, out_elems * 2, platform::CopyKind::kDeviceToHost);
    platform.synchronize();
    ops::PagedDecodeParams hp = p;
    hp.q = q.data();
    hp.k_cache = pool.k.data();
    hp.v_cache = pool.v.data();
    hp.page_indptr = pool.indptr.data();
    hp.page_ids = pool.page_ids.data();
    hp.seq_lens = seq_lens.data();
    std::vector<float> ref(out_elems);
    ops::reference::paged_decode_parallel(hp, ref.data());
    compare(out, ref, out_elems, 1, r);
  }
  return r;
}

namespace {

Result<AttentionBenchResult> run_prefill_bench(platform::Platform& platform,
                                               const AttentionBenchConfig& c) {
  const bool per_token = c.kernel == "decode-per-token";
  if (!per_token && !c.kernel.empty() && c.kernel != "prefill") {
    return invalid_argument("--kernel {}: prefill or decode-per-token in prefill mode", c.kernel);
  }
  ops::PrefillVariant variant = ops::parse_prefill_variant(c.variant);
  if (variant == ops::PrefillVariant::kAuto && c.variant != "auto") {
    return invalid_argument("--variant {}: auto, sm90, sm90pp, mma, m64w4, m128w8 or m128w4",
                            c.variant);
  }
  std::vector<int32_t> q_lens =
      c.q_lens.empty() ? std::vector<int32_t>(c.batch, c.seq_len) : c.q_lens;
  const auto batch = static_cast<int32_t>(q_lens.size());
  std::vector<int32_t> kv_lens = c.kv_lens;
  if (kv_lens.empty()) {
    for (const int32_t n : q_lens)
      kv_lens.push_back(c.prefix_len + n);
  }
  if (kv_lens.size() != q_lens.size() || c.prefix_len < 0) {
    return invalid_argument("{} kv lengths for {} requests", kv_lens.size(), q_lens.size());
  }
  std::vector<int32_t> qo_indptr(batch + 1, 0);
  for (int32_t b = 0; b < batch; ++b) {
    if (q_lens[b] < 0 || (c.causal && kv_lens[b] < q_lens[b])) {
      return invalid_argument("request {}: {} queries over {} positions", b, q_lens[b], kv_lens[b]);
    }
    qo_indptr[b + 1] = qo_indptr[b] + q_lens[b];
  }
  const int32_t total_q = qo_indptr[batch];
  if (total_q == 0) return invalid_argument("no query tokens");

  // Visible positions per query: the FLOP count and the per-token decode path's lengths.
  std::vector<int32_t> visible(static_cast<size_t>(total_q));
  std::vector<int32_t> starts(static_cast<size_t>(total_q));
  double sum_visible = 0;
  std::mt19937_64 rng(c.seed);
  const int64_t row = static_cast<int64_t>(c.num_kv_heads) * c.head_dim;
  if (c.contiguous && per_token) return invalid_argument("--contiguous runs the prefill kernel");
  if (c.contiguous && c.page_size != 1) {
    return invalid_argument("--contiguous reads rows, not pages: page size 1, not {}", c.page_size);
  }
  Pool pool = make_pool(rng, kv_lens, c.page_size, row, c);
  // Contiguous: the pages (rows) in order, so request b's position t is row 1 + indptr[b] + t
  // (row 0 is padding); the kernel gets that base per request and no page list, the reference
  // reads the same rows through the identity page list.
  std::vector<int32_t> row_base;
  if (c.contiguous) {
    std::sort(pool.page_ids.begin(), pool.page_ids.end());
    for (int32_t b = 0; b < batch; ++b)
      row_base.push_back(pool.indptr[b] + 1);
  }
  for (int32_t b = 0; b < batch; ++b) {
    for (int32_t i = 0; i < q_lens[b]; ++i) {
      const int32_t t = qo_indptr[b] + i;
      visible[t] = c.causal ? kv_lens[b] - q_lens[b] + i + 1 : kv_lens[b];
      starts[t] = pool.indptr[b];
      // A window reads from position kv_len - q_len + i - window_left on.
      const int32_t first =
          c.window_left >= 0
              ? std::clamp(kv_lens[b] - q_lens[b] + i - c.window_left, 0, std::max(visible[t], 0))
              : 0;
      sum_visible += visible[t] - first;
    }
  }
  const size_t out_elems = static_cast<size_t>(total_q) * c.num_q_heads * c.head_dim;
  const std::vector<uint16_t> q = random_bf16(rng, static_cast<int64_t>(out_elems));

  DeviceBuffers dev{platform, {}};
  ops::PagedPrefillParams p;
  KV_ASSIGN_OR_RETURN(p.q, dev.upload(q));
  KV_ASSIGN_OR_RETURN(p.k_cache, dev.upload(pool.k));
  KV_ASSIGN_OR_RETURN(p.v_cache, dev.upload(pool.v));
  KV_ASSIGN_OR_RETURN(void* d_qo, dev.upload(qo_indptr));
  KV_ASSIGN_OR_RETURN(void* d_indptr, dev.upload(c.contiguous ? row_base : pool.indptr));
  KV_ASSIGN_OR_RETURN(void* d_pages, dev.upload(pool.page_ids));
  KV_ASSIGN_OR_RETURN(void* d_kv, dev.upload(kv_lens));
  KV_ASSIGN_OR_RETURN(p.out, dev.alloc(out_elems * 2));
  platform.memset(p.out, 0xff, out_elems * 2);  // NaN: a row never written shows as an error
  p.qo_indptr = static_cast<const int32_t*>(d_qo);
  p.page_indptr = static_cast<const int32_t*>(d_indptr);
  p.page_ids = c.contiguous ? nullptr : static_cast<const int32_t*>(d_pages);
  p.kv_lens = static_cast<const int32_t*>(d_kv);
  p.num_slots =
      static_cast<int64_t>(pool.k.size()) /
      (int64_t{c.num_kv_heads} * c.head_dim * static_cast<int64_t>(dtype_size(c.kv_dtype)));
  p.batch = batch;
  p.total_q = total_q;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.page_size = c.page_size;
  p.causal = c.causal;
  p.sm_scale = c.sm_scale > 0 ? c.sm_scale : 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.kv_dtype = c.kv_dtype;
  p.k_scale = is_float8(c.kv_dtype) ? c.k_scale : 1.0f;
  p.v_scale = is_float8(c.kv_dtype) ? c.v_scale : 1.0f;
  p.window_left = c.window_left;
  p.logit_softcap = c.logit_softcap;
  if (variant == ops::PrefillVariant::kAuto) variant = platform.kernel_switches().prefill_variant;
  p.variant = ops::resolve_prefill_variant(variant, p, ops::prefill_sm90_device(platform));

  platform.synchronize();  // the uploads and the memset (default stream) before the timing stream
  AttentionBenchResult r;
  std::vector<double> ms;
  if (per_token) {
    // Today's extend path: every query token is a decode query over its request's page list.
    ops::PagedDecodeParams d;
    KV_ASSIGN_OR_RETURN(void* d_starts, dev.upload(starts));
    KV_ASSIGN_OR_RETURN(void* d_visible, dev.upload(visible));
    const int32_t max_visible = *std::max_element(visible.begin(), visible.end());
    const ops::PagedDecodePlan plan =
        ops::plan_paged_decode(total_q, c.num_q_heads, c.num_kv_heads, c.head_dim, max_visible,
                               platform::cuda::multiprocessor_count(), c.window_left);
    if (plan.num_splits > 1) {
      KV_ASSIGN_OR_RETURN(void* ws, dev.alloc(plan.workspace_floats * sizeof(float)));
      d.partial_out = static_cast<float*>(ws);
      d.partial_lse = d.partial_out +
                      static_cast<size_t>(total_q) * c.num_q_heads * plan.num_splits * c.head_dim;
    }
    d.q = p.q;
    d.k_cache = p.k_cache;
    d.v_cache = p.v_cache;
    d.kv_dtype = p.kv_dtype;
    d.k_scale = p.k_scale;
    d.v_scale = p.v_scale;
    d.page_indptr = static_cast<const int32_t*>(d_starts);
    d.page_ids = p.page_ids;
    d.seq_lens = static_cast<const int32_t*>(d_visible);
    d.out = p.out;
    d.batch = total_q;
    d.num_q_heads = c.num_q_heads;
    d.num_kv_heads = c.num_kv_heads;
    d.head_dim = c.head_dim;
    d.page_size = c.page_size;
    d.num_splits = plan.num_splits;
    d.tokens_per_split = plan.tokens_per_split;
    d.sm_scale = p.sm_scale;
    d.window_left = c.window_left;  // a causal query's position is visible - 1, as the decode's
    d.logit_softcap = c.logit_softcap;
    r.num_splits = plan.num_splits;
    r.variant = "decode-per-token";
    platform.synchronize();  // its uploads too
    ms = time_kernel(platform, c.iters,
                     [&](platform::StreamHandle s) { ops::paged_decode(platform, d, s); });
  } else {
    r.variant = std::string(ops::prefill_variant_name(p.variant));
    ms = time_kernel(platform, c.iters,
                     [&](platform::StreamHandle s) { ops::paged_prefill(platform, p, s); });
  }
  r.median_ms = median(ms);
  r.flops = 4.0 * c.head_dim * c.num_q_heads * sum_visible;
  r.tflops = r.flops / (r.median_ms * 1e-3) / 1e12;
  r.peak_pct = 100.0 * r.tflops / c.peak_tflops;
  r.kv_bytes = 2.0 * std::accumulate(kv_lens.begin(), kv_lens.end(), 0.0) * row *
               static_cast<double>(dtype_size(c.kv_dtype));
  r.gbps = r.kv_bytes / (r.median_ms * 1e-3) / 1e9;
  if (c.check) {
    std::vector<uint16_t> out(out_elems);
    platform.copy(out.data(), p.out, out_elems * 2, platform::CopyKind::kDeviceToHost);
    platform.synchronize();
    // Every query_step-th query (odd, so it walks every position class) within the work budget.
    const double work = sum_visible * c.num_q_heads * c.head_dim * 2;
    auto step = static_cast<int32_t>(std::max(1.0, std::ceil(work / c.check_max_work)));
    if (step > 1 && step % 2 == 0) ++step;
    ops::PagedPrefillParams hp = p;
    hp.q = q.data();
    hp.k_cache = pool.k.data();
    hp.v_cache = pool.v.data();
    hp.qo_indptr = qo_indptr.data();
    hp.page_indptr = pool.indptr.data();
    hp.page_ids = pool.page_ids.data();
    hp.kv_lens = kv_lens.data();
    std::vector<float> ref(out_elems);
    ops::reference::paged_prefill(hp, ref.data(), step);
    compare(out, ref, static_cast<size_t>(c.num_q_heads) * c.head_dim, step, r);
    r.checked_queries = (total_q + step - 1) / step;
  }
  return r;
}

}  // namespace

}  // namespace kvserve::bench

// The tensor-core decode kernel (ops::paged_decode_tc, platform/cuda/paged_prefill.cu) against the
// float64 reference on a fragmented pool (every request's pages a random subset of the pool in
// random order):
//   * batches of 1, 7 and 33 queries with lengths 0 (empty KV), 1, 17, 63..65, 129, 1000, 4097 and
//     random ones; page sizes 1, 16, 64, 128; GQA groups 1, 4, 8 (2 KV heads); head_dim 64 and
//     128 (80, 96, 256 on page sizes 1 / 16 / 128, groups 1 / 8); splits planned (every pipeline
//     depth), forced 1, 3 and 16 (every request cut alike, unaligned chunks), 16 and 40 per-request
//     (more splits than tiles: empty splits);
//   * real head shapes (32/8, 8/8, 16/2, 28/4, 24/8 at head_dim 128; 14/2, 32/8 at 64);
//   * a decode graph's plan (for the longest possible request) against the eager plan: the same
//     bits; the kernel captured in a CUDA graph (merging in its last split blocks through the
//     split counters, and with the merge kernel) and replayed on new lengths and page lists, the
//     counters zero after every launch;
//   * the planner's choices: batch 1 with 4096 and 16385 positions (one wave of splits, launched
//     again and again on the same counters), batch 64 with short contexts (no split at 8 KV
//     heads, splits at 1);
//   * reads before the PDL wait (stable_before_wait) in three split modes, and right after a
//     K/V store of every query's last row (a decode step's last two kernels): the stored rows
//     are seen;
//   * every query empty: zeros; bench-attention's tc path; the occupancy the split plan assumes;
//   * an fp8 KV cache (e4m3, e5m2; scales that are not 1): page sizes 1 / 16 / 64 / 128, groups
//     1 / 4 / 8, head_dim 64 / 128, every pipeline depth and split mode, against the reference on
//     the dequantised fp8 values (so the bound is the bf16 one).
// Bounds are bf16 ulps of the reference value (at least 2^-10, as bench-attention measures): the
// kernel rounds P to bf16 for the P V product, which costs a few ulps at most (<= 8 allowed, as
// the prefill kernel's test). Every case prints its seed. Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvserve/bench/attention.h"
#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/kv_store.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "kvserve/platform/platform.h"
#include "support/cuda_param_test.h"

namespace kvserve {
namespace {

// Split counters are off by default (KernelSwitches::split_counters) until they have run on a
// GPU; this suite turns them on so that its `counters` cases reach them (the op drops them else).
std::unique_ptr<platform::Platform> cuda_or_null() {
  auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
  if (!p.is_ok()) return nullptr;
  platform::KernelSwitches ks = (*p)->kernel_switches();
  ks.split_counters = true;
  (*p)->set_kernel_switches(ks);
  return std::move(p).value();
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Close to normal(0, 1): four 16-bit uniforms summed and rescaled.
std::vector<uint16_t> random_bf16(uint64_t seed, int64_t n) {
  std::vector<uint16_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t h = mix(seed ^ (static_cast<uint64_t>(i) * 0xD6E8FEB86659FD93ull));
    const float sum =
        static_cast<float>((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48));
    v[static_cast<size_t>(i)] = float_to_bf16((sum / 65536.0f - 2.0f) * 1.7320508f);
  }
  return v;
}

struct Shape {
  int32_t num_q_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t page_size;
};

// One batch's inputs on the host and the device, and the reference output.
class DecodeInputs {
 public:
  DecodeInputs(platform::Platform& cuda, const Shape& s, std::vector<int32_t> seq_lens,
               uint64_t seed, int32_t max_splits)
      : cuda_(cuda), shape_(s), seq_lens_(std::move(seq_lens)), seed_(seed) {
    const auto batch = static_cast<int32_t>(seq_lens_.size());
    const int32_t ps = s.page_size;
    std::mt19937_64 rng(seed);
    indptr_.assign(static_cast<size_t>(batch) + 1, 0);
    for (int32_t b = 0; b < batch; ++b)
      indptr_[b + 1] = indptr_[b] + (seq_lens_[b] + ps - 1) / ps;
    // A few spare pages so that the lists do not cover the pool; page 0 is padding.
    const int32_t num_pages = indptr_[batch] + 8;
    std::vector<int32_t> all(static_cast<size_t>(num_pages - 1));
    std::iota(all.begin(), all.end(), 1);
    std::shuffle(all.begin(), all.end(), rng);
    page_ids_.assign(all.begin(), all.begin() + indptr_[batch]);
    if (page_ids_.empty()) page_ids_.push_back(0);
    const int64_t row = int64_t{s.num_kv_heads} * s.head_dim;
    k_ = random_bf16(rng(), int64_t{num_pages} * ps * row);
    v_ = random_bf16(rng(), int64_t{num_pages} * ps * row);
    q_ = random_bf16(rng(), int64_t{batch} * s.num_q_heads * s.head_dim);
    out_elems_ = static_cast<size_t>(batch) * s.num_q_heads * s.head_dim;
    d_q_ = upload(q_);
    d_k_ = upload(k_);
    d_v_ = upload(v_);
    d_indptr_ = upload(indptr_);
    d_pages_ = upload(page_ids_);
    d_lens_ = upload(seq_lens_);
    d_out_ = std::move(cuda_.allocate_buffer(out_elems_ * 2).value());
    ws_floats_ = static_cast<size_t>(batch) * s.num_q_heads * max_splits * (s.head_dim + 1);
    d_ws_ = std::move(cuda_.allocate_buffer(std::max<size_t>(ws_floats_, 1) * 4).value());
    // Split counters (the last split block merges): zero once here; the kernel leaves them zero.
    num_counters_ = static_cast<size_t>(batch) * s.num_kv_heads;
    d_counters_ = std::move(cuda_.allocate_buffer(std::max<size_t>(num_counters_, 1) * 4).value());
    cuda_.memset(d_counters_.data(), 0, d_counters_.bytes());
    ref_.resize(out_elems_);
    compute_reference();
  }

  int32_t batch() const { return static_cast<int32_t>(seq_lens_.size()); }
  int32_t max_len() const { return *std::max_element(seq_lens_.begin(), seq_lens_.end()); }
  uint64_t seed() const { return seed_; }
  const std::vector<float>& ref() const { return ref_; }

  // Device params for `plan` (the workspace laid out as the backends lay it out); `counters`:
  // with split counters (the last split block merges), else the merge kernel.
  ops::PagedDecodeParams params(const ops::PagedDecodePlan& plan, bool counters = true) const {
    ops::PagedDecodeParams p;
    p.q = d_q_.data();
    p.k_cache = d_k_.data();
    p.v_cache = d_v_.data();
    p.page_indptr = d_indptr_.data_as<int32_t>();
    p.page_ids = d_pages_.data_as<int32_t>();
    p.seq_lens = d_lens_.data_as<int32_t>();
    p.out = d_out_.data();
    if (plan.num_splits > 1) {
      ops::PagedDecodePlan sized = plan;  // forced splits: the plan's sizes for them
      sized.workspace_floats = static_cast<size_t>(batch()) * shape_.num_q_heads * plan.num_splits *
                               (shape_.head_dim + 1);
      sized.workspace_counters = counters ? num_counters_ : 0;
      const ops::PagedDecodeWorkspace w = ops::paged_decode_workspace(
          sized, d_ws_.data_as<float>(), d_counters_.data_as<uint32_t>(), shape_.head_dim);
      p.partial_out = w.partial_out;
      p.partial_lse = w.partial_lse;
      p.split_counters = w.split_counters;
    }
    p.batch = batch();
    p.num_q_heads = shape_.num_q_heads;
    p.num_kv_heads = shape_.num_kv_heads;
    p.head_dim = shape_.head_dim;
    p.page_size = shape_.page_size;
    p.num_splits = plan.num_splits;
    p.tokens_per_split = plan.tokens_per_split;
    p.min_tokens_per_split = plan.min_tokens_per_split;
    p.sm_scale = 1.0f / std::sqrt(static_cast<float>(shape_.head_dim));
    return p;
  }

  // Runs the kernel on a NaN-filled output (a row never written shows) and returns the output.
  // With split counters it also checks that the launch left every counter zero.
  std::vector<uint16_t> run(const ops::PagedDecodePlan& plan, int32_t stages = 0,
                            bool counters = true, bool early = false) {
    EXPECT_LE(
        static_cast<size_t>(batch()) * shape_.num_q_heads * plan.num_splits * (shape_.head_dim + 1),
        std::max<size_t>(ws_floats_, 1))
        << "test workspace too small";
    cuda_.memset(d_out_.data(), 0xff, out_elems_ * 2);
    ops::PagedDecodeParams p = params(plan, counters);
    p.stable_before_wait = early;
    ops::paged_decode_tc(cuda_, p, {}, stages);
    std::vector<uint16_t> out = read_out();
    if (counters) expect_counters_zero();
    return out;
  }

  // A decode step's last two kernels: ops::store_kv writes new K and V rows (from `seed`) at
  // every query's last position, then the attention reads the pool with stable_before_wait, as
  // the cuda-paged backend launches them (both with PDL; nothing between them). Updates the
  // host pool and the reference, and returns the attention's output.
  std::vector<uint16_t> store_last_rows_then_run(const ops::PagedDecodePlan& plan, uint64_t seed) {
    const int32_t ps = shape_.page_size;
    const int64_t row = int64_t{shape_.num_kv_heads} * shape_.head_dim;
    std::vector<int32_t> loc;
    for (int32_t b = 0; b < batch(); ++b) {
      const int32_t t = seq_lens_[b] - 1;
      if (t >= 0) loc.push_back(page_ids_[indptr_[b] + t / ps] * ps + t % ps);
    }
    std::mt19937_64 rng(seed);
    const std::vector<uint16_t> nk = random_bf16(rng(), static_cast<int64_t>(loc.size()) * row);
    const std::vector<uint16_t> nv = random_bf16(rng(), static_cast<int64_t>(loc.size()) * row);
    for (size_t i = 0; i < loc.size(); ++i) {
      std::copy_n(nk.begin() + static_cast<int64_t>(i) * row, row, k_.begin() + loc[i] * row);
      std::copy_n(nv.begin() + static_cast<int64_t>(i) * row, row, v_.begin() + loc[i] * row);
    }
    Buffer d_loc = upload(loc);
    Buffer d_nk = upload(nk);
    Buffer d_nv = upload(nv);
    cuda_.memset(d_out_.data(), 0xff, out_elems_ * 2);
    cuda_.synchronize();
    ops::store_kv(cuda_, {.k = d_nk.data(),
                          .v = d_nv.data(),
                          .src_dtype = DType::kBF16,
                          .k_cache = d_k_.data(),
                          .v_cache = d_v_.data(),
                          .cache_dtype = DType::kBF16,
                          .loc = d_loc.data_as<int32_t>(),
                          .num_tokens = static_cast<int64_t>(loc.size()),
                          .row_elems = row,
                          .num_slots = static_cast<int64_t>(k_.size() / static_cast<size_t>(row))});
    ops::PagedDecodeParams p = params(plan);
    p.stable_before_wait = true;
    ops::paged_decode_tc(cuda_, p);
    std::vector<uint16_t> out = read_out();
    expect_counters_zero();
    compute_reference();
    return out;
  }

  void expect_counters_zero() {
    std::vector<uint32_t> c(num_counters_);
    cuda_.copy(c.data(), d_counters_.data(), num_counters_ * 4, platform::CopyKind::kDeviceToHost);
    cuda_.synchronize();
    for (size_t i = 0; i < c.size(); ++i)
      ASSERT_EQ(c[i], 0u) << "split counter " << i << " not reset by the merging block";
  }

  std::vector<uint16_t> read_out() {
    std::vector<uint16_t> out(out_elems_);
    cuda_.copy(out.data(), d_out_.data(), out_elems_ * 2, platform::CopyKind::kDeviceToHost);
    cuda_.synchronize();
    return out;
  }

  // Replaces the lengths (same count) and page lists on the host and the device, and the
  // reference; page lists must fit the pool already made (lengths <= the first ones).
  void reshape(std::vector<int32_t> seq_lens, uint64_t seed) {
    const int32_t ps = shape_.page_size;
    std::mt19937_64 rng(seed);
    const int32_t num_pages = static_cast<int32_t>(
        k_.size() / (static_cast<size_t>(ps) * shape_.num_kv_heads * shape_.head_dim));
    seq_lens_ = std::move(seq_lens);
    std::vector<int32_t> indptr(indptr_.size(), 0);
    for (int32_t b = 0; b < batch(); ++b)
      indptr[b + 1] = indptr[b] + (seq_lens_[b] + ps - 1) / ps;
    KV_CHECK_LE(indptr[batch()], static_cast<int32_t>(page_ids_.size()), "reshape grows the lists");
    std::vector<int32_t> all(static_cast<size_t>(num_pages - 1));
    std::iota(all.begin(), all.end(), 1);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + indptr[batch()], page_ids_.begin());
    indptr_ = indptr;
    cuda_.copy(d_indptr_.data(), indptr_.data(), indptr_.size() * 4,
               platform::CopyKind::kHostToDevice);
    cuda_.copy(d_pages_.data(), page_ids_.data(), page_ids_.size() * 4,
               platform::CopyKind::kHostToDevice);
    cuda_.copy(d_lens_.data(), seq_lens_.data(), seq_lens_.size() * 4,
               platform::CopyKind::kHostToDevice);
    cuda_.synchronize();
    compute_reference();
  }

 private:
  // ref_: the float64 reference on the host copies of the inputs.
  void compute_reference() {
    ops::PagedDecodeParams hp = params(ops::PagedDecodePlan{});
    hp.q = q_.data();
    hp.k_cache = k_.data();
    hp.v_cache = v_.data();
    hp.page_indptr = indptr_.data();
    hp.page_ids = page_ids_.data();
    hp.seq_lens = seq_lens_.data();
    ops::reference::paged_decode_parallel(hp, ref_.data());
  }

  template <typename T>
  Buffer upload(const std::vector<T>& host) {
    return test_support::upload(cuda_, host);
  }

  platform::Platform& cuda_;
  Shape shape_;
  std::vector<int32_t> seq_lens_;
  uint64_t seed_;
  std::vector<int32_t> indptr_, page_ids_;
  std::vector<uint16_t> q_, k_, v_;
  std::vector<float> ref_;
  size_t out_elems_ = 0;
  size_t ws_floats_ = 0;
  size_t num_counters_ = 0;
  Buffer d_q_, d_k_, d_v_, d_indptr_, d_pages_, d_lens_, d_out_, d_ws_, d_counters_;
};

struct Error {
  double ulp = 0;  // in bf16 ulps of the reference (at least 2^-10), as bench-attention
  double abs = 0;
};

Error error_of(const std::vector<uint16_t>& out, const std::vector<float>& ref) {
  Error e;
  for (size_t i = 0; i < out.size(); ++i) {
    double err = std::abs(double(bf16_to_float(out[i])) - ref[i]);
    if (std::isnan(err)) err = INFINITY;  // never written
    const double mag = std::max(std::abs(double(ref[i])), 1e-30);
    const double ulp = std::max(std::ldexp(1.0, std::ilogb(mag) - 7), std::ldexp(1.0, -10));
    e.abs = std::max(e.abs, err);
    e.ulp = std::max(e.ulp, err / ulp);
  }
  return e;
}

constexpr double kMaxUlp = 8.0;
constexpr int32_t kMostSplits = 40;

// The split settings every batch runs with.
struct SplitMode {
  std::string name;
  int32_t num_splits;  // 0: planned
  int32_t min_tokens_per_split;
  int32_t stages;
  bool counters = true;  // the last split block merges; false: the merge kernel
  bool early = false;    // stable_before_wait: metadata and first tiles read before the PDL wait
};

std::vector<SplitMode> split_modes() {
  return {
      {"planned_s2", 0, -1, 2},
      {"planned_s3", 0, -1, 3},
      {"planned_s4", 0, -1, 4},
      {"forced1", 1, 0, 0},
      {"forced3_alike", 3, 0, 0},
      {"forced16_alike", 16, 0, 0},
      {"forced16_per_req", 16, 64, 0},
      {"forced40_per_req", kMostSplits, 128, 0},
      {"planned_s3_merge_kernel", 0, -1, 3, false},
      {"forced16_alike_merge_kernel", 16, 0, 0, false},
      {"planned_s3_early", 0, -1, 3, true, true},
      {"forced1_early", 1, 0, 0, true, true},
      {"forced16_per_req_early_merge_kernel", 16, 64, 0, false, true},
  };
}

ops::PagedDecodePlan plan_for(const SplitMode& m, const DecodeInputs& in, const Shape& s,
                              int32_t num_sms) {
  ops::PagedDecodePlan plan = ops::plan_paged_decode_tc(
      in.batch(), s.num_q_heads, s.num_kv_heads, s.head_dim, in.max_len(), num_sms, m.stages);
  if (m.num_splits > 0) {
    plan.num_splits = m.num_splits;
    // Cut alike: ceil(longest / splits), not a whole number of tiles.
    plan.tokens_per_split = std::max(1, (in.max_len() + m.num_splits - 1) / m.num_splits);
    plan.min_tokens_per_split = m.min_tokens_per_split;
  }
  return plan;
}

void check_all_modes(platform::Platform& cuda, DecodeInputs& in, const Shape& s,
                     const std::string& what) {
  const int32_t num_sms = ops::num_compute_units(cuda);
  for (const SplitMode& m : split_modes()) {
    const ops::PagedDecodePlan plan = plan_for(m, in, s, num_sms);
    const Error e = error_of(in.run(plan, m.stages, m.counters, m.early), in.ref());
    EXPECT_LE(e.ulp, kMaxUlp) << what << " mode " << m.name << " (" << plan.num_splits
                              << " splits) seed " << in.seed() << " abs " << e.abs;
  }
}

// --- the grid: page size x group x head_dim, 2 KV heads ---------------------------------------
struct Case {
  int32_t page_size;
  int32_t group;
  int32_t head_dim;
};

using PagedDecodeTcTest = test_support::CudaParamTest<Case>;

TEST_P(PagedDecodeTcTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  const Shape s{2 * c.group, 2, c.head_dim, c.page_size};
  const uint64_t seed = 1000 + 10 * c.page_size + 100000 * c.group + c.head_dim;
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> b33 = {1, 17, 1000, 4097, 63, 65, 128, 0, 64, 129};
  std::uniform_int_distribution<int32_t> len(0, 2100);
  while (b33.size() < 33)
    b33.push_back(len(rng));
  const std::vector<std::vector<int32_t>> batches = {{4097}, {1, 17, 1000, 4097, 0, 64, 129}, b33};
  for (size_t i = 0; i < batches.size(); ++i) {
    DecodeInputs in(*cuda_, s, batches[i], seed + i, kMostSplits);
    check_all_modes(*cuda_, in, s, "batch " + std::to_string(batches[i].size()));
  }
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const int32_t ps : {1, 16, 64, 128}) {
    for (const int32_t group : {1, 4, 8}) {
      for (const int32_t d : {64, 128})
        out.push_back({ps, group, d});
    }
  }
  // Head dims 80 and 96 (128-element shared-memory rows) and 256 (3 stages at most): a sample.
  for (const int32_t d : {80, 96, 256}) {
    for (const int32_t ps : {1, 16, 128}) {
      for (const int32_t group : {1, 8})
        out.push_back({ps, group, d});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, PagedDecodeTcTest, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           return "ps" + std::to_string(i.param.page_size) + "_g" +
                                  std::to_string(i.param.group) + "_d" +
                                  std::to_string(i.param.head_dim);
                         });

// --- real head shapes -------------------------------------------------------------------------
TEST(PagedDecodeTc, RealHeadShapes) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const int32_t num_sms = ops::num_compute_units(*cuda);
  const std::vector<Shape> shapes = {
      {32, 8, 128, 16}, {8, 8, 128, 16}, {16, 2, 128, 16}, {28, 4, 128, 16},
      {24, 8, 128, 1},  {14, 2, 64, 16}, {32, 8, 64, 1},   {32, 8, 128, 1},
  };
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const uint64_t seed = 77 + i;
    std::cout << "[ seed     ] " << seed << " heads " << s.num_q_heads << "/" << s.num_kv_heads
              << " d" << s.head_dim << " ps" << s.page_size << std::endl;
    std::vector<int32_t> lens = {1100, 1, 4097, 17, 0, 1024, 2048};
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int32_t> len(1, 1500);
    for (int j = 0; j < 26; ++j)
      lens.push_back(len(rng));
    DecodeInputs in(*cuda, s, lens, seed, kMostSplits);
    for (const int32_t splits : {0, 1}) {
      SplitMode m{"", splits, 0, 0};
      const ops::PagedDecodePlan plan =
          splits == 0 ? ops::plan_paged_decode_tc(in.batch(), s.num_q_heads, s.num_kv_heads,
                                                  s.head_dim, in.max_len(), num_sms)
                      : plan_for(m, in, s, num_sms);
      const Error e = error_of(in.run(plan), in.ref());
      EXPECT_LE(e.ulp, kMaxUlp) << "heads " << s.num_q_heads << "/" << s.num_kv_heads << " d"
                                << s.head_dim << " ps" << s.page_size << " splits "
                                << plan.num_splits << " seed " << seed << " abs " << e.abs;
    }
  }
}

// --- a decode step: the K/V store right before the attention, which reads early ---------------
// The attention reads its metadata and first tiles before waiting for the store (PDL) but must
// see the rows the store writes: each query's last position, in whichever split and tile it
// falls (lengths that end a tile, start one, or fit in the first tiles; every split count).
TEST(PagedDecodeTc, EarlyLoadsSeeTheStoredLastRow) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const int32_t num_sms = ops::num_compute_units(*cuda);
  for (const int32_t ps : {1, 16, 128}) {
    const Shape s{32, 8, 128, ps};
    const uint64_t seed = 4242 + ps;
    std::cout << "[ seed     ] " << seed << " page size " << ps << std::endl;
    const std::vector<int32_t> lens = {4096, 1, 64, 65, 128, 129, 200, 1000, 4097, 0, 3000};
    DecodeInputs in(*cuda, s, lens, seed, kMostSplits);
    for (const int32_t splits : {0, 1, 3, 16}) {
      SplitMode m{"", splits, 0, 0};
      const ops::PagedDecodePlan plan =
          splits == 0 ? ops::plan_paged_decode_tc(in.batch(), s.num_q_heads, s.num_kv_heads,
                                                  s.head_dim, in.max_len(), num_sms)
                      : plan_for(m, in, s, num_sms);
      for (int step = 0; step < 4; ++step) {
        const Error e =
            error_of(in.store_last_rows_then_run(plan, seed + 100 * splits + step), in.ref());
        EXPECT_LE(e.ulp, kMaxUlp) << "page size " << ps << " splits " << plan.num_splits << " step "
                                  << step << " seed " << seed << " abs " << e.abs;
      }
    }
  }
}

// --- decode graphs: the plan for the longest possible request cuts every request alike ----------
TEST(PagedDecodeTc, GraphPlanEqualsEagerPlanBitForBit) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const int32_t num_sms = ops::num_compute_units(*cuda);
  const Shape s{32, 8, 128, 16};
  for (const int32_t bs : {1, 3, 17}) {
    std::vector<int32_t> lens;
    for (int32_t b = 0; b < bs; ++b)
      lens.push_back(std::vector<int32_t>{1, 4097, 300, 129, 2000, 64}[b % 6]);
    const uint64_t seed = 500 + bs;
    std::cout << "[ seed     ] " << seed << std::endl;
    const ops::PagedDecodePlan graph =
        ops::plan_paged_decode_tc(bs, s.num_q_heads, s.num_kv_heads, s.head_dim, 65536, num_sms);
    DecodeInputs in(*cuda, s, lens, seed, std::max(graph.num_splits, 1));
    const ops::PagedDecodePlan eager = ops::plan_paged_decode_tc(bs, s.num_q_heads, s.num_kv_heads,
                                                                 s.head_dim, in.max_len(), num_sms);
    const std::vector<uint16_t> a = in.run(graph);
    const std::vector<uint16_t> b = in.run(eager);
    EXPECT_EQ(a, b) << "bs " << bs << ": graph plan " << graph.num_splits << " splits, eager plan "
                    << eager.num_splits;
    const Error e = error_of(a, in.ref());
    EXPECT_LE(e.ulp, kMaxUlp) << "bs " << bs << " seed " << seed << " abs " << e.abs;
  }
}

// The kernel captured in a CUDA graph replays new lengths and page lists: with split counters
// (the last split block merges and resets them, so every replay finds them zero) and with the
// merge kernel (launched with programmatic dependent launch).
TEST(PagedDecodeTc, CapturedGraphReplaysNewLengths) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const int32_t num_sms = ops::num_compute_units(*cuda);
  const Shape s{32, 8, 128, 16};
  const int32_t bs = 9;
  const ops::PagedDecodePlan plan =
      ops::plan_paged_decode_tc(bs, s.num_q_heads, s.num_kv_heads, s.head_dim, 65536, num_sms);
  ASSERT_GT(plan.num_splits, 1) << "the test wants the split merge in the graph";
  for (const bool counters : {true, false}) {
    const uint64_t seed = counters ? 901 : 951;
    std::cout << "[ seed     ] " << seed << " counters " << counters << std::endl;
    // The pool holds every request at its longest (the last replay's lengths); the first replay's
    // lengths are set before the capture.
    DecodeInputs in(*cuda, s, std::vector<int32_t>(bs, 4097), seed, plan.num_splits);
    in.reshape({4097, 1, 300, 2000, 129, 64, 1000, 17, 3000}, seed);
    in.run(plan, 0, counters);  // eager first: the kernels are configured before the capture
    platform::Stream stream(*cuda);
    ASSERT_TRUE(cuda->begin_capture(stream.handle()).is_ok());
    ops::paged_decode_tc(*cuda, in.params(plan, counters), stream.handle());
    auto graph = cuda->end_capture(stream.handle());
    ASSERT_TRUE(graph.is_ok()) << graph.status().to_string();
    platform::Graph owned(*cuda, *graph);
    const std::vector<std::vector<int32_t>> replays = {
        {4097, 1, 300, 2000, 129, 64, 1000, 17, 3000},
        {1, 4000, 17, 0, 2999, 65, 1, 1000, 128},
        {0, 0, 0, 0, 0, 0, 0, 0, 1},
        {4097, 4097, 4097, 4097, 4097, 4097, 4097, 4097, 4097},
    };
    for (size_t i = 0; i < replays.size(); ++i) {
      in.reshape(replays[i], seed + 1 + i);
      for (int rep = 0; rep < 3; ++rep) {  // the same replay again: counters reused
        cuda->memset(in.params(plan).out, 0xff,
                     static_cast<size_t>(bs) * s.num_q_heads * s.head_dim * 2, stream.handle());
        cuda->replay(*graph, stream.handle());
        stream.synchronize();
        const Error e = error_of(in.read_out(), in.ref());
        EXPECT_LE(e.ulp, kMaxUlp) << "counters " << counters << " replay " << i << " rep " << rep
                                  << " seed " << seed + 1 + i << " abs " << e.abs;
        if (counters) in.expect_counters_zero();
      }
    }
  }
}

// --- the split planner's choices ----------------------------------------------------------------
// Batch 1 with a long context: the plan takes one wave of splits, one block per SM (16 at 132 SMs
// over 8 KV heads), the last block of each KV head merges; launched again and again on the same
// counters it gives the same bits, and the same bits as the merge kernel.
TEST(PagedDecodeTc, PlannerBatchOneLongContext) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const int32_t num_sms = ops::num_compute_units(*cuda);
  for (const int32_t ps : {1, 16, 128}) {
    for (const int32_t len : {4096, 16385}) {
      const Shape s{32, 8, 128, ps};
      const uint64_t seed = 7000 + ps + len;
      std::cout << "[ seed     ] " << seed << " ps " << ps << " len " << len << std::endl;
      const ops::PagedDecodePlan plan =
          ops::plan_paged_decode_tc(1, s.num_q_heads, s.num_kv_heads, s.head_dim, len, num_sms);
      EXPECT_GE(plan.num_splits, std::min(len / 128, 16)) << "a long batch-1 request splits";
      EXPECT_LE(int64_t{plan.num_splits} * s.num_kv_heads,
                int64_t{num_sms} * ops::decode_tc_ctas_per_sm(128, 3))
          << "one wave";
      DecodeInputs in(*cuda, s, {len}, seed, plan.num_splits);
      const std::vector<uint16_t> first = in.run(plan);
      const Error e = error_of(first, in.ref());
      EXPECT_LE(e.ulp, kMaxUlp) << "ps " << ps << " len " << len << " splits " << plan.num_splits
                                << " seed " << seed << " abs " << e.abs;
      for (int rep = 0; rep < 4; ++rep)
        EXPECT_EQ(in.run(plan), first) << "repeat " << rep << ": counters reused";
      const std::vector<uint16_t> merged = in.run(plan, 0, /*counters=*/false);
      EXPECT_LE(error_of(merged, in.ref()).ulp, kMaxUlp) << "merge kernel, seed " << seed;
      size_t differ = 0;
      for (size_t i = 0; i < merged.size(); ++i)
        differ += merged[i] != first[i];
      std::cout << "[ merge    ] last-block vs merge kernel: " << differ << " of " << merged.size()
                << " outputs differ" << std::endl;
    }
  }
}

// Batch 64 with short contexts: the blocks fill the machine without splitting (8 KV heads); with
// one KV head the plan splits the longer requests and leaves the short ones whole.
TEST(PagedDecodeTc, PlannerBatch64Short) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const int32_t num_sms = ops::num_compute_units(*cuda);
  for (const Shape& s : {Shape{32, 8, 128, 16}, Shape{8, 1, 128, 1}, Shape{8, 1, 64, 64}}) {
    const uint64_t seed = 8100 + s.num_kv_heads + s.page_size;
    std::cout << "[ seed     ] " << seed << " kv heads " << s.num_kv_heads << std::endl;
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::uniform_int_distribution<int32_t> len(0, 300);
    std::vector<int32_t> lens = {0, 1, 127, 128, 129, 300};
    while (lens.size() < 64)
      lens.push_back(len(rng));
    const ops::PagedDecodePlan plan =
        ops::plan_paged_decode_tc(64, s.num_q_heads, s.num_kv_heads, s.head_dim, 300, num_sms);
    if (s.num_kv_heads == 8) {
      EXPECT_EQ(plan.num_splits, 1) << "64 x 8 blocks fill the machine";
    } else {
      EXPECT_GT(plan.num_splits, 1) << "64 blocks leave slots empty";
    }
    DecodeInputs in(*cuda, s, lens, seed, std::max(plan.num_splits, 1));
    for (int rep = 0; rep < 3; ++rep) {
      const Error e = error_of(in.run(plan), in.ref());
      EXPECT_LE(e.ulp, kMaxUlp) << "kv " << s.num_kv_heads << " splits " << plan.num_splits
                                << " rep " << rep << " seed " << seed << " abs " << e.abs;
    }
  }
}

// --- edge cases -------------------------------------------------------------------------------
TEST(PagedDecodeTc, EveryQueryEmptyGivesZeros) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  const Shape s{8, 2, 128, 16};
  DecodeInputs in(*cuda, s, {0, 0, 0, 0, 0}, 3, 8);
  ops::PagedDecodePlan plan = ops::plan_paged_decode_tc(5, 8, 2, 128, 0, 132);
  EXPECT_EQ(plan.num_splits, 1);
  for (const std::vector<uint16_t>& out :
       {in.run(plan), in.run({.num_splits = 8, .tokens_per_split = 1, .min_tokens_per_split = 128}),
        in.run({.num_splits = 4, .tokens_per_split = 1, .min_tokens_per_split = 0})}) {
    for (const uint16_t x : out)
      ASSERT_EQ(x, 0) << "an empty query's output must be +0";
  }
}

TEST(PagedDecodeTc, BenchAttentionTcPath) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  for (const char* variant : {"auto", "s2", "s4"}) {
    bench::AttentionBenchConfig cfg;
    cfg.kernel = "tc";
    cfg.variant = variant;
    cfg.page_size = 16;
    cfg.iters = 2;
    cfg.measure_copy = false;
    cfg.flush_l2 = std::string(variant) == "s2";
    cfg.layers = std::string(variant) == "s4" ? 3 : 0;  // the checked output is the last layer's
    cfg.seed = 4242;
    cfg.seq_lens = {0, 1, 17, 1000, 4097, 64, 65};
    std::cout << "[ seed     ] " << cfg.seed << " variant " << variant << std::endl;
    const auto r = bench::run_attention_bench(*cuda, cfg);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_LE(r->max_ulp_err, kMaxUlp) << variant << " abs " << r->max_abs_err;
    EXPECT_EQ(r->variant.rfind("tc-s", 0), 0u) << r->variant;
    EXPECT_GE(r->ctas_per_sm, 1);
  }
  bench::AttentionBenchConfig bad;
  bad.kernel = "decode";
  bad.variant = "s3";
  EXPECT_FALSE(bench::run_attention_bench(*cuda, bad).is_ok()) << "stages need --kernel tc";
  bench::AttentionBenchConfig both;
  both.kernel = "tc";
  both.layers = 2;
  both.flush_l2 = true;
  EXPECT_FALSE(bench::run_attention_bench(*cuda, both).is_ok()) << "--layers or --flush-l2";
}

// --- an fp8 KV cache ---------------------------------------------------------------------------
using PagedDecodeTcFp8Test = test_support::CudaParamTest<test_support::Fp8GridPoint>;

TEST_P(PagedDecodeTcFp8Test, MatchesFloat64ReferenceOnDequantisedValues) {
  const test_support::Fp8GridPoint c = GetParam();
  struct Mode {
    const char* variant;
    int32_t num_splits;  // 0: planned
    int32_t min_tokens_per_split;
  };
  // Planned; one split (s2); 3 cut alike, unaligned chunks (s3); 40 per-request (more splits
  // than tiles: empty splits) (s4).
  const Mode modes[] = {{"auto", 0, -1}, {"s2", 1, -1}, {"s3", 3, 0}, {"s4", 40, 128}};
  const uint64_t seed = 9000 + 10 * c.page_size + 100000 * c.group + c.head_dim +
                        (c.dtype == DType::kFP8E5M2 ? 7 : 0);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> lens = {4097, 1, 17, 1000, 0, 64, 129, 63, 65};
  std::uniform_int_distribution<int32_t> len(0, 2100);
  while (lens.size() < 20)
    lens.push_back(len(rng));
  for (const Mode& m : modes) {
    bench::AttentionBenchConfig cfg = test_support::check_config(c.page_size, c.group, c.head_dim);
    cfg.kernel = "tc";
    cfg.variant = m.variant;
    cfg.kv_dtype = c.dtype;
    cfg.k_scale = 0.043f;
    cfg.v_scale = 2.3f;
    cfg.num_splits = m.num_splits;
    cfg.min_tokens_per_split = m.min_tokens_per_split;
    cfg.seed = seed;
    cfg.seq_lens = lens;
    std::cout << "[ seed     ] " << seed << " variant " << m.variant << std::endl;
    const auto r = bench::run_attention_bench(*cuda_, cfg);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_LE(r->max_ulp_err, kMaxUlp)
        << m.variant << " (" << r->num_splits << " splits) abs " << r->max_abs_err;
  }
}

INSTANTIATE_TEST_SUITE_P(Fp8, PagedDecodeTcFp8Test, testing::ValuesIn(test_support::fp8_grid()),
                         [](const testing::TestParamInfo<test_support::Fp8GridPoint>& i) {
                           return test_support::fp8_grid_name(i.param);
                         });

// fp8 with every query empty: zeros (the kernel's empty splits, not the backend's guard).
TEST(PagedDecodeTc, Fp8EveryQueryEmptyGivesZeros) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  for (const DType dt : {DType::kFP8E4M3, DType::kFP8E5M2}) {
    for (const char* kernel : {"tc", "decode"}) {
      bench::AttentionBenchConfig cfg;
      cfg.kernel = kernel;
      cfg.kv_dtype = dt;
      cfg.iters = 1;
      cfg.measure_copy = false;
      cfg.seq_lens = {0, 0, 0};
      const auto r = bench::run_attention_bench(*cuda, cfg);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      // The reference is exactly 0 there, so any nonzero output (or NaN: never written) shows.
      EXPECT_EQ(r->max_abs_err, 0.0) << kernel << " " << dtype_name(dt);
    }
  }
}

// The split plan counts decode_tc_ctas_per_sm blocks per SM; the device should fit at least as
// many.
TEST(PagedDecodeTc, OccupancyCoversPlanTable) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  for (const int32_t d : {64, 80, 96, 128, 256}) {
    for (const int32_t requested : {2, 3, 4}) {
      // What runs: head dim 256 takes 3 bf16 stages at most (4 exceed a block's shared memory).
      const int32_t stages = ops::resolve_decode_tc_stages(requested, d);
      EXPECT_LE(ops::decode_tc_smem_bytes(d, stages), ops::kMaxSmemPerBlock) << d;
      const int32_t got = ops::decode_tc_occupancy(*cuda, d, stages);
      std::cout << "[ occupancy] head_dim " << d << " stages " << stages << ": " << got
                << " blocks/SM (plan table " << ops::decode_tc_ctas_per_sm(d, stages) << ")"
                << std::endl;
      // More is fine (the plan is then conservative: the table caps at 4 blocks); fewer means
      // the plan counts slots that do not exist.
      EXPECT_GE(got, ops::decode_tc_ctas_per_sm(d, stages))
          << "head_dim " << d << " stages " << stages;
    }
  }
  EXPECT_EQ(ops::resolve_decode_tc_stages(4, 256), 3);
  EXPECT_EQ(ops::resolve_decode_tc_stages(4, 128), 4);
}

}  // namespace
}  // namespace kvserve

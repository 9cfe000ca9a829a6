// The paged kernels' contiguous mode (page_ids null: what cuda-ragged runs on the K/V it gathered)
// against their in-place read of the same K/V through page ids: the outputs must be equal bit for
// bit, because only the address differs (paged_decode_params.h). Cases: the CUDA-core decode
// kernel, the tensor-core decode kernel with and without splits, and the prefill kernel (causal
// extend over a cached prefix, and cross-attention), on bf16 and fp8 pools at page sizes 1, 16 and
// 128, GQA groups 1 and 4, head dims 64 and 128 (80, 96 and 256 on a sample), with an empty
// request. The contiguous K/V come from ops::gather_kv on the device (an fp8 pool's bytes copied as
// stored), as the backend makes them. And the prefill kernel's strided rows (Whisper's encoder
// reads packed q|k|v rows). Skips itself without a CUDA device. Seeds are printed.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "kvserve/platform/ops/varlen_attention.h"
#include "support/cuda_param_test.h"
#include "support/packed_qkv.h"

namespace kvserve {
namespace {

struct Case {
  DType kv_dtype;
  int32_t page_size;
  int32_t group;
  int32_t head_dim;
};

std::string case_name(const testing::TestParamInfo<Case>& info) {
  return test_support::fp8_grid_name(
      {info.param.kv_dtype, info.param.page_size, info.param.group, info.param.head_dim});
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const DType dt : {DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2}) {
    for (const int32_t ps : {1, 16, 128}) {
      for (const int32_t group : {1, 4}) {
        for (const int32_t d : {64, 128})
          out.push_back({dt, ps, group, d});
      }
    }
  }
  // Head dims 80, 96 and 256: bf16 and e4m3, on a sample of page sizes and groups.
  for (const int32_t d : {80, 96, 256}) {
    out.push_back({DType::kBF16, 16, 4, d});
    out.push_back({DType::kFP8E4M3, 1, 1, d});
  }
  return out;
}

// A fragmented pool of random K/V (bf16 near N(0, 1), or fp8 bytes with the top exponent bit
// clear: finite for both formats), the requests' page lists in shuffled order, and the same
// requests' K/V gathered contiguously on the device.
class Pool {
 public:
  Pool(platform::Platform& cuda, const Case& c, std::vector<int32_t> lens, uint64_t seed)
      : cuda_(cuda), c_(c), lens_(std::move(lens)) {
    std::mt19937_64 rng(seed);
    const int32_t ps = c.page_size;
    const auto batch = static_cast<int32_t>(lens_.size());
    page_indptr_.assign(static_cast<size_t>(batch) + 1, 0);
    row_indptr_.assign(static_cast<size_t>(batch) + 1, 0);
    for (int32_t b = 0; b < batch; ++b) {
      page_indptr_[b + 1] = page_indptr_[b] + (lens_[b] + ps - 1) / ps;
      row_indptr_[b + 1] = row_indptr_[b] + lens_[b];
    }
    const int32_t num_pages = page_indptr_[batch] + 5;
    std::vector<int32_t> all(static_cast<size_t>(num_pages - 1));
    std::iota(all.begin(), all.end(), 1);  // page 0 is padding
    std::shuffle(all.begin(), all.end(), rng);
    page_ids_.assign(all.begin(), all.begin() + page_indptr_[batch]);
    for (int32_t b = 0; b < batch; ++b) {
      for (int32_t t = 0; t < lens_[b]; ++t)
        slots_.push_back(
            static_cast<int32_t>(ops::kv_row_of(page_ids_.data(), page_indptr_[b], ps, t)));
    }
    num_slots_ = int64_t{num_pages} * ps;
    const size_t bytes = static_cast<size_t>(num_slots_ * row_elems()) * dtype_size(c.kv_dtype);
    k_ = random_cache(rng, bytes);
    v_ = random_cache(rng, bytes);
    d_k_ = upload(k_);
    d_v_ = upload(v_);
    d_page_indptr_ = upload(page_indptr_);
    d_page_ids_ = upload(page_ids_.empty() ? std::vector<int32_t>{0} : page_ids_);
    d_row_indptr_ = upload(row_indptr_);
    d_lens_ = upload(lens_);
    // The gather, as cuda-ragged does it: the cache's bytes in slot-list order.
    const size_t gathered = std::max<size_t>(
        static_cast<size_t>(row_indptr_[batch] * row_elems()) * dtype_size(c.kv_dtype), 16);
    d_gk_ = std::move(cuda_.allocate_buffer(gathered).value());
    d_gv_ = std::move(cuda_.allocate_buffer(gathered).value());
    Buffer d_slots = upload(slots_.empty() ? std::vector<int32_t>{0} : slots_);
    ops::gather_kv(cuda_, {.k_cache = d_k_.data(),
                           .v_cache = d_v_.data(),
                           .slots = d_slots.data_as<const int32_t>(),
                           .k_out = d_gk_.data(),
                           .v_out = d_gv_.data(),
                           .dtype = c.kv_dtype,
                           .cache_dtype = c.kv_dtype,
                           .num_tokens = row_indptr_[batch],
                           .row_elems = row_elems(),
                           .num_slots = num_slots_});
    cuda_.synchronize();
  }

  int32_t batch() const { return static_cast<int32_t>(lens_.size()); }
  int64_t row_elems() const { return int64_t{2} * c_.head_dim; }  // 2 KV heads

  // The addressing fields of either read: in place through page ids, or contiguous rows.
  template <typename Params>
  void address(Params& p, bool contiguous, const int32_t* indptr_override = nullptr) const {
    p.k_cache = contiguous ? d_gk_.data() : d_k_.data();
    p.v_cache = contiguous ? d_gv_.data() : d_v_.data();
    p.kv_dtype = c_.kv_dtype;
    p.k_scale = is_float8(c_.kv_dtype) ? 0.75f : 1.0f;
    p.v_scale = is_float8(c_.kv_dtype) ? 1.25f : 1.0f;
    p.page_indptr = indptr_override != nullptr ? indptr_override
                    : contiguous               ? d_row_indptr_.data_as<int32_t>()
                                               : d_page_indptr_.data_as<int32_t>();
    p.page_ids = contiguous ? nullptr : d_page_ids_.data_as<int32_t>();
    p.page_size = contiguous ? 1 : c_.page_size;
  }
  const int32_t* d_lens() const { return d_lens_.data_as<int32_t>(); }

  template <typename T>
  Buffer upload(const std::vector<T>& host) {
    return test_support::upload(cuda_, host);
  }

 private:
  std::vector<uint8_t> random_cache(std::mt19937_64& rng, size_t bytes) const {
    std::vector<uint8_t> out(bytes);
    if (is_float8(c_.kv_dtype)) {
      for (uint8_t& b : out)
        b = static_cast<uint8_t>(rng() & 0xBF);
      return out;
    }
    std::normal_distribution<float> n(0.f, 1.f);
    auto* h = reinterpret_cast<uint16_t*>(out.data());
    for (size_t i = 0; i < bytes / 2; ++i)
      h[i] = float_to_bf16(n(rng));
    return out;
  }

  platform::Platform& cuda_;
  Case c_;
  std::vector<int32_t> lens_;
  std::vector<int32_t> page_indptr_, row_indptr_, page_ids_, slots_;
  int64_t num_slots_ = 0;
  std::vector<uint8_t> k_, v_;
  Buffer d_k_, d_v_, d_page_indptr_, d_page_ids_, d_row_indptr_, d_lens_, d_gk_, d_gv_;
};

std::vector<uint16_t> random_q(std::mt19937_64& rng, int64_t n) {
  std::normal_distribution<float> dist(0.f, 1.f);
  std::vector<uint16_t> q(static_cast<size_t>(n));
  for (uint16_t& x : q)
    x = float_to_bf16(dist(rng));
  return q;
}

std::vector<uint16_t> read(platform::Platform& cuda, const Buffer& buf, size_t elems) {
  std::vector<uint16_t> out(elems);
  cuda.copy(out.data(), buf.data(), elems * 2, platform::CopyKind::kDeviceToHost);
  cuda.synchronize();
  return out;
}

// Index of the first differing element, or -1.
int64_t first_difference(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  const auto m = std::mismatch(a.begin(), a.end(), b.begin());
  return m.first == a.end() ? -1 : m.first - a.begin();
}

class ContiguousKv : public test_support::CudaParamTest<Case> {};

TEST_P(ContiguousKv, DecodeKernelsEqualInPlaceRead) {
  const Case c = GetParam();
  const uint64_t seed = 7000 + c.page_size * 10 + c.group + c.head_dim;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // Lengths across tile and page edges, one empty request.
  Pool pool(*cuda_, c, {1, 300, 0, 1037, 64, 2049}, seed);
  const int32_t hq = 2 * c.group;
  const size_t out_elems = static_cast<size_t>(pool.batch()) * hq * c.head_dim;
  const std::vector<uint16_t> q = random_q(rng, static_cast<int64_t>(out_elems));
  Buffer d_q = pool.upload(q);
  Buffer d_out = std::move(cuda_->allocate_buffer(out_elems * 2).value());

  struct Run {
    const char* kernel;
    ops::PagedDecodePlan plan;
  };
  const int32_t sms = ops::num_compute_units(*cuda_);
  std::vector<Run> runs = {
      {"decode", ops::plan_paged_decode(pool.batch(), hq, 2, c.head_dim, 2049, sms)},
      {"tc", ops::plan_paged_decode_tc(pool.batch(), hq, 2, c.head_dim, 2049, sms)},
      {"tc", ops::PagedDecodePlan{.num_splits = 4, .tokens_per_split = 512}},
      {"tc", ops::PagedDecodePlan{.num_splits = 3, .min_tokens_per_split = 256}},
  };
  int32_t max_splits = 1;
  for (const Run& r : runs)
    max_splits = std::max(max_splits, r.plan.num_splits);
  const size_t ws_floats = static_cast<size_t>(pool.batch()) * hq * max_splits * (c.head_dim + 1);
  Buffer d_ws = std::move(cuda_->allocate_buffer(ws_floats * 4).value());
  for (const Run& r : runs) {
    SCOPED_TRACE(std::string(r.kernel) + " splits " + std::to_string(r.plan.num_splits));
    std::vector<uint16_t> outs[2];
    for (const bool contiguous : {false, true}) {
      ops::PagedDecodeParams p;
      p.q = d_q.data();
      pool.address(p, contiguous);
      p.seq_lens = pool.d_lens();
      p.out = d_out.data();
      if (r.plan.num_splits > 1) {
        p.partial_out = d_ws.data_as<float>();
        p.partial_lse = d_ws.data_as<float>() +
                        static_cast<size_t>(pool.batch()) * hq * r.plan.num_splits * c.head_dim;
      }
      p.batch = pool.batch();
      p.num_q_heads = hq;
      p.num_kv_heads = 2;
      p.head_dim = c.head_dim;
      p.num_splits = r.plan.num_splits;
      p.tokens_per_split = r.plan.tokens_per_split;
      p.min_tokens_per_split = r.plan.min_tokens_per_split;
      p.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      cuda_->memset(d_out.data(), 0xff, out_elems * 2);
      if (std::string(r.kernel) == "tc") {
        ops::paged_decode_tc(*cuda_, p);
      } else {
        ops::paged_decode(*cuda_, p);
      }
      outs[contiguous] = read(*cuda_, d_out, out_elems);
    }
    EXPECT_EQ(first_difference(outs[0], outs[1]), -1);
    // Not trivially equal: the empty request's rows are zeros, the others are not.
    const size_t row = static_cast<size_t>(hq) * c.head_dim;
    EXPECT_EQ(outs[1][2 * row], 0);
    EXPECT_NE(std::count(outs[1].begin(), outs[1].begin() + row, uint16_t{0}),
              static_cast<std::ptrdiff_t>(row));
  }
}

TEST_P(ContiguousKv, PrefillKernelEqualsInPlaceRead) {
  const Case c = GetParam();
  const uint64_t seed = 9000 + c.page_size * 10 + c.group + c.head_dim;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  // kv_lens: cached prefix + new tokens (causal), or the encoder region (cross).
  Pool pool(*cuda_, c, {300, 77, 0, 1500}, seed);
  const std::vector<int32_t> q_lens = {45, 77, 0, 130};
  std::vector<int32_t> qo(q_lens.size() + 1, 0);
  for (size_t b = 0; b < q_lens.size(); ++b)
    qo[b + 1] = qo[b] + q_lens[b];
  const int32_t hq = 2 * c.group;
  const size_t out_elems = static_cast<size_t>(qo.back()) * hq * c.head_dim;
  const std::vector<uint16_t> q = random_q(rng, static_cast<int64_t>(out_elems));
  Buffer d_q = pool.upload(q);
  Buffer d_qo = pool.upload(qo);
  Buffer d_out = std::move(cuda_->allocate_buffer(out_elems * 2).value());
  for (const bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "cross");
    std::vector<uint16_t> outs[2];
    for (const bool contiguous : {false, true}) {
      ops::PagedPrefillParams p;
      p.q = d_q.data();
      pool.address(p, contiguous);
      p.qo_indptr = d_qo.data_as<int32_t>();
      p.kv_lens = pool.d_lens();
      p.out = d_out.data();
      p.batch = pool.batch();
      p.total_q = qo.back();
      p.num_q_heads = hq;
      p.num_kv_heads = 2;
      p.head_dim = c.head_dim;
      p.causal = causal;
      p.sm_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
      cuda_->memset(d_out.data(), 0xff, out_elems * 2);
      ops::paged_prefill(*cuda_, p);
      outs[contiguous] = read(*cuda_, d_out, out_elems);
    }
    EXPECT_EQ(first_difference(outs[0], outs[1]), -1);
    EXPECT_EQ(std::count(outs[1].begin(), outs[1].end(), uint16_t{0xffff}), 0)
        << "rows left unwritten";
  }
}

INSTANTIATE_TEST_SUITE_P(Grid, ContiguousKv, testing::ValuesIn(cases()), case_name);

// Strided rows (q_stride / kv_stride): the prefill kernel reading q, k and v in place from packed
// q|k|v rows, as Whisper's encoder does, equals the same kernel on dense copies bit for bit; two
// sequences, not causal and causal, GQA groups 1 and 4, head dims 64, 80, 128 and 256.
TEST(ContiguousKvStrided, PrefillReadsPackedRowsInPlace) {
  auto made = platform::create_platform(Device{DeviceKind::kCuda, 0});
  if (!made.is_ok()) GTEST_SKIP() << made.status().to_string();
  platform::Platform& cuda = **made;
  const uint64_t seed = 13000;
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  const std::vector<int32_t> cu = {0, 700, 1500};  // two sequences, queries = keys
  const int32_t n = cu.back();
  for (const int32_t d : {64, 80, 128, 256}) {
    for (const int32_t group : {1, 4}) {
      const int32_t kvh = 2, hq = kvh * group;
      const int64_t qw = int64_t{hq} * d, kw = int64_t{kvh} * d, row = qw + 2 * kw;
      const std::vector<uint16_t> packed = random_q(rng, n * row);
      const auto [q, k, v] = test_support::split_packed_rows(packed, n, qw, kw);
      auto upload = [&](const auto& host) { return test_support::upload(cuda, host); };
      Buffer d_packed = upload(packed), d_q = upload(q), d_k = upload(k), d_v = upload(v);
      Buffer d_cu = upload(cu);
      const std::vector<int32_t> lens = {cu[1] - cu[0], cu[2] - cu[1]};
      Buffer d_lens = upload(lens);
      const size_t out_elems = static_cast<size_t>(n) * qw;
      Buffer d_out = std::move(cuda.allocate_buffer(out_elems * 2).value());
      for (const bool causal : {false, true}) {
        SCOPED_TRACE(fmt::format("d {} group {} {}", d, group, causal ? "causal" : "full"));
        std::vector<uint16_t> outs[2];
        for (const bool strided : {false, true}) {
          ops::PagedPrefillParams p;
          const auto* base = d_packed.data_as<uint16_t>();
          p.q = strided ? static_cast<const void*>(base) : d_q.data();
          p.k_cache = strided ? static_cast<const void*>(base + qw) : d_k.data();
          p.v_cache = strided ? static_cast<const void*>(base + qw + kw) : d_v.data();
          p.q_stride = strided ? row : 0;
          p.kv_stride = strided ? row : 0;
          p.qo_indptr = d_cu.data_as<int32_t>();
          p.page_indptr = d_cu.data_as<int32_t>();
          p.page_ids = nullptr;
          p.page_size = 1;
          p.kv_lens = d_lens.data_as<int32_t>();
          p.out = d_out.data();
          p.batch = 2;
          p.total_q = n;
          p.num_q_heads = hq;
          p.num_kv_heads = kvh;
          p.head_dim = d;
          p.causal = causal;
          p.sm_scale = 1.0f / std::sqrt(static_cast<float>(d));
          cuda.memset(d_out.data(), 0xff, out_elems * 2);
          ops::paged_prefill(cuda, p);
          outs[strided] = read(cuda, d_out, out_elems);
        }
        EXPECT_EQ(first_difference(outs[0], outs[1]), -1);
        EXPECT_EQ(std::count(outs[1].begin(), outs[1].end(), uint16_t{0xffff}), 0);
      }
    }
  }
}

}  // namespace
}  // namespace kvserve

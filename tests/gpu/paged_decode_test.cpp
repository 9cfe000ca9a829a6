// cuda-paged decode attention against the float64 reference (ops::reference::paged_decode) on a
// fragmented pool: every page size, GQA group 1-8, head_dim 64 and 128 (80, 96 and 256 on a
// sample of page sizes and groups), ragged and empty
// sequences, with and without split-KV; and an fp8 KV cache (e4m3 and e5m2, scales that are not
// 1) against the reference on the dequantised fp8 values, with the bf16 cases' bound. Skips itself
// without a CUDA device.
#include <gtest/gtest.h>

#include <iostream>

#include "kvserve/bench/attention.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/platform.h"
#include "support/cuda_param_test.h"

namespace kvserve {
namespace {

struct Case {
  int32_t page_size;
  int32_t group;
  int32_t head_dim;
  int32_t num_splits;  // 0: planned
};

using PagedDecodeTest = test_support::CudaParamTest<Case>;

TEST_P(PagedDecodeTest, MatchesFloat64Reference) {
  const Case c = GetParam();
  bench::AttentionBenchConfig cfg = test_support::check_config(c.page_size, c.group, c.head_dim);
  cfg.num_splits = c.num_splits;
  cfg.seed = 17 + c.page_size + 100 * c.group + c.head_dim;
  cfg.seq_lens = {0, 1, 17, 300, 1100, c.page_size, 2 * c.page_size + 1};
  std::cout << "[ seed     ] " << cfg.seed << std::endl;
  const auto r = bench::run_attention_bench(*cuda_, cfg);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // Rounding the exact result to bf16 costs up to half an ulp; float32 accumulation adds little.
  EXPECT_LE(r->max_ulp_err, 1.0) << "max abs error " << r->max_abs_err << ", splits "
                                 << r->num_splits;
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const int32_t ps : {1, 16, 32, 64, 128}) {
    for (const int32_t group : {1, 3, 4, 7, 8}) {
      for (const int32_t d : {64, 128}) {
        for (const int32_t splits : {1, 0, 5})
          out.push_back({ps, group, d, splits});
      }
    }
  }
  // Head dims 80 and 96 (lanes padded to 16) and 256 (32 lanes per row): a sample.
  for (const int32_t d : {80, 96, 256}) {
    for (const int32_t ps : {1, 16, 128}) {
      for (const int32_t group : {1, 3, 8}) {
        for (const int32_t splits : {1, 0, 5})
          out.push_back({ps, group, d, splits});
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Configs, PagedDecodeTest, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) {
                           return "ps" + std::to_string(i.param.page_size) + "_g" +
                                  std::to_string(i.param.group) + "_d" +
                                  std::to_string(i.param.head_dim) + "_s" +
                                  std::to_string(i.param.num_splits);
                         });

// --- an fp8 KV cache -------------------------------------------------------------------------
struct Fp8Case {
  test_support::Fp8GridPoint kv;
  int32_t num_splits;  // 0: planned
};

using PagedDecodeFp8Test = test_support::CudaParamTest<Fp8Case>;

TEST_P(PagedDecodeFp8Test, MatchesFloat64ReferenceOnDequantisedValues) {
  const Fp8Case f = GetParam();
  const test_support::Fp8GridPoint& c = f.kv;
  bench::AttentionBenchConfig cfg = test_support::check_config(c.page_size, c.group, c.head_dim);
  cfg.kv_dtype = c.dtype;
  // Scales that are not powers of two: stored = value / scale exercises the kernel's folding of
  // k_scale into the softmax scale and of v_scale into the output.
  cfg.k_scale = 0.037f;
  cfg.v_scale = 1.7f;
  cfg.num_splits = f.num_splits;
  cfg.seed = 4017 + c.page_size + 100 * c.group + c.head_dim + 7 * f.num_splits +
             (c.dtype == DType::kFP8E5M2 ? 50000 : 0);
  cfg.seq_lens = {0, 1, 17, 300, 1101, c.page_size, 2 * c.page_size + 1};
  std::cout << "[ seed     ] " << cfg.seed << std::endl;
  const auto r = bench::run_attention_bench(*cuda_, cfg);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  // The reference reads the same fp8 bytes dequantised in float64, so quantisation is not an
  // error here: the bf16 cases' bound holds.
  EXPECT_LE(r->max_ulp_err, 1.0) << "max abs error " << r->max_abs_err << ", splits "
                                 << r->num_splits;
  EXPECT_DOUBLE_EQ(r->kv_bytes, 2.0 * (1 + 17 + 300 + 1101 + 3 * c.page_size + 1) *
                                    cfg.num_kv_heads * c.head_dim)
      << "one byte per element";
}

std::vector<Fp8Case> fp8_cases() {
  std::vector<Fp8Case> out;
  for (const test_support::Fp8GridPoint& kv : test_support::fp8_grid()) {
    for (const int32_t splits : {1, 0})
      out.push_back({kv, splits});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fp8, PagedDecodeFp8Test, testing::ValuesIn(fp8_cases()),
                         [](const testing::TestParamInfo<Fp8Case>& i) {
                           return test_support::fp8_grid_name(i.param.kv) + "_s" +
                                  std::to_string(i.param.num_splits);
                         });

}  // namespace
}  // namespace kvserve

// Sliding windows and soft-capping in the CUDA attention kernels against the float64 references:
// decode (the CUDA-core and the tensor-core kernel, planned and forced splits, so a window's
// positions are what gets split) and extend over a cached prefix (the prefill kernel, every tile
// variant, and the per-token decode path), for windows 0, 1, 17 and one larger than any context,
// soft-cap 0 and 30, head dims 64 / 80 / 96 / 128 / 256 and page sizes 1 / 16 / 64. The cross
// product is sampled (each window x soft-cap pair meets every head dim once, page sizes and
// kernels rotate), so every value of every axis runs. Scores are scaled up (sm_scale 12 /
// sqrt(head_dim)) so that a cap of 30 changes them far beyond the bounds. The bounds are the bf16
// cases' of paged_decode_test (CUDA-core decode: 1 ulp) and of the tensor-core kernels' tests
// (8 ulps: P is rounded to bf16). Every case prints its seed; skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <string>
#include <vector>

#include "kvserve/bench/attention.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/platform.h"
#include "support/cuda_param_test.h"

namespace kvserve {
namespace {

constexpr int32_t kWideWindow = 100000;  // larger than every context here: the whole context

struct Case {
  int32_t window_left;
  float softcap;
  int32_t head_dim;
  int32_t page_size;
  int32_t group;
};

std::string case_name(const Case& c) {
  return "w" + std::to_string(c.window_left) + "_cap" +
         std::to_string(static_cast<int>(c.softcap)) + "_d" + std::to_string(c.head_dim) + "_ps" +
         std::to_string(c.page_size) + "_g" + std::to_string(c.group);
}

// Each (window, soft-cap) pair with every head dim; page size and GQA group rotate.
std::vector<Case> cases() {
  std::vector<Case> out;
  const int32_t page_sizes[] = {1, 16, 64};
  const int32_t groups[] = {1, 4, 8};
  int i = 0;
  for (const int32_t w : {0, 1, 17, kWideWindow}) {
    for (const float cap : {0.0f, 30.0f}) {
      for (const int32_t d : {64, 80, 96, 128, 256}) {
        out.push_back({w, cap, d, page_sizes[i % 3], groups[(i / 3) % 3]});
        ++i;
      }
    }
  }
  return out;
}

bench::AttentionBenchConfig base_config(const Case& c, uint64_t seed) {
  bench::AttentionBenchConfig cfg = test_support::check_config(c.page_size, c.group, c.head_dim);
  cfg.window_left = c.window_left;
  cfg.logit_softcap = c.softcap;
  cfg.sm_scale = 12.0f / std::sqrt(static_cast<float>(c.head_dim));
  cfg.seed = seed;
  return cfg;
}

using AttentionWindowTest = test_support::CudaParamTest<Case>;

TEST_P(AttentionWindowTest, DecodeMatchesFloat64Reference) {
  const Case c = GetParam();
  struct Mode {
    const char* kernel;
    int32_t num_splits;            // 0: planned (per-request splits)
    int32_t min_tokens_per_split;  // -1: the plan's
    double bound;                  // bf16 ulps
  };
  const Mode modes[] = {
      {"decode", 0, -1, 1.0}, {"decode", 5, -1, 1.0}, {"decode", 7, 16, 1.0},
      {"tc", 0, -1, 8.0},     {"tc", 3, -1, 8.0},     {"tc", 16, 64, 8.0},
  };
  int m = 0;
  for (const Mode& mode : modes) {
    bench::AttentionBenchConfig cfg =
        base_config(c, 5000 + 13 * c.page_size + 1000 * c.group + c.head_dim + 7 * m++ +
                           (c.softcap > 0 ? 1 : 0) + 100000 * (c.window_left % 97));
    cfg.kernel = mode.kernel;
    cfg.num_splits = mode.num_splits;
    cfg.min_tokens_per_split = mode.min_tokens_per_split;
    cfg.seq_lens = {0, 1, 17, 18, 300, 1100, c.page_size, 2 * c.page_size + 1};
    std::cout << "[ seed     ] " << cfg.seed << " " << mode.kernel << " splits " << mode.num_splits
              << std::endl;
    const auto r = bench::run_attention_bench(*cuda_, cfg);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    EXPECT_LE(r->max_ulp_err, mode.bound)
        << mode.kernel << " splits " << r->num_splits << " abs " << r->max_abs_err;
  }
}

TEST_P(AttentionWindowTest, ExtendMatchesFloat64Reference) {
  const Case c = GetParam();
  // New tokens after cached prefixes (one request without a prefix, one of a single token).
  const std::vector<int32_t> q_lens = {17, 200, 1, 65};
  const std::vector<int32_t> prefix_lens = {0, 700, 33, 130};
  int i = 0;
  for (const char* kernel : {"prefill", "decode-per-token"}) {
    for (const char* variant : {"m64w4", "m128w8", "m128w4"}) {
      if (std::string(kernel) == "decode-per-token" && std::string(variant) != "m64w4") continue;
      bench::AttentionBenchConfig cfg =
          base_config(c, 9000 + 13 * c.page_size + 1000 * c.group + c.head_dim + 7 * i++ +
                             (c.softcap > 0 ? 1 : 0) + 100000 * (c.window_left % 97));
      cfg.mode = "prefill";
      cfg.kernel = kernel;
      cfg.variant = std::string(kernel) == "prefill" ? variant : "auto";
      cfg.check_max_work = 1e9;
      cfg.q_lens = q_lens;
      for (size_t b = 0; b < q_lens.size(); ++b)
        cfg.kv_lens.push_back(prefix_lens[b] + q_lens[b]);
      std::cout << "[ seed     ] " << cfg.seed << " " << kernel << " " << cfg.variant << std::endl;
      const auto r = bench::run_attention_bench(*cuda_, cfg);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      const double bound = std::string(kernel) == "prefill" ? 8.0 : 1.0;
      EXPECT_LE(r->max_ulp_err, bound) << kernel << " " << r->variant << " abs " << r->max_abs_err;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sampled, AttentionWindowTest, testing::ValuesIn(cases()),
                         [](const testing::TestParamInfo<Case>& i) { return case_name(i.param); });

// An fp8 cache with a window and a cap: the scales fold into the capped score too.
TEST(AttentionWindow, Fp8DecodeAndExtend) {
  auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
  if (!p.is_ok()) GTEST_SKIP() << p.status().to_string();
  platform::Platform& cuda = **p;
  for (const DType dt : {DType::kFP8E4M3, DType::kFP8E5M2}) {
    for (const char* kernel : {"decode", "tc", "prefill"}) {
      const Case c{17, 30.0f, 96, 16, 4};
      bench::AttentionBenchConfig cfg = base_config(c, dt == DType::kFP8E4M3 ? 77 : 78);
      cfg.kv_dtype = dt;
      cfg.k_scale = 0.037f;
      cfg.v_scale = 1.7f;
      cfg.kernel = kernel;
      if (std::string(kernel) == "prefill") {
        cfg.mode = "prefill";
        cfg.q_lens = {17, 90};
        cfg.kv_lens = {17, 400};
      } else {
        cfg.seq_lens = {1, 17, 300, 1100};
      }
      std::cout << "[ seed     ] " << cfg.seed << " " << kernel << " " << dtype_name(dt)
                << std::endl;
      const auto r = bench::run_attention_bench(cuda, cfg);
      ASSERT_TRUE(r.is_ok()) << r.status().to_string();
      EXPECT_LE(r->max_ulp_err, std::string(kernel) == "decode" ? 1.0 : 8.0)
          << kernel << " " << dtype_name(dt) << " abs " << r->max_abs_err;
    }
  }
}

}  // namespace
}  // namespace kvserve

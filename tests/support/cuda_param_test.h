// What the CUDA kernel suites share: a parameterised fixture holding a CUDA platform (the test
// skips itself without a device), the bench configuration their paged-attention checks start
// from, and the grid of fp8 KV cases they run (dtype x page size x GQA group x head_dim; each
// suite adds its own last dimension).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/bench/attention.h"
#include "kvserve/core/dtype.h"
#include "kvserve/core/tensor.h"
#include "kvserve/platform/platform.h"

namespace kvserve::test_support {

template <typename Param>
class CudaParamTest : public testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
    if (!p.is_ok()) GTEST_SKIP() << p.status().to_string();
    cuda_ = std::move(p).value();
  }
  std::unique_ptr<platform::Platform> cuda_;
};

struct Fp8GridPoint {
  DType dtype;
  int32_t page_size;
  int32_t group;  // query heads per KV head
  int32_t head_dim;
};

// The bench configuration every paged-attention check starts from: 2 KV heads with `group` query
// heads each, one launch (the float64 check is the point, not the time), no copy-bandwidth
// measurement. Each suite sets its mode, kernel, lengths, dtype and seed on top.
inline bench::AttentionBenchConfig check_config(int32_t page_size, int32_t group,
                                                int32_t head_dim) {
  bench::AttentionBenchConfig cfg;
  cfg.page_size = page_size;
  cfg.num_kv_heads = 2;
  cfg.num_q_heads = 2 * group;
  cfg.head_dim = head_dim;
  cfg.iters = 1;
  cfg.measure_copy = false;
  return cfg;
}

// {e4m3, e5m2} x page sizes {1, 16, 64, 128} x groups {1, 4, 8} x head_dim {64, 128}.
inline std::vector<Fp8GridPoint> fp8_grid() {
  std::vector<Fp8GridPoint> out;
  for (const DType dt : {DType::kFP8E4M3, DType::kFP8E5M2}) {
    for (const int32_t ps : {1, 16, 64, 128}) {
      for (const int32_t group : {1, 4, 8}) {
        for (const int32_t d : {64, 128})
          out.push_back({dt, ps, group, d});
      }
    }
  }
  return out;
}

// A device copy of `host` (at least 16 bytes, so an empty vector still has an address).
template <typename T>
Buffer upload(platform::Platform& platform, const std::vector<T>& host) {
  Buffer buf =
      std::move(platform.allocate_buffer(std::max<size_t>(host.size() * sizeof(T), 16)).value());
  if (!host.empty()) {
    platform.copy(buf.data(), host.data(), host.size() * sizeof(T),
                  platform::CopyKind::kHostToDevice);
  }
  return buf;
}

// "fp8_e4m3_ps16_g4_d128": a gtest-safe name for a grid point.
inline std::string fp8_grid_name(const Fp8GridPoint& p) {
  return std::string(dtype_name(p.dtype)) + "_ps" + std::to_string(p.page_size) + "_g" +
         std::to_string(p.group) + "_d" + std::to_string(p.head_dim);
}

}  // namespace kvserve::test_support

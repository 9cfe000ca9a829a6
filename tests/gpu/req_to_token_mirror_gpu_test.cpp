// The req_to_token mirror with the CUDA kernels: ops::write_req_to_token and
// ops::build_kv_indices against their CPU reference implementations on random batches, and the
// mirror through a request lifecycle written by cuda-paged / cuda-ragged's metadata code
// (support/mirror_scenario.h; tests/unit/req_to_token_mirror_test runs the same on the CPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <numeric>
#include <ostream>
#include <random>
#include <vector>

#include "kvserve/platform/ops/req_to_token.h"
#include "kvserve/platform/platform.h"
#include "support/mirror_scenario.h"

namespace kvserve {
namespace {

std::unique_ptr<platform::Platform> cuda_or_null() {
  auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
  return p.is_ok() ? std::move(p).value() : nullptr;
}

Buffer to_device(platform::Platform& cuda, const std::vector<int32_t>& v) {
  auto buf = std::move(cuda.allocate_buffer(std::max<size_t>(v.size(), 1) * 4).value());
  if (!v.empty()) cuda.copy(buf.data(), v.data(), v.size() * 4, platform::CopyKind::kHostToDevice);
  return buf;
}

std::vector<int32_t> to_host(platform::Platform& cuda, const Buffer& buf, size_t n) {
  std::vector<int32_t> v(n);
  if (n > 0) cuda.copy(v.data(), buf.data(), n * 4, platform::CopyKind::kDeviceToHost);
  cuda.synchronize();
  return v;
}

// Random tables and batches; the kernels' results must equal the CPU ops' bit for bit.
TEST(ReqToTokenKernels, EqualTheCpuReference) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  constexpr int32_t kRows = 33, kWidth = 4100;
  for (const int32_t ps : {1, 16, 64, 128}) {
    for (uint32_t seed = 1; seed <= 5; ++seed) {
      SCOPED_TRACE("page size " + std::to_string(ps) + ", seed " + std::to_string(seed));
      std::mt19937 rng(seed * 131 + static_cast<uint32_t>(ps));
      std::vector<int32_t> table(static_cast<size_t>(kRows) * kWidth);
      std::uniform_int_distribution<int32_t> slot(0, 1 << 24);
      for (auto& x : table)
        x = slot(rng);
      // Write: distinct rows, prefixes from random starts, new segments after them.
      std::vector<int32_t> all_rows(kRows - 1);
      std::iota(all_rows.begin(), all_rows.end(), 1);
      std::shuffle(all_rows.begin(), all_rows.end(), rng);
      const int32_t bs = std::uniform_int_distribution<int32_t>(1, kRows - 1)(rng);
      std::vector<int32_t> rows(all_rows.begin(), all_rows.begin() + bs);
      std::vector<int32_t> pre_indptr{0}, pre_start, pre_slots, new_indptr{0}, new_start, new_slots;
      std::vector<int32_t> starts, indptr{0};
      for (int32_t b = 0; b < bs; ++b) {
        const int32_t p = std::uniform_int_distribution<int32_t>(0, 3000)(rng);
        const int32_t s = std::uniform_int_distribution<int32_t>(0, p)(rng);
        const int32_t n = std::uniform_int_distribution<int32_t>(0, 1000)(rng);
        pre_start.push_back(s);
        for (int32_t i = s; i < p; ++i)
          pre_slots.push_back(slot(rng));
        pre_indptr.push_back(static_cast<int32_t>(pre_slots.size()));
        new_start.push_back(p);
        for (int32_t i = 0; i < n; ++i)
          new_slots.push_back(slot(rng));
        new_indptr.push_back(static_cast<int32_t>(new_slots.size()));
        const int32_t start = std::uniform_int_distribution<int32_t>(0, 8)(rng) * ps;
        const int32_t len = std::uniform_int_distribution<int32_t>(0, 3900 - start)(rng);
        starts.push_back(start);
        indptr.push_back(indptr.back() + (len + ps - 1) / ps);
      }
      Buffer d_table = to_device(*cuda, table), d_rows = to_device(*cuda, rows),
             d_pre_indptr = to_device(*cuda, pre_indptr), d_pre_start = to_device(*cuda, pre_start),
             d_pre_slots = to_device(*cuda, pre_slots), d_new_indptr = to_device(*cuda, new_indptr),
             d_new_start = to_device(*cuda, new_start), d_new_slots = to_device(*cuda, new_slots),
             d_starts = to_device(*cuda, starts), d_indptr = to_device(*cuda, indptr);
      Buffer d_out = std::move(cuda->allocate_buffer(std::max(indptr.back(), 1) * 4).value());
      ops::WriteReqToTokenParams w{.stride = kWidth,
                                   .table_rows = kRows,
                                   .rows = rows.data(),
                                   .prefix_indptr = pre_indptr.data(),
                                   .prefix_start = pre_start.data(),
                                   .prefix_slots = pre_slots.data(),
                                   .new_indptr = new_indptr.data(),
                                   .new_start = new_start.data(),
                                   .new_slots = new_slots.data(),
                                   .batch = bs};
      std::vector<int32_t> want_table = table;
      w.table = want_table.data();
      ops::cpu::write_req_to_token(w);
      w = {.table = d_table.data_as<int32_t>(),
           .stride = kWidth,
           .table_rows = kRows,
           .rows = d_rows.data_as<int32_t>(),
           .prefix_indptr = d_pre_indptr.data_as<int32_t>(),
           .prefix_start = d_pre_start.data_as<int32_t>(),
           .prefix_slots = d_pre_slots.data_as<int32_t>(),
           .new_indptr = d_new_indptr.data_as<int32_t>(),
           .new_start = d_new_start.data_as<int32_t>(),
           .new_slots = d_new_slots.data_as<int32_t>(),
           .batch = bs};
      ops::write_req_to_token(*cuda, w);
      ASSERT_EQ(to_host(*cuda, d_table, table.size()), want_table);

      // Build from the written table, page ids (ps) and slots (1) from the same starts.
      for (const int32_t unit : {ps, 1}) {
        std::vector<int32_t> unit_indptr{0};
        for (int32_t b = 0; b < bs; ++b) {
          const int32_t entries = indptr[b + 1] - indptr[b];
          unit_indptr.push_back(unit_indptr.back() + entries * (ps / unit));
        }
        std::vector<int32_t> want(static_cast<size_t>(unit_indptr.back()));
        ops::cpu::build_kv_indices({.table = want_table.data(),
                                    .stride = kWidth,
                                    .table_rows = kRows,
                                    .rows = rows.data(),
                                    .starts = starts.data(),
                                    .indptr = unit_indptr.data(),
                                    .out = want.data(),
                                    .batch = bs,
                                    .page_size = unit});
        Buffer d_unit_indptr = to_device(*cuda, unit_indptr);
        Buffer d_unit_out =
            std::move(cuda->allocate_buffer(std::max<size_t>(want.size(), 1) * 4).value());
        ops::build_kv_indices(*cuda, {.table = d_table.data_as<int32_t>(),
                                      .stride = kWidth,
                                      .table_rows = kRows,
                                      .rows = d_rows.data_as<int32_t>(),
                                      .starts = d_starts.data_as<int32_t>(),
                                      .indptr = d_unit_indptr.data_as<int32_t>(),
                                      .out = d_unit_out.data_as<int32_t>(),
                                      .batch = bs,
                                      .page_size = unit});
        ASSERT_EQ(to_host(*cuda, d_unit_out, want.size()), want) << "unit " << unit;
      }
    }
  }
}

class MirrorScenarioGpuTest : public ::testing::TestWithParam<test_support::MirrorScenarioCase> {};

TEST_P(MirrorScenarioGpuTest, MirrorEqualsHostAfterEveryForward) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  test_support::expect_mirror_scenario(*cuda, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, MirrorScenarioGpuTest,
                         ::testing::ValuesIn(test_support::kMirrorScenarioCases),
                         [](const auto& i) {
                           return test_support::mirror_scenario_case_name(i.param);
                         });

// Encoder-decoder rows (Whisper): aligned layout through both backends, ragged through
// cuda-ragged, page sizes 1 and 16.
TEST(MirrorEncoderDecoderGpu, MirrorEqualsHostOnBothRegions) {
  auto cuda = cuda_or_null();
  if (!cuda) GTEST_SKIP() << "no CUDA device";
  test_support::expect_encoder_decoder_mirror_scenarios(*cuda);
}

}  // namespace
}  // namespace kvserve

// Error tiers on CUDA: a device buffer that cannot grow during a forward (injected through
// platform/allocation_faults.h) makes ModelRunner::forward return kOutOfMemory instead of a CHECK,
// for cuda-paged (eager, and with decode graphs captured) and cuda-ragged; the runner then serves
// the next forwards exactly as a runner that never failed (same kernels, same plans: bit for bit).
// Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/makemodel/make_model.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/allocation_faults.h"
#include "kvserve/platform/platform.h"
#include "support/model_session.h"
#include "support/scratch_dir.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

const fs::path& model_dir() {
  static const fs::path dir = [] {
    const fs::path d = test_support::make_scratch_dir("kvserve-gpu-fault-injection-qwen");
    makemodel::MakeModelOptions mm;
    mm.preset = "qwen2.5-0.5b-shape";  // head_dim 64, GQA 14/2: the paged kernels'
    mm.output = d;
    mm.seed = 17;
    mm.force = true;
    EXPECT_TRUE(makemodel::make_model(mm).is_ok());
    return d;
  }();
  return dir;
}

std::unique_ptr<model::ModelRunner> make_runner(attention::AttentionBackendKind backend,
                                                bool graphs,
                                                std::shared_ptr<platform::AllocationFaults> f) {
  model::ModelRunnerOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.page_size = 16;
  o.attention_backend = backend;
  o.max_total_tokens = 32768;
  o.max_running_requests = 8;
  o.cuda_graph_max_bs = 8;
  o.disable_cuda_graph = !graphs;
  o.device_pool.reserve = false;  // two runners at once, beside other GPU suites
  o.allocation_faults = std::move(f);
  auto r = model::ModelRunner::create(model_dir(), o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? std::move(r).value() : nullptr;
}

std::vector<std::vector<int32_t>> prompts(int32_t n, int32_t len, int32_t salt) {
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (int32_t b = 0; b < n; ++b) {
    for (int32_t i = 0; i < len + 13 * b; ++i)
      out[static_cast<size_t>(b)].push_back(1 + (i * 31 + b * 7 + salt) % 5000);
  }
  return out;
}

struct Case {
  attention::AttentionBackendKind backend;
  bool graphs;
};

class FaultInjectionGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(FaultInjectionGpuTest, FailedGrowthIsAStatusAndTheRunnerServesOn) {
  if (!platform::create_platform(Device{DeviceKind::kCuda, 0}).is_ok()) {
    GTEST_SKIP() << "no CUDA device";
  }
  auto faults = std::make_shared<platform::AllocationFaults>();
  auto faulty = make_runner(GetParam().backend, GetParam().graphs, faults);
  auto clean = make_runner(GetParam().backend, GetParam().graphs, nullptr);
  ASSERT_NE(faulty, nullptr);
  ASSERT_NE(clean, nullptr);

  // A short prefill and a few decode steps size the buffers for small batches.
  auto warm = [](model::ModelRunner& r) {
    test_support::ModelSession s(r, 2);
    (void)s.logits(prompts(2, 8, 1), false);
    for (int step = 0; step < 3; ++step)
      (void)s.logits({{5}, {6}}, true);
  };
  warm(*faulty);
  warm(*clean);

  // Each failure: a bigger batch than any before must grow a buffer; the first allocation of the
  // forward fails. The failed session is dropped (its rows and slots freed, as the scheduler
  // does), and the forward is asked again with nothing armed.
  for (const int32_t len : {300, 2000}) {
    {
      test_support::ModelSession s(*faulty, 4);
      mem::ForwardBatch b = s.batch(prompts(4, len, len), false);
      std::vector<float> logits;
      faults->arm(1);
      const Status st = faulty->forward(b, logits);
      EXPECT_EQ(st.code(), StatusCode::kOutOfMemory) << len << ": " << st.to_string();
      EXPECT_NE(st.message().find("injected fault"), std::string::npos) << st.message();
      EXPECT_EQ(faults->injected(), len == 300 ? 1 : 2);
      faults->disarm();
    }
    test_support::ModelSession got(*faulty, 4);
    test_support::ModelSession want(*clean, 4);
    EXPECT_EQ(got.logits(prompts(4, len, len), false), want.logits(prompts(4, len, len), false))
        << "prefill of " << len;
    for (int step = 0; step < 4; ++step) {
      const std::vector<std::vector<int32_t>> next = {{7 + step}, {8}, {9}, {10 + step}};
      EXPECT_EQ(got.logits(next, true), want.logits(next, true)) << len << " step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Backends, FaultInjectionGpuTest,
    ::testing::Values(Case{attention::AttentionBackendKind::kCudaPaged, false},
                      Case{attention::AttentionBackendKind::kCudaPaged, true},
                      Case{attention::AttentionBackendKind::kCudaRagged, false}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(i.param.backend == attention::AttentionBackendKind::kCudaPaged
                             ? "paged"
                             : "ragged") +
             (i.param.graphs ? "_graphs" : "_eager");
    });

}  // namespace
}  // namespace kvserve

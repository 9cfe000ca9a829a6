// The nccl communicator on one GPU (a group of one rank: NCCL cannot put two ranks on one
// device; two-GPU runs are the separate multi-GPU check): its collectives on device memory and a
// stream, and a ModelRunner whose forward takes the tensor-parallel path through it (masked
// embedding, all-reduces, zero-filled logits rows, decode graphs capturing NCCL) equal to the
// plain runner. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/dist/cpu_communicator.h"
#include "kvserve/dist/nccl_communicator.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/platform.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"

namespace kvserve {
namespace {

bool have_cuda() {
  return platform::create_platform(Device{DeviceKind::kCuda, 0}).is_ok();
}

std::unique_ptr<dist::Communicator> one_rank_nccl() {
  auto id = dist::nccl_unique_id();
  KV_CHECK(id.is_ok(), "{}", id.status().to_string());
  auto comm = dist::create_nccl_communicator(*id, 0, 1, 0);
  KV_CHECK(comm.is_ok(), "{}", comm.status().to_string());
  return std::move(comm).value();
}

TEST(NcclCommunicator, OneRankCollectivesOnTheDevice) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(dist::nccl_library_status().is_ok()) << dist::nccl_library_status().to_string();
  auto p = std::move(platform::create_platform(Device{DeviceKind::kCuda, 0}).value());
  platform::Stream stream(*p);
  auto comm = one_rank_nccl();
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);
  EXPECT_EQ(comm->backend(), "nccl");
  const int64_t n = 4099;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i)
    host[i] = std::sin(0.37f * static_cast<float>(i)) * 100.0f;
  auto buf = std::move(p->allocate_buffer(n * sizeof(float)).value());
  auto out = std::move(p->allocate_buffer(n * sizeof(float)).value());
  p->copy(buf.data(), host.data(), n * sizeof(float), platform::CopyKind::kHostToDevice,
          stream.handle());
  ASSERT_TRUE(comm->all_reduce_sum(buf.data(), n, DType::kF32, stream.handle()).is_ok());
  std::vector<float> back(n);
  p->copy(back.data(), buf.data(), n * sizeof(float), platform::CopyKind::kDeviceToHost,
          stream.handle());
  stream.synchronize();
  EXPECT_EQ(back, host);  // the sum over one rank is the rank's data
  // bf16 in place.
  std::vector<uint16_t> h16(n);
  for (int64_t i = 0; i < n; ++i)
    h16[i] = float_to_bf16(host[i]);
  p->copy(buf.data(), h16.data(), n * 2, platform::CopyKind::kHostToDevice, stream.handle());
  ASSERT_TRUE(comm->all_reduce_sum(buf.data(), n, DType::kBF16, stream.handle()).is_ok());
  std::vector<uint16_t> b16(n);
  p->copy(b16.data(), buf.data(), n * 2, platform::CopyKind::kDeviceToHost, stream.handle());
  stream.synchronize();
  EXPECT_EQ(b16, h16);
  // All-gather and broadcast of bytes.
  p->copy(buf.data(), host.data(), n * sizeof(float), platform::CopyKind::kHostToDevice,
          stream.handle());
  ASSERT_TRUE(comm->all_gather(buf.data(), out.data(), n * sizeof(float), stream.handle()).is_ok());
  ASSERT_TRUE(comm->broadcast(out.data(), n * sizeof(float), 0, stream.handle()).is_ok());
  p->copy(back.data(), out.data(), n * sizeof(float), platform::CopyKind::kDeviceToHost,
          stream.handle());
  stream.synchronize();
  EXPECT_EQ(back, host);
}

std::unique_ptr<model::ModelRunner> runner(model::TensorParallel tp) {
  model::ModelRunnerOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.max_total_tokens = 16384;
  o.max_running_requests = 16;
  o.cuda_graph_max_bs = 8;
  o.device_pool.reserve = false;  // two runners on one GPU, beside other suites
  o.tp = tp;
  auto r =
      model::ModelRunner::create(std::filesystem::path(KVSERVE_SOURCE_MODELS_DIR) / "demo-lm", o);
  KV_CHECK(r.is_ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

// tp 1 through the communicator: prefill then decode steps (graph replays, NCCL captured) equal
// to the plain runner's logits bit for bit (the same GEMMs; a one-rank all-reduce is the data).
TEST(NcclCommunicator, OneRankForwardThroughNcclEqualsThePlainRunner) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  ASSERT_TRUE(dist::nccl_library_status().is_ok()) << dist::nccl_library_status().to_string();
  auto nccl = one_rank_nccl();
  dist::CpuCommunicatorOptions co;
  co.name = dist::unique_shm_name();
  auto control = std::move(dist::CpuCommunicator::create(co).value());
  auto plain = runner({});
  auto through = runner({.comm = nccl.get(), .control = control.get()});
  ASSERT_NE(through->decode_graphs(), nullptr) << "the decode graphs capture the NCCL calls";
  test_support::ModelSession a(*plain, 3);
  test_support::ModelSession b(*through, 3);
  const int64_t vocab = plain->config().vocab_size;
  std::vector<std::vector<int32_t>> add = {{5, 17, 42, 99, 3}, {1, 2, 3}, {7, 7, 7, 7, 7, 7, 7}};
  bool decode = false;
  for (int step = 0; step < 10; ++step) {
    const std::vector<float> ref = a.logits(add, decode);
    const std::vector<float> got = b.logits(add, decode);
    const test_support::LogitsAgreement agree = test_support::logits_agreement(ref, got, vocab);
    EXPECT_EQ(got, ref) << "step " << step << ": rel L2 " << agree.rel_l2 << ", max diff "
                        << agree.max_abs;
    const std::vector<int32_t> tokens = test_support::argmax_rows(ref, vocab);
    add = {{tokens[0]}, {tokens[1]}, {tokens[2]}};
    decode = true;
  }
}

}  // namespace
}  // namespace kvserve

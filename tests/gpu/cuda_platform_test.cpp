// The CUDA platform on a real device: memory, copies, stream/event ordering, and the CUDA KV
// store against the CPU one (the reference: both round to nearest even and saturate fp8, so the
// stored bytes must be identical). Skips itself on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kvserve/mem/kv_pool.h"
#include "kvserve/platform/ops/kv_store.h"
#include "kvserve/platform/platform.h"

namespace kvserve::platform {
namespace {

class CudaTest : public testing::Test {
 protected:
  void SetUp() override {
    auto p = create_platform(Device{DeviceKind::kCuda, 0});
    if (!p.is_ok()) GTEST_SKIP() << p.status().to_string();
    cuda_ = std::move(p).value();
    cpu_ = std::move(create_platform(Device{}).value());
  }
  std::unique_ptr<Platform> cuda_;
  std::unique_ptr<Platform> cpu_;
};

TEST_F(CudaTest, DescribesTheDevice) {
  EXPECT_EQ(cuda_->name(), "cuda");
  EXPECT_EQ(cuda_->device(), (Device{DeviceKind::kCuda, 0}));
  const MemoryInfo info = cuda_->memory_info();
  EXPECT_GT(info.total_bytes, size_t{1} << 30);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  std::cout << "device: " << cuda_->description() << std::endl;
}

TEST_F(CudaTest, OutOfMemoryIsAValueAndTheDeviceStaysUsable) {
  const Result<void*> huge = cuda_->allocate(size_t{1} << 50);
  ASSERT_FALSE(huge.is_ok());
  EXPECT_EQ(huge.status().code(), StatusCode::kOutOfMemory);
  Result<Buffer> ok = cuda_->allocate_buffer(1 << 20);
  ASSERT_TRUE(ok.is_ok());
  cuda_->memset(ok->data(), 0, 1 << 20);
  cuda_->synchronize();
}

TEST_F(CudaTest, CopiesOrderedByEventsAcrossStreams) {
  constexpr size_t kN = 64 << 20;  // 64 MiB: long enough that a missing wait would show
  std::vector<uint8_t> host(kN);
  for (size_t i = 0; i < kN; ++i)
    host[i] = static_cast<uint8_t>(i * 7 + 3);
  Result<void*> pinned = cuda_->allocate_host(kN);
  ASSERT_TRUE(pinned.is_ok());
  std::memcpy(*pinned, host.data(), kN);
  Buffer a = std::move(cuda_->allocate_buffer(kN).value());
  Buffer b = std::move(cuda_->allocate_buffer(kN).value());
  Stream producer(*cuda_);
  Stream consumer(*cuda_);
  Event written(*cuda_);
  Event start(*cuda_);
  Event end(*cuda_);
  start.record(producer.handle());
  cuda_->copy(a.data(), *pinned, kN, CopyKind::kHostToDevice, producer.handle());
  written.record(producer.handle());
  cuda_->stream_wait_event(consumer.handle(), written.handle());
  cuda_->copy(b.data(), a.data(), kN, CopyKind::kDeviceToDevice, consumer.handle());
  std::memset(*pinned, 0, kN);  // pinned is only read by the first copy...
  producer.synchronize();       // ...which has finished now
  cuda_->copy(*pinned, b.data(), kN, CopyKind::kDeviceToHost, consumer.handle());
  end.record(consumer.handle());
  end.synchronize();
  EXPECT_TRUE(end.done());
  EXPECT_EQ(std::memcmp(*pinned, host.data(), kN), 0);
  EXPECT_GT(cuda_->elapsed_ms(start.handle(), end.handle()), 0.0f);
  cuda_->deallocate_host(*pinned, kN);
}

// The CUDA KV store writes the same bytes as the CPU one for every (source, cache) dtype pair.
TEST_F(CudaTest, KvStoreMatchesCpuBitForBit) {
  const uint64_t seed = 77;
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  constexpr int64_t kTokens = 300;
  constexpr int64_t kRow = 8 * 128;
  constexpr int64_t kSlots = 4096;
  std::vector<int32_t> loc(kTokens);
  for (int64_t t = 0; t < kTokens; ++t)
    loc[t] = static_cast<int32_t>(1 + t * 13 % (kSlots - 1));
  std::vector<float> kf(kTokens * kRow);
  std::vector<float> vf(kTokens * kRow);
  for (auto& x : kf)
    x = normal(rng);
  for (auto& x : vf)
    x = normal(rng) * 100.0f;  // some values saturate fp8 e4m3
  for (const DType src : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (const DType cache :
         {DType::kF32, DType::kF16, DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2}) {
      SCOPED_TRACE(testing::Message() << dtype_name(src) << " -> " << dtype_name(cache));
      const size_t in_bytes = kTokens * kRow * dtype_size(src);
      const size_t cache_bytes = kSlots * kRow * dtype_size(cache);
      std::vector<uint8_t> k(in_bytes);
      std::vector<uint8_t> v(in_bytes);
      convert_elements(kf.data(), DType::kF32, k.data(), src, kf.size());
      convert_elements(vf.data(), DType::kF32, v.data(), src, vf.size());
      const float k_inv = is_float8(cache) ? 1.0f / 0.5f : 1.0f;
      const float v_inv = is_float8(cache) ? 1.0f / 3.0f : 1.0f;

      std::vector<uint8_t> want_k(cache_bytes, 0);
      std::vector<uint8_t> want_v(cache_bytes, 0);
      ops::cpu::store_kv({k.data(), v.data(), src, want_k.data(), want_v.data(), cache, loc.data(),
                          kTokens, kRow, kSlots, k_inv, v_inv});

      Buffer dk = std::move(cuda_->allocate_buffer(in_bytes).value());
      Buffer dv = std::move(cuda_->allocate_buffer(in_bytes).value());
      Buffer dkc = std::move(cuda_->allocate_buffer(cache_bytes).value());
      Buffer dvc = std::move(cuda_->allocate_buffer(cache_bytes).value());
      Buffer dloc = std::move(cuda_->allocate_buffer(kTokens * 4).value());
      Stream s(*cuda_);
      cuda_->copy(dk.data(), k.data(), in_bytes, CopyKind::kHostToDevice, s.handle());
      cuda_->copy(dv.data(), v.data(), in_bytes, CopyKind::kHostToDevice, s.handle());
      cuda_->copy(dloc.data(), loc.data(), kTokens * 4, CopyKind::kHostToDevice, s.handle());
      cuda_->memset(dkc.data(), 0, cache_bytes, s.handle());
      cuda_->memset(dvc.data(), 0, cache_bytes, s.handle());
      ops::store_kv(*cuda_,
                    {dk.data(), dv.data(), src, dkc.data(), dvc.data(), cache,
                     dloc.data_as<const int32_t>(), kTokens, kRow, kSlots, k_inv, v_inv},
                    s.handle());
      std::vector<uint8_t> got_k(cache_bytes);
      std::vector<uint8_t> got_v(cache_bytes);
      cuda_->copy(got_k.data(), dkc.data(), cache_bytes, CopyKind::kDeviceToHost, s.handle());
      cuda_->copy(got_v.data(), dvc.data(), cache_bytes, CopyKind::kDeviceToHost, s.handle());
      s.synchronize();
      EXPECT_EQ(got_k, want_k);
      EXPECT_EQ(got_v, want_v);
    }
  }
}

TEST_F(CudaTest, KvPoolOnDevice) {
  const mem::KvPoolConfig cfg{.num_layers = 4,
                              .num_kv_heads = 8,
                              .head_dim = 128,
                              .size = 1 << 16,
                              .page_size = 64,
                              .dtype = DType::kBF16};
  auto pool = mem::MHATokenToKVPool::create(*cuda_, cfg);
  ASSERT_TRUE(pool.is_ok()) << pool.status().to_string();
  const auto infos = (*pool)->get_contiguous_buf_infos();
  ASSERT_EQ(infos.size(), 8u);
  EXPECT_EQ((*pool)->k_buffer(0).device(), cuda_->device());

  const std::vector<int32_t> loc = {64, 65, 200, 4000};
  std::vector<uint16_t> k(loc.size() * 1024);
  std::vector<uint16_t> v(loc.size() * 1024);
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = float_to_bf16(static_cast<float>(i % 97) - 48.0f);
    v[i] = float_to_bf16(static_cast<float>(i % 31) * 0.5f);
  }
  Buffer dl = std::move(cuda_->allocate_buffer(loc.size() * 4).value());
  Buffer dk = std::move(cuda_->allocate_buffer(k.size() * 2).value());
  Buffer dv = std::move(cuda_->allocate_buffer(v.size() * 2).value());
  cuda_->copy(dl.data(), loc.data(), loc.size() * 4, CopyKind::kHostToDevice);
  cuda_->copy(dk.data(), k.data(), k.size() * 2, CopyKind::kHostToDevice);
  cuda_->copy(dv.data(), v.data(), v.size() * 2, CopyKind::kHostToDevice);
  const Device d = cuda_->device();
  (*pool)->set_kv_buffer(2, TensorView(dl.data(), DType::kI32, {4}, d),
                         TensorView(dk.data(), DType::kBF16, {4, 8, 128}, d),
                         TensorView(dv.data(), DType::kBF16, {4, 8, 128}, d));
  cuda_->synchronize();
  std::vector<uint16_t> row(1024);
  for (size_t t = 0; t < loc.size(); ++t) {
    const auto* base = static_cast<const uint8_t*>((*pool)->v_buffer(2).data());
    cuda_->copy(row.data(), base + static_cast<size_t>(loc[t]) * 2048, 2048,
                CopyKind::kDeviceToHost);
    cuda_->synchronize();
    ASSERT_EQ(std::memcmp(row.data(), v.data() + t * 1024, 2048), 0) << "slot " << loc[t];
  }
}

}  // namespace
}  // namespace kvserve::platform

// The CUDA platform on a real device: memory, copies, stream/event ordering, the CUDA KV store
// against the CPU one (the reference: both round to nearest even and saturate fp8, so the stored
// bytes must be identical), and the device pool (platform.h, device_pool.h): sub-allocations
// inside its range, out-of-memory inside it, and a ModelRunner whose KV cache is sized from it.
// Pools here have fixed sizes: ctest runs GPU suites side by side, so no test may take the whole
// GPU. Skips itself on a machine without a CUDA device.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <vector>

#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/device_pool.h"
#include "kvserve/platform/ops/kv_store.h"
#include "kvserve/platform/platform.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"
#include "support/scratch_dir.h"

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
  producer.synchronize();       // the first copy, the only reader of pinned, has finished...
  std::memset(*pinned, 0, kN);  // ...so pinned may be cleared for the copy back
  cuda_->copy(*pinned, b.data(), kN, CopyKind::kDeviceToHost, consumer.handle());
  end.record(consumer.handle());
  end.synchronize();
  EXPECT_TRUE(end.done());
  EXPECT_EQ(std::memcmp(*pinned, host.data(), kN), 0);
  EXPECT_GT(cuda_->elapsed_ms(start.handle(), end.handle()), 0.0f);
  cuda_->deallocate_host(*pinned, kN);
}

// The CUDA KV store writes the same bytes as the CPU one for every (source, cache) dtype pair.
// The wait watch (Platform::set_wait_watch): while a stream is held by work that only the watch
// can end (here a host function spinning until the watch sets a flag; in tensor parallelism an
// NCCL collective waiting for a dead rank until the watch aborts the group), every blocking wait
// runs the watch and returns once the work ends instead of blocking for good.
TEST_F(CudaTest, BlockingWaitsRunTheWatchUntilTheWorkEnds) {
  struct Gate {
    std::atomic<bool> open{false};
    std::atomic<int> watched{0};
  };
  auto hold = [](void* gate) {
    while (!static_cast<Gate*>(gate)->open.load()) {
    }
  };
  Stream stream(*cuda_);
  cuda_->set_current_stream(stream.handle());
  Event event(*cuda_);
  const std::vector<std::function<void()>> waits = {
      [&] { cuda_->synchronize_stream(stream.handle()); },
      [&] { cuda_->synchronize(); },
      [&] { event.synchronize(); },
  };
  for (size_t w = 0; w < waits.size(); ++w) {
    Gate gate;
    cuda_->set_wait_watch([&gate] {
      if (gate.watched.fetch_add(1) + 1 == 3) gate.open = true;  // the third call ends the work
    });
    ASSERT_EQ(cudaLaunchHostFunc(static_cast<cudaStream_t>(stream.handle().ptr), hold, &gate),
              cudaSuccess);
    event.record(stream.handle());
    waits[w]();
    EXPECT_TRUE(gate.open.load()) << "wait " << w << " returned before the work ended";
    EXPECT_GE(gate.watched.load(), 3) << "wait " << w;
    EXPECT_TRUE(event.done()) << "wait " << w;
  }
  cuda_->set_wait_watch({});
  cuda_->set_current_stream({});
}

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

// --- the device pool ---------------------------------------------------------------------------

constexpr size_t kMiB = size_t{1} << 20;

TEST_F(CudaTest, DevicePoolSubAllocatesInsideItsRange) {
  // Memory from before the reservation stays valid and is freed directly, outside the pool.
  Buffer before = std::move(cuda_->allocate_buffer(kMiB).value());
  EXPECT_FALSE(cuda_->device_pool().has_value());
  constexpr size_t kPool = 64 * kMiB;
  ASSERT_TRUE(cuda_->reserve_device_pool(kPool).is_ok());
  const std::optional<DevicePoolInfo> pool = cuda_->device_pool();
  ASSERT_TRUE(pool.has_value());
  EXPECT_EQ(pool->stats.size, kPool);
  EXPECT_EQ(pool->base % 256, 0u);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(before.data());
  EXPECT_TRUE(begin + kMiB <= pool->base || begin >= pool->base + kPool);
  // memory_info now describes the pool, not the device.
  EXPECT_EQ(cuda_->memory_info().total_bytes, kPool);
  EXPECT_EQ(cuda_->memory_info().free_bytes, kPool);
  // A second reservation is refused.
  EXPECT_EQ(cuda_->reserve_device_pool(kPool).code(), StatusCode::kInvalidArgument);

  std::mt19937_64 rng(99);
  std::map<uintptr_t, size_t> live;  // start -> requested bytes
  std::vector<Buffer> buffers;
  size_t rounded_total = 0;
  for (const size_t bytes : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{1000},
                             size_t{3} * kMiB + 7, kMiB, size_t{77777}}) {
    Result<Buffer> b = cuda_->allocate_buffer(bytes);
    ASSERT_TRUE(b.is_ok()) << b.status().to_string();
    const auto a = reinterpret_cast<uintptr_t>(b->data());
    EXPECT_EQ(a % 256, 0u) << bytes;
    EXPECT_GE(a, pool->base);
    EXPECT_LE(a + bytes, pool->base + kPool);
    live.emplace(a, std::max<size_t>(bytes, 1));
    rounded_total += (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
    buffers.push_back(std::move(b).value());
  }
  uintptr_t end = 0;
  for (const auto& [a, bytes] : live) {
    EXPECT_GE(a, end) << "blocks overlap";
    end = a + bytes;
  }
  EXPECT_EQ(cuda_->memory_info().free_bytes, kPool - rounded_total);
  EXPECT_EQ(cuda_->device_pool()->stats.bytes_in_use, rounded_total);

  // The memory works: a pattern through every block (H2D, D2D from the previous block, D2H).
  std::vector<uint8_t> previous;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Buffer& b = buffers[i];
    if (b.bytes() == 0) continue;
    std::vector<uint8_t> pattern(b.bytes());
    for (uint8_t& x : pattern)
      x = static_cast<uint8_t>(rng());
    cuda_->copy(b.data(), pattern.data(), pattern.size(), CopyKind::kHostToDevice);
    std::vector<uint8_t> back(pattern.size());
    cuda_->copy(back.data(), b.data(), back.size(), CopyKind::kDeviceToHost);
    cuda_->synchronize();
    EXPECT_EQ(back, pattern) << "block " << i;
  }

  // Freeing everything coalesces the pool back into one block.
  buffers.clear();
  before = Buffer();
  const ArenaStats s = cuda_->device_pool()->stats;
  EXPECT_EQ(s.bytes_in_use, 0u);
  EXPECT_EQ(s.free_blocks, 1u);
  EXPECT_EQ(s.largest_free_block, kPool);
  EXPECT_GE(s.peak_bytes_in_use, rounded_total);
  Result<Buffer> whole = cuda_->allocate_buffer(kPool);
  ASSERT_TRUE(whole.is_ok()) << whole.status().to_string();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(whole->data()), pool->base);
}

TEST_F(CudaTest, OutOfMemoryInsideThePoolIsAValueAndTheDeviceStaysUsable) {
  constexpr size_t kPool = 16 * kMiB;
  ASSERT_TRUE(cuda_->reserve_device_pool(kPool).is_ok());
  // 16 blocks of 1 MiB, every other one freed: 8 MiB free, but no 2 MiB block.
  std::vector<Buffer> blocks;
  for (int i = 0; i < 16; ++i)
    blocks.push_back(std::move(cuda_->allocate_buffer(kMiB).value()));
  for (size_t i = 0; i < blocks.size(); i += 2)
    blocks[i] = Buffer();
  const Result<void*> r = cuda_->allocate(2 * kMiB);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
  EXPECT_NE(m.find("cannot allocate 2097152 bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("8388608 bytes"), std::string::npos) << m;  // the free bytes
  EXPECT_NE(m.find("largest free block 1048576 bytes"), std::string::npos) << m;
  // The pool does not grow past its size, even though the device has memory left.
  EXPECT_EQ(cuda_->allocate(kPool + 256).status().code(), StatusCode::kOutOfMemory);
  // Nothing is sticky: the device and the pool keep working.
  Result<Buffer> ok = cuda_->allocate_buffer(kMiB);
  ASSERT_TRUE(ok.is_ok()) << ok.status().to_string();
  cuda_->memset(ok->data(), 0x5a, kMiB);
  std::vector<uint8_t> back(kMiB);
  cuda_->copy(back.data(), ok->data(), kMiB, CopyKind::kDeviceToHost);
  cuda_->synchronize();
  EXPECT_TRUE(std::all_of(back.begin(), back.end(), [](uint8_t x) { return x == 0x5a; }));
  // Freeing the odd blocks merges the fragments: 2 MiB fits again.
  for (size_t i = 1; i < blocks.size(); i += 2)
    blocks[i] = Buffer();
  EXPECT_TRUE(cuda_->allocate_buffer(2 * kMiB).is_ok());
}

TEST_F(CudaTest, DevicePoolSizingRefusesAHeadroomLargerThanTheFreeMemory) {
  DevicePoolOptions o;
  o.headroom_bytes = cuda_->memory_info().total_bytes + 1;
  const Status st = reserve_device_pool(*cuda_, o);
  EXPECT_EQ(st.code(), StatusCode::kOutOfMemory);
  EXPECT_NE(st.message().find("headroom"), std::string::npos) << st.message();
  EXPECT_FALSE(cuda_->device_pool().has_value());
  // A fixed size takes exactly that, whatever the headroom.
  o.bytes = 8 * kMiB;
  ASSERT_TRUE(reserve_device_pool(*cuda_, o).is_ok());
  EXPECT_EQ(cuda_->memory_info().total_bytes, 8 * kMiB);
  // A CPU platform never has a pool.
  EXPECT_TRUE(reserve_device_pool(*cpu_, DevicePoolOptions{}).is_ok());
  EXPECT_FALSE(cpu_->device_pool().has_value());
}

// A ModelRunner on a fixed pool: the weights, the KV cache, activations and graph buffers all come
// from the pool, the KV cache is --mem-fraction-static of what the pool had left after the
// weights, and its forwards agree with a runner that allocates directly.
TEST(DevicePoolModelRunnerTest, KvCacheIsSizedFromThePool) {
  if (!create_platform(Device{DeviceKind::kCuda, 0}).is_ok()) GTEST_SKIP() << "no CUDA device";
  namespace fs = std::filesystem;
  const fs::path dir = test_support::make_scratch_dir("kvserve-gpu-device-pool-test-qwen");
  makemodel::MakeModelOptions mm;
  mm.preset = "qwen2.5-0.5b-shape";  // head_dim 64: the CUDA kernels' (tiny's 16 is not)
  mm.output = dir;
  mm.seed = 11;
  mm.force = true;
  ASSERT_TRUE(makemodel::make_model(mm).is_ok());

  // ~1 GiB of bf16 weights, then half of the rest for the KV cache (12 KiB a token).
  constexpr size_t kPool = 3072 * kMiB;
  constexpr double kFraction = 0.5;
  model::ModelRunnerOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.page_size = 16;
  o.mem_fraction_static = kFraction;
  o.max_running_requests = 8;
  o.cuda_graph_max_bs = 8;
  o.device_pool.bytes = kPool;
  auto pooled = model::ModelRunner::create(dir, o);
  ASSERT_TRUE(pooled.is_ok()) << pooled.status().to_string();
  model::ModelRunner& r = **pooled;
  std::cout << r.summary() << std::endl;

  const std::optional<DevicePoolInfo> pool = r.platform().device_pool();
  ASSERT_TRUE(pool.has_value());
  EXPECT_EQ(pool->stats.size, kPool);
  EXPECT_EQ(r.platform().memory_info().total_bytes, kPool);
  // The KV buffers lie inside the pool.
  const std::vector<mem::KvBufferInfo> infos = r.kv_pool().get_contiguous_buf_infos();
  ASSERT_FALSE(infos.empty());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(infos[0].ptr) % 256, 0u);  // one allocation, K first
  for (const mem::KvBufferInfo& info : infos) {
    const auto a = reinterpret_cast<uintptr_t>(info.ptr);
    EXPECT_GE(a, pool->base);
    EXPECT_LE(a + info.bytes, pool->base + kPool);
  }
  // Tokens = floor_align(fraction x (pool free before the KV cache) / bytes per token). The pool
  // had at most all of it free, and at least what is free now plus the KV cache itself (whatever
  // came after the KV cache only lowers what is free now).
  const mem::KvPoolConfig& kv = r.kv_pool().config();
  const auto bpt = static_cast<double>(kv.bytes_per_token());
  const double kv_bytes = bpt * static_cast<double>(kv.size + kv.page_size);
  const double free_now = static_cast<double>(pool->stats.free_bytes);
  const double tokens = static_cast<double>(r.max_total_tokens());
  EXPECT_LE(tokens, kFraction * static_cast<double>(kPool) / bpt);
  EXPECT_GE(tokens, kFraction * (free_now + kv_bytes) / bpt - kv.page_size - 1);
  EXPECT_GT(tokens, 0.25 * static_cast<double>(kPool) / bpt);  // the weights are a third
  // The fraction decided, not the cap of every row filled to the context.
  EXPECT_LT(r.max_total_tokens(), int64_t{o.max_running_requests} * (r.context_len() + 4));
  EXPECT_EQ(kv.size % kv.page_size, 0);

  // The same forwards on a runner without a pool: the same numbers.
  model::ModelRunnerOptions d = o;
  d.device_pool.reserve = false;
  d.mem_fraction_static = 0;
  d.max_total_tokens = 4096;
  auto direct = model::ModelRunner::create(dir, d);
  ASSERT_TRUE(direct.is_ok()) << direct.status().to_string();
  EXPECT_FALSE((*direct)->platform().device_pool().has_value());
  const int64_t vocab = r.config().vocab_size;
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int32_t> id(0, 20000);
  constexpr int kRequests = 5;
  std::vector<std::vector<int32_t>> prompts(kRequests);
  for (int b = 0; b < kRequests; ++b) {
    prompts[b].resize(static_cast<size_t>(3 + 37 * b));
    for (int32_t& t : prompts[b])
      t = id(rng);
  }
  test_support::ModelSession sp(r, kRequests);
  test_support::ModelSession sd(**direct, kRequests);
  std::vector<float> lp = sp.logits(prompts, false);
  std::vector<float> ld = sd.logits(prompts, false);
  for (int step = 0; step < 8; ++step) {
    const test_support::LogitsAgreement agree = test_support::logits_agreement(ld, lp, vocab);
    EXPECT_LT(agree.rel_l2, 1e-3) << "step " << step;
    EXPECT_EQ(agree.confident_agree, agree.confident) << "step " << step;
    const std::vector<int32_t> next = test_support::argmax_rows(ld, vocab);
    std::vector<std::vector<int32_t>> add;
    for (const int32_t t : next)
      add.push_back({t});
    lp = sp.logits(add, true);  // decode steps: graph replays on both runners
    ld = sd.logits(add, true);
  }
  ASSERT_NE(r.decode_graphs(), nullptr);
  EXPECT_GT(r.decode_graphs()->replays(), 0);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvserve::platform

// The platform layer: registry, device names, the CPU platform and owned buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include <cstdlib>

#include "kvserve/platform/allocation_faults.h"
#include "kvserve/platform/device_pool.h"
#include "kvserve/platform/kernel_switches_env.h"
#include "kvserve/platform/ops/paged_prefill.h"
#include "kvserve/platform/platform.h"

namespace kvserve::platform {
namespace {

TEST(Platform, ParseDevice) {
  EXPECT_EQ(*parse_device("cpu"), (Device{DeviceKind::kCpu, 0}));
  EXPECT_EQ(*parse_device("cuda"), (Device{DeviceKind::kCuda, 0}));
  EXPECT_EQ(*parse_device("cuda:3"), (Device{DeviceKind::kCuda, 3}));
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", ""}) {
    const auto d = parse_device(bad);
    EXPECT_FALSE(d.is_ok()) << bad;
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ((Device{DeviceKind::kCuda, 2}).to_string(), "cuda:2");
}

TEST(Platform, ListsCpuFirst) {
  const auto list = list_platforms();
  ASSERT_FALSE(list.empty());
  EXPECT_TRUE(list[0].device.is_cpu());
  EXPECT_FALSE(list[0].description.empty());
}

TEST(Platform, CudaIsUnavailableWithoutADevice) {
  bool has_cuda_device = false;
  for (const auto& p : list_platforms())
    has_cuda_device |= p.device.kind == DeviceKind::kCuda;
  auto cuda = create_platform(Device{DeviceKind::kCuda, 0});
  if (has_cuda_device) {
    EXPECT_TRUE(cuda.is_ok());
  } else {
    ASSERT_FALSE(cuda.is_ok());
    EXPECT_EQ(cuda.status().code(), StatusCode::kUnavailable);
    EXPECT_FALSE(cuda.status().message().empty());
  }
  // An index past the last device is never available.
  EXPECT_EQ(create_platform(Device{DeviceKind::kCuda, 1000}).status().code(),
            StatusCode::kUnavailable);
}

class CpuPlatformTest : public testing::Test {
 protected:
  std::unique_ptr<Platform> p_ = std::move(create_platform(Device{}).value());
};

TEST_F(CpuPlatformTest, MemoryCopiesAndMemset) {
  EXPECT_EQ(p_->name(), "cpu");
  EXPECT_TRUE(p_->device().is_cpu());
  const MemoryInfo info = p_->memory_info();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_LE(info.free_bytes, info.total_bytes);

  constexpr size_t kBytes = 1000;
  Result<Buffer> a = p_->allocate_buffer(kBytes);
  Result<Buffer> b = p_->allocate_buffer(kBytes);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 64, 0u);
  p_->memset(a->data(), 0x5a, kBytes);
  p_->copy(b->data(), a->data(), kBytes, CopyKind::kDeviceToDevice);
  const auto* bytes = b->data_as<const uint8_t>();
  for (size_t i = 0; i < kBytes; ++i)
    ASSERT_EQ(bytes[i], 0x5a);

  Result<void*> host = p_->allocate_host(16);
  ASSERT_TRUE(host.is_ok());
  p_->copy(*host, b->data(), 16, CopyKind::kDeviceToHost);
  EXPECT_EQ(static_cast<uint8_t*>(*host)[15], 0x5a);
  p_->deallocate_host(*host, 16);
}

TEST_F(CpuPlatformTest, ImpossibleAllocationIsOutOfMemory) {
  const Result<void*> r = p_->allocate(size_t{1} << 60);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfMemory);
}

// Host memory needs no pool: a reservation changes nothing the CPU platform reports or does.
TEST_F(CpuPlatformTest, DevicePoolIsANoOp) {
  const MemoryInfo before = p_->memory_info();
  EXPECT_TRUE(p_->reserve_device_pool(size_t{1} << 20).is_ok());
  EXPECT_TRUE(reserve_device_pool(*p_, DevicePoolOptions{}).is_ok());
  EXPECT_FALSE(p_->device_pool().has_value());
  EXPECT_EQ(p_->memory_info().total_bytes, before.total_bytes);
  Result<Buffer> big = p_->allocate_buffer(size_t{2} << 20);  // larger than the "pool"
  EXPECT_TRUE(big.is_ok());
}

TEST(DevicePool, DefaultHeadroomIsOneGibOrFourPercent) {
  constexpr size_t kGiB = size_t{1} << 30;
  EXPECT_EQ(default_pool_headroom(0), kGiB);
  EXPECT_EQ(default_pool_headroom(16 * kGiB), kGiB);  // 4 % is 0.64 GiB: the floor wins
  EXPECT_EQ(default_pool_headroom(25 * kGiB), kGiB);  // exactly 1 GiB either way
  // An H200's 143771 MiB: 4 % is 5750.84 MiB.
  const size_t h200 = size_t{143771} << 20;
  EXPECT_EQ(default_pool_headroom(h200), static_cast<size_t>(static_cast<double>(h200) * 0.04));
  EXPECT_GT(default_pool_headroom(h200), 5 * kGiB);
}

// The pool's size: all the free memory minus the headroom, or --gpu-memory-utilization's share of
// the total minus the headroom (several servers on one GPU), refused when the device cannot give
// it.
TEST(DevicePool, SizeFromFreeMemoryOrUtilization) {
  constexpr size_t kGiB = size_t{1} << 30;
  const MemoryInfo h200{.free_bytes = 100 * kGiB, .total_bytes = 140 * kGiB};
  const size_t headroom = default_pool_headroom(h200.total_bytes);  // 5.6 GiB

  Result<DevicePoolSize> all = device_pool_size(h200, {}, "cuda:0");
  ASSERT_TRUE(all.is_ok()) << all.status().to_string();
  EXPECT_EQ(all->bytes, h200.free_bytes - headroom);
  EXPECT_EQ(all->headroom, headroom);

  Result<DevicePoolSize> half = device_pool_size(h200, {.utilization = 0.5}, "cuda:0");
  ASSERT_TRUE(half.is_ok()) << half.status().to_string();
  EXPECT_EQ(half->bytes + half->headroom, 70 * kGiB);  // the process's whole share
  EXPECT_EQ(half->headroom, headroom);

  // More than is free (another server holds the rest): refused naming the flag.
  Result<DevicePoolSize> greedy = device_pool_size(h200, {.utilization = 0.8}, "cuda:0");
  ASSERT_FALSE(greedy.is_ok());
  EXPECT_EQ(greedy.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(greedy.status().message().find("--gpu-memory-utilization 0.8"), std::string::npos)
      << greedy.status().message();
  EXPECT_NE(greedy.status().message().find("100.00 GiB free"), std::string::npos)
      << greedy.status().message();
  // A share no larger than the headroom leaves no pool.
  EXPECT_EQ(device_pool_size(h200, {.utilization = 0.01}, "cuda:0").status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(device_pool_size(h200, {.utilization = 1.5}, "cuda:0").status().code(),
            StatusCode::kInvalidArgument);
  // An explicit size wins over both.
  Result<DevicePoolSize> fixed =
      device_pool_size(h200, {.bytes = 3 * kGiB, .utilization = 0.5}, "cuda:0");
  ASSERT_TRUE(fixed.is_ok());
  EXPECT_EQ(fixed->bytes, 3 * kGiB);
  // Nothing left beyond the headroom.
  const MemoryInfo full{.free_bytes = kGiB / 2, .total_bytes = 16 * kGiB};
  EXPECT_EQ(device_pool_size(full, {}, "cuda:0").status().code(), StatusCode::kOutOfMemory);
}

TEST_F(CpuPlatformTest, StreamsAndEvents) {
  Stream s(*p_);
  Event start(*p_);
  Event end(*p_);
  start.record(s.handle());
  std::vector<int> v(100000, 1);
  p_->memset(v.data(), 0, v.size() * sizeof(int), s.handle());
  end.record(s.handle());
  p_->stream_wait_event(s.handle(), end.handle());
  s.synchronize();
  end.synchronize();
  EXPECT_TRUE(end.done());
  EXPECT_EQ(v[99999], 0);
  EXPECT_GE(p_->elapsed_ms(start.handle(), end.handle()), 0.0f);
  Event never(*p_);
  EXPECT_THROW(p_->elapsed_ms(start.handle(), never.handle()), CheckError);
}

// A MemoryResource that counts what it gets back.
struct CountingResource : MemoryResource {
  int frees = 0;
  void deallocate(void* ptr, size_t) override {
    ++frees;
    ::operator delete(ptr);
  }
};

TEST(Buffer, ReturnsMemoryOnceAndMoves) {
  CountingResource res;
  {
    Buffer a(::operator new(8), 8, Device{}, &res);
    Buffer b = std::move(a);
    EXPECT_TRUE(a.empty());
    EXPECT_EQ(b.bytes(), 8u);
    Buffer c(::operator new(4), 4, Device{}, &res);
    c = std::move(b);  // c's old memory is returned now
    EXPECT_EQ(res.frees, 1);
  }
  EXPECT_EQ(res.frees, 2);
}

TEST(TensorView, ShapeAndBytes) {
  float data[24];
  const TensorView t(data, DType::kBF16, {2, 3, 4});
  EXPECT_EQ(t.ndim(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.bytes(), 48u);
  EXPECT_EQ(t.shape_string(), "[2, 3, 4]");
  EXPECT_THROW((void)t.dim(3), CheckError);
  EXPECT_THROW(TensorView(data, DType::kF32, {1, 2, 3, 4, 5}), CheckError);
}

// The one place the KVSERVE_* kernel switches are read: unset keeps the defaults, each variable
// sets its field, anything else is an error naming the variable; a platform carries the defaults
// until told otherwise, whatever the environment says.
TEST(KernelSwitches, FromTheEnvironment) {
  const char* names[] = {"KVSERVE_FUSED_KV_STORE",  "KVSERVE_DECODE_TC",
                         "KVSERVE_SKINNY_GEMM",     "KVSERVE_PDL",
                         "KVSERVE_PREFILL_VARIANT", "KVSERVE_DECODE_TC_STAGES",
                         "KVSERVE_SPLIT_COUNTERS",  "KVSERVE_PREFILL_TMA",
                         "KVSERVE_PREFILL_NEW_ROWS"};
  for (const char* n : names)
    unsetenv(n);
  const KernelSwitches defaults = kernel_switches_from_env().value();
  EXPECT_TRUE(defaults.fused_kv_store && defaults.decode_tc && defaults.skinny_gemm &&
              defaults.pdl && defaults.split_counters && defaults.prefill_tma &&
              defaults.prefill_new_rows);
  EXPECT_EQ(defaults.prefill_variant, ops::PrefillVariant::kAuto);
  EXPECT_EQ(defaults.decode_tc_stages, 0);
  EXPECT_EQ(describe(defaults),
            "fused_kv_store on, decode_tc on, prefill_variant auto, decode_tc_stages auto, "
            "skinny_gemm on, pdl on, split_counters on, prefill_tma on, prefill_new_rows on");

  setenv("KVSERVE_FUSED_KV_STORE", "0", 1);
  setenv("KVSERVE_DECODE_TC", "0", 1);
  setenv("KVSERVE_SKINNY_GEMM", "0", 1);
  setenv("KVSERVE_PDL", "0", 1);
  setenv("KVSERVE_PREFILL_VARIANT", "m128w4", 1);
  setenv("KVSERVE_DECODE_TC_STAGES", "2", 1);
  setenv("KVSERVE_SPLIT_COUNTERS", "0", 1);
  setenv("KVSERVE_PREFILL_TMA", "0", 1);
  setenv("KVSERVE_PREFILL_NEW_ROWS", "0", 1);
  const KernelSwitches off = kernel_switches_from_env().value();
  EXPECT_EQ(describe(off),
            "fused_kv_store off, decode_tc off, prefill_variant m128w4, decode_tc_stages 2, "
            "skinny_gemm off, pdl off, split_counters off, prefill_tma off, prefill_new_rows off");
  // The platform does not read the environment: it carries what it is given.
  auto cpu = std::move(create_platform(Device{}).value());
  EXPECT_TRUE(cpu->kernel_switches().pdl);
  cpu->set_kernel_switches(off);
  EXPECT_FALSE(cpu->kernel_switches().pdl);

  setenv("KVSERVE_PDL", "yes", 1);
  auto bad = kernel_switches_from_env();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "KVSERVE_PDL=yes: expected 0 or 1");
  setenv("KVSERVE_PDL", "1", 1);
  setenv("KVSERVE_DECODE_TC_STAGES", "5", 1);
  bad = kernel_switches_from_env();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().message(), "KVSERVE_DECODE_TC_STAGES=5: expected auto, 2, 3 or 4");
  setenv("KVSERVE_DECODE_TC_STAGES", "auto", 1);
  setenv("KVSERVE_PREFILL_VARIANT", "m1w1", 1);
  bad = kernel_switches_from_env();
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("KVSERVE_PREFILL_VARIANT=m1w1"), std::string::npos);
  for (const char* n : names)
    unsetenv(n);
}

// The fault injector fails exactly what it was armed for, as an exhausted device would.
// Which prefill kernel a launch runs: the sm_90a kernel where the device and the params allow it
// (and, on auto once ops::kPrefillAutoSm90 lets it, a request averages a 128-row tile), the
// mma.sync tiles otherwise; names round-trip.
TEST(PrefillVariant, ResolvesToTheKernelThatCanRun) {
  using ops::PrefillVariant;
  ops::PagedPrefillParams p;
  p.batch = 1;
  p.total_q = 4096;
  p.num_q_heads = 32;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  // With auto allowed to pick the sm_90a kernel (what the dispatch does once kPrefillAutoSm90).
  auto resolve = [&](PrefillVariant v, bool hopper) {
    return ops::resolve_prefill_variant(v, p, hopper, /*auto_sm90=*/true);
  };
  EXPECT_EQ(ops::resolve_prefill_variant(PrefillVariant::kAuto, p, true),
            ops::kPrefillAutoSm90 ? PrefillVariant::kSm90 : PrefillVariant::kM128W4);
  EXPECT_EQ(ops::resolve_prefill_variant(PrefillVariant::kSm90, p, true), PrefillVariant::kSm90);
  EXPECT_EQ(resolve(PrefillVariant::kAuto, true), PrefillVariant::kSm90);
  EXPECT_EQ(resolve(PrefillVariant::kSm90, true), PrefillVariant::kSm90);
  EXPECT_EQ(resolve(PrefillVariant::kSm90PingPong, true), PrefillVariant::kSm90PingPong);
  EXPECT_EQ(resolve(PrefillVariant::kSm90PingPong, false), PrefillVariant::kM128W4);
  EXPECT_EQ(resolve(PrefillVariant::kAuto, false), PrefillVariant::kM128W4);
  EXPECT_EQ(resolve(PrefillVariant::kSm90, false), PrefillVariant::kM128W4);
  EXPECT_EQ(resolve(PrefillVariant::kMma, true), PrefillVariant::kM128W4);
  EXPECT_EQ(resolve(PrefillVariant::kM128W8, true), PrefillVariant::kM128W8);
  // What the sm_90a kernel does not cover falls back, asked for or not.
  for (const auto& change : std::vector<std::function<void(ops::PagedPrefillParams&)>>{
           [](ops::PagedPrefillParams& q) { q.kv_dtype = DType::kFP8E4M3; },
           [](ops::PagedPrefillParams& q) { q.head_dim = 96; },
           [](ops::PagedPrefillParams& q) { q.window_left = 128; },
           [](ops::PagedPrefillParams& q) { q.logit_softcap = 30.0f; }}) {
    const ops::PagedPrefillParams saved = p;
    change(p);
    EXPECT_FALSE(ops::prefill_sm90_supports(p));
    EXPECT_NE(resolve(PrefillVariant::kSm90, true), PrefillVariant::kSm90);
    EXPECT_NE(resolve(PrefillVariant::kAuto, true), PrefillVariant::kSm90);
    p = saved;
  }
  for (const int32_t d : {64, 128, 256}) {
    p.head_dim = d;
    EXPECT_TRUE(ops::prefill_sm90_supports(p)) << d;
  }
  // Short extends on auto: 8 requests of 8 tokens x group 4 = 32 rows each.
  p.batch = 8;
  p.total_q = 64;
  EXPECT_EQ(resolve(PrefillVariant::kAuto, true), PrefillVariant::kM64W4);
  EXPECT_EQ(resolve(PrefillVariant::kSm90, true), PrefillVariant::kSm90);
  for (const PrefillVariant v :
       {PrefillVariant::kM64W4, PrefillVariant::kM128W8, PrefillVariant::kM128W4,
        PrefillVariant::kSm90, PrefillVariant::kMma, PrefillVariant::kSm90PingPong}) {
    EXPECT_EQ(ops::parse_prefill_variant(ops::prefill_variant_name(v)), v);
  }
  EXPECT_EQ(ops::parse_prefill_variant("sm100"), PrefillVariant::kAuto);
}

TEST(AllocationFaults, FailsTheArmedAllocationsOnly) {
  auto cpu = std::move(create_platform(Device{}).value());
  auto faults = std::make_shared<AllocationFaults>();
  cpu->set_allocation_faults(faults);
  EXPECT_TRUE(cpu->allocate_buffer(64).is_ok());  // disarmed
  faults->arm(2, /*min_bytes=*/1024);
  EXPECT_TRUE(cpu->allocate_buffer(1023).is_ok());  // too small to count
  const auto failed = cpu->allocate_buffer(4096);
  ASSERT_FALSE(failed.is_ok());
  EXPECT_EQ(failed.status().code(), StatusCode::kOutOfMemory);
  EXPECT_NE(failed.status().message().find("injected fault"), std::string::npos);
  EXPECT_FALSE(cpu->empty(DType::kF32, {512}).is_ok());  // 2048 bytes: the second
  EXPECT_TRUE(cpu->allocate_buffer(4096).is_ok());       // spent
  EXPECT_EQ(faults->injected(), 2);
}

}  // namespace
}  // namespace kvserve::platform

// The KV transfer on a CUDA device (issue 18): the cuda-ipc backend between two processes on one
// GPU (the receiver is this binary run again with a filter and KVSERVE_TEST_IPC_* variables),
// byte for byte against a naive page copy at page sizes 1, 16, 64 on fragmented pages, with its
// rate printed; the staging buffer's CUDA gather / scatter (device and pinned host staging)
// against the CPU op, byte for byte and across a dtype conversion. Skips without a device.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

#include "kvserve/disagg/kv_runs.h"
#include "kvserve/disagg/kv_staging.h"
#include "kvserve/disagg/kv_transport.h"
#include "unit/kv_transfer_scenario.h"

extern char** environ;

namespace kvserve::disagg {
namespace {

using namespace std::chrono_literals;
using testing::fill_random;
using testing::fragmented_pages;
using testing::naive_page_copy;
using testing::pool_region;
using testing::scenario_pool_config;
using testing::send_message;
using testing::write_all;

std::unique_ptr<platform::Platform> cuda_platform() {
  auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
  return p.is_ok() ? std::move(p).value() : nullptr;
}

// The pipe protocol (kv_transfer_scenario.h) with this suite's bounds.
constexpr int kPipeTimeoutMs = 60000;
bool read_all(int fd, void* data, size_t n) {
  return testing::read_all(fd, data, n, kPipeTimeoutMs);
}
bool recv_message(int fd, std::vector<uint8_t>& m) {
  return testing::recv_message(fd, m, uint64_t{1} << 34, kPipeTimeoutMs);
}

// A pool on `p` whose bytes are fill_random(seed), and its CPU twin with the same bytes.
struct PoolPair {
  std::unique_ptr<mem::MHATokenToKVPool> device;
  std::unique_ptr<mem::MHATokenToKVPool> host;
};
PoolPair make_pools(platform::Platform& cuda, platform::Platform& cpu, int32_t page_size,
                    int64_t pages, uint64_t seed) {
  PoolPair pp;
  pp.device = mem::MHATokenToKVPool::create(cuda, scenario_pool_config(page_size, pages)).value();
  pp.host = mem::MHATokenToKVPool::create(cpu, scenario_pool_config(page_size, pages)).value();
  const auto h = pool_region(*pp.host);
  fill_random(h.base, h.bytes, seed);
  const auto d = pool_region(*pp.device);
  cuda.copy(d.base, h.base, h.bytes, platform::CopyKind::kHostToDevice);
  cuda.synchronize();
  return pp;
}

// The receiving process (this binary, --gtest_filter=CudaIpcReceiver.*): a device pool of the
// parameters in KVSERVE_TEST_IPC_ARGS ("fd_in fd_out page_size pages seed"), its descriptor sent
// up; 'D' sends the pool's bytes back, 'Q' ends.
TEST(CudaIpcReceiver, Serve) {
  const char* args = std::getenv("KVSERVE_TEST_IPC_ARGS");
  if (args == nullptr) GTEST_SKIP() << "runs only as the receiving process of CudaIpcTransport";
  int in = -1, out = -1, page_size = 0;
  long long pages = 0;
  unsigned long long seed = 0;
  ASSERT_EQ(std::sscanf(args, "%d %d %d %lld %llu", &in, &out, &page_size, &pages, &seed), 5);
  auto cuda = cuda_platform();
  ASSERT_NE(cuda, nullptr);
  auto cpu = testing::cpu_platform();
  const PoolPair pools = make_pools(*cuda, *cpu, page_size, pages, seed);
  TransportOptions o;
  o.kind = TransportKind::kCudaIpc;
  o.platform = cuda.get();
  auto t = create_kv_transport(o);
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  const auto d = pool_region(*pools.device);
  const auto desc = (*t)->register_region(d.base, d.bytes, cuda->device());
  ASSERT_TRUE(desc.is_ok()) << desc.status().to_string();
  ASSERT_TRUE(send_message(out, region_descriptor_to_bytes(*desc)));
  char cmd = 0;
  while (read_all(in, &cmd, 1)) {
    if (cmd == 'Q') break;
    std::vector<uint8_t> bytes(d.bytes);
    cuda->copy(bytes.data(), d.base, d.bytes, platform::CopyKind::kDeviceToHost);
    cuda->synchronize();
    ASSERT_TRUE(send_message(out, bytes));
  }
}

struct Receiver {
  pid_t pid = -1;
  int from_child = -1;
  int to_child = -1;
  RegionDescriptor descriptor;
  bool ok = false;

  Receiver(int32_t page_size, int64_t pages, uint64_t seed) {
    ::signal(SIGPIPE, SIG_IGN);
    int up[2];
    int down[2];
    if (::pipe(up) != 0 || ::pipe(down) != 0) return;
    const std::string env = "KVSERVE_TEST_IPC_ARGS=" + std::to_string(down[0]) + " " +
                            std::to_string(up[1]) + " " + std::to_string(page_size) + " " +
                            std::to_string(pages) + " " + std::to_string(seed);
    std::vector<std::string> envs = {env};
    // The child runs one named test: GoogleTest's sharding variables would filter it out.
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view v(*e);
      if (v.starts_with("GTEST_SHARD_INDEX=") || v.starts_with("GTEST_TOTAL_SHARDS=")) continue;
      envs.emplace_back(*e);
    }
    std::vector<char*> envp;
    for (auto& e : envs)
      envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string exe = "/proc/self/exe";
    std::string filter = "--gtest_filter=CudaIpcReceiver.Serve";
    char* argv[] = {exe.data(), filter.data(), nullptr};
    if (::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) {
      pid = -1;
      return;
    }
    ::close(up[1]);
    ::close(down[0]);
    from_child = up[0];
    to_child = down[1];
    std::vector<uint8_t> m;
    if (!recv_message(from_child, m)) return;
    auto d = region_descriptor_from_bytes(m);
    if (!d.is_ok()) return;
    descriptor = *d;
    ok = true;
  }
  std::vector<uint8_t> dump() {
    std::vector<uint8_t> m;
    const char cmd = 'D';
    if (!write_all(to_child, &cmd, 1) || !recv_message(from_child, m)) m.clear();
    return m;
  }
  ~Receiver() {
    if (pid > 0) {
      const char cmd = 'Q';
      write_all(to_child, &cmd, 1);
      int status = 0;
      ::waitpid(pid, &status, 0);
    }
    if (from_child >= 0) ::close(from_child);
    if (to_child >= 0) ::close(to_child);
  }
};

TEST(CudaIpcTransport, TwoProcessesEqualNaivePageCopyOnFragmentedPages) {
  auto cuda = cuda_platform();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  auto cpu = testing::cpu_platform();
  for (const int32_t page_size : {1, 16, 64}) {
    const uint64_t seed = 6000 + page_size;
    SCOPED_TRACE(::testing::Message() << "page size " << page_size << ", seed " << seed);
    std::printf("cuda-ipc page size %d seed %llu\n", page_size,
                static_cast<unsigned long long>(seed));
    // About 48 MiB per pool: 3 layers x K/V x 2 heads x 8 dims x bf16 = 192 bytes a token.
    const int64_t pages = (1 << 18) / page_size + 8;
    Receiver child(page_size, pages, seed + 1);
    ASSERT_TRUE(child.ok) << "the receiving process did not publish its region";
    const PoolPair src = make_pools(*cuda, *cpu, page_size, pages, seed);
    const PoolPair dst_mirror = make_pools(*cpu, *cpu, page_size, pages, seed + 1);
    std::mt19937_64 rng(seed);
    const size_t n = static_cast<size_t>(pages / 2);
    const auto src_pages = fragmented_pages(pages + 1, n, rng);
    const auto dst_pages = fragmented_pages(pages + 1, n, rng);
    const auto mr = pool_region(*dst_mirror.host);
    std::vector<uint8_t> expected(mr.base, mr.base + mr.bytes);
    naive_page_copy(*src.host, *dst_mirror.host, src_pages, dst_pages, expected);

    TransportOptions o;
    o.kind = TransportKind::kCudaIpc;
    o.platform = cuda.get();
    auto t = create_kv_transport(o).value();
    const auto sr = pool_region(*src.device);
    ASSERT_TRUE(t->register_region(sr.base, sr.bytes, cuda->device()).is_ok());
    const auto peer = t->connect(child.descriptor);
    ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
    const auto ops = merge_runs(src_pages, dst_pages, kv_region_layout(*src.device, sr.base),
                                kv_region_layout(*dst_mirror.host, mr.base));
    ASSERT_TRUE(ops.is_ok());
    platform::Event ready(*cuda);
    ready.record();
    const auto start = std::chrono::steady_clock::now();
    const auto id = t->post(*peer, *ops, ready.handle());
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    TransferStatus s = t->poll(*id);
    while (s == TransferStatus::kInProgress)
      s = t->poll(*id);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_EQ(s, TransferStatus::kDone);
    uint64_t bytes = 0;
    for (const WriteOp& op : *ops)
      bytes += op.length;
    std::printf("cuda-ipc page size %d: %zu writes, %.1f MiB in %.3f ms = %.1f GB/s\n", page_size,
                ops->size(), bytes / 1048576.0, seconds * 1e3, bytes / seconds / 1e9);
    t->release(*id);
    const auto got = child.dump();
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected) << "the receiver's pool differs from the naive page copy";
  }
}

// The staging gather / scatter on CUDA against the CPU op: page size 16 -> 1 and 64, staging in
// device memory on one side and pinned host memory on the other; bf16 -> bf16 byte for byte and
// f32 -> bf16 (the CPU op's rounding, which kv_staging_test checks against its own reference).
// Writes longer than the transport's longest run (a staging piece is one write of up to the whole
// buffer) are cut into runs that each land whole: in one process (its own descriptor is used by
// address), a 5 MiB + 3 byte write and a 300 KiB one at odd offsets equal a host memmove of the
// same bytes, and the bytes around them are untouched.
TEST(CudaIpcTransport, LongWritesAreCutIntoRunsThatLandWhole) {
  auto p = cuda_platform();
  if (p == nullptr) GTEST_SKIP() << "no CUDA device";
  const uint64_t seed = 7100;
  std::printf("long writes seed %llu\n", static_cast<unsigned long long>(seed));
  const size_t bytes = size_t{16} << 20;
  std::vector<uint8_t> src(bytes), dst(bytes);
  fill_random(src.data(), bytes, seed);
  fill_random(dst.data(), bytes, seed + 1);
  Buffer dsrc = p->allocate_buffer(bytes).value();
  Buffer ddst = p->allocate_buffer(bytes).value();
  p->copy(dsrc.data(), src.data(), bytes, platform::CopyKind::kHostToDevice);
  p->copy(ddst.data(), dst.data(), bytes, platform::CopyKind::kHostToDevice);
  p->synchronize();
  TransportOptions o;
  o.kind = TransportKind::kCudaIpc;
  o.platform = p.get();
  auto sender = create_kv_transport(o).value();
  auto receiver = create_kv_transport(o).value();
  ASSERT_TRUE(sender->register_region(dsrc.data(), bytes, p->device()).is_ok());
  const auto remote = receiver->register_region(ddst.data(), bytes, p->device());
  ASSERT_TRUE(remote.is_ok()) << remote.status().to_string();
  const auto peer = sender->connect(*remote);
  ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
  const std::vector<WriteOp> ops = {{17, 8 * 1024 * 1024 + 5, (5u << 20) + 3},
                                    {6 * 1024 * 1024 + 1, 101, 300 * 1024}};
  const auto id = sender->post(*peer, ops);
  ASSERT_TRUE(id.is_ok()) << id.status().to_string();
  ASSERT_EQ(testing::wait_transfer(*sender, *id, 10s, std::chrono::microseconds(0)),
            TransferStatus::kDone);
  sender->release(*id);
  std::vector<uint8_t> want = dst;
  for (const WriteOp& op : ops)
    std::memcpy(want.data() + op.dst_offset, src.data() + op.src_offset, op.length);
  std::vector<uint8_t> got(bytes);
  p->copy(got.data(), ddst.data(), bytes, platform::CopyKind::kDeviceToHost);
  p->synchronize();
  EXPECT_TRUE(got == want) << "the device region differs from the host reference";
}

TEST(KvStagingGpu, EqualsTheCpuOp) {
  auto cuda = cuda_platform();
  if (cuda == nullptr) GTEST_SKIP() << "no CUDA device";
  auto cpu = testing::cpu_platform();
  for (const int32_t decode_page : {1, 64}) {
    for (const DType prefill_dtype : {DType::kBF16, DType::kF32}) {
      const uint64_t seed = 7000 + decode_page + static_cast<int>(prefill_dtype);
      SCOPED_TRACE(::testing::Message() << "decode page " << decode_page << " "
                                        << dtype_name(prefill_dtype) << " seed " << seed);
      std::mt19937_64 rng(seed);
      const auto cfg = [](int32_t ps, int64_t pages, DType dt) {
        auto c = scenario_pool_config(ps, pages);
        c.dtype = dt;
        return c;
      };
      const int64_t tokens = 1000;
      const int64_t decode_pages = 4096 / decode_page + 8;
      auto make = [&](platform::Platform& p, mem::KvPoolConfig c, uint64_t fill_seed) {
        auto pool = mem::MHATokenToKVPool::create(p, c).value();
        const auto r = pool_region(*pool);
        std::vector<float> values(r.bytes / dtype_size(c.dtype));
        std::mt19937_64 vr(fill_seed);
        std::normal_distribution<float> normal(0.0f, 2.0f);
        for (float& v : values)
          v = normal(vr);
        std::vector<uint8_t> bytes(r.bytes);
        convert_elements(values.data(), DType::kF32, bytes.data(), c.dtype, values.size());
        p.copy(r.base, bytes.data(), r.bytes,
               p.device().is_cpu() ? platform::CopyKind::kHostToHost
                                   : platform::CopyKind::kHostToDevice);
        p.synchronize();
        return pool;
      };
      auto src_slots_pages = fragmented_pages(64 + 1, 63, rng);
      std::vector<int32_t> src_slots;
      for (int64_t t = 0; t < tokens; ++t) {
        src_slots.push_back(src_slots_pages[t / 16] * 16 + static_cast<int32_t>(t % 16));
      }
      const auto dst_page_ids =
          fragmented_pages(decode_pages + 1, (tokens + decode_page - 1) / decode_page, rng);
      std::vector<int32_t> dst_slots;
      for (int64_t t = 0; t < tokens; ++t) {
        dst_slots.push_back(dst_page_ids[t / decode_page] * decode_page +
                            static_cast<int32_t>(t % decode_page));
      }
      std::vector<uint8_t> results[2];
      for (int side = 0; side < 2; ++side) {
        platform::Platform& p = side == 0 ? *cpu : *cuda;
        auto prefill = make(p, cfg(16, 64, prefill_dtype), seed);
        auto decode = make(p, cfg(decode_page, decode_pages, DType::kBF16), seed + 1);
        const StagingFormat format{3, 2, 8, DType::kBF16};
        auto src = KvStager::create(*prefill, format, 0, 512, StagingMemory::kDevice).value();
        auto dst = KvStager::create(*decode, format, 0, 512, StagingMemory::kPinnedHost).value();
        TransportOptions o;
        o.platform = &p;
        auto sender = create_kv_transport(o).value();
        auto receiver = create_kv_transport(o).value();
        ASSERT_TRUE(
            sender->register_region(src->staging(), src->staging_bytes(), src->staging_device())
                .is_ok());
        const PeerId peer =
            sender
                ->connect(receiver
                              ->register_region(dst->staging(), dst->staging_bytes(),
                                                dst->staging_device())
                              .value())
                .value();
        for (int64_t at = 0; at < tokens; at += 512) {
          const int64_t n = std::min<int64_t>(512, tokens - at);
          const auto ready = src->gather(std::span(src_slots).subspan(at, n));
          ASSERT_TRUE(ready.is_ok());
          const WriteOp op{0, 0, format.bytes(n)};
          const auto id = sender->post(peer, std::span(&op, 1), *ready).value();
          while (sender->poll(id) == TransferStatus::kInProgress) {
          }
          ASSERT_EQ(sender->poll(id), TransferStatus::kDone);
          const auto written = dst->scatter(std::span(dst_slots).subspan(at, n));
          ASSERT_TRUE(written.is_ok());
          p.synchronize_event(*written);
        }
        const auto r = pool_region(*decode);
        results[side].resize(r.bytes);
        p.copy(results[side].data(), r.base, r.bytes,
               p.device().is_cpu() ? platform::CopyKind::kHostToHost
                                   : platform::CopyKind::kDeviceToHost);
        p.synchronize();
      }
      EXPECT_TRUE(results[0] == results[1]) << "CUDA staging differs from the CPU op";
    }
  }
}

}  // namespace
}  // namespace kvserve::disagg

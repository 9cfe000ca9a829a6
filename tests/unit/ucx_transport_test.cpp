// disagg/: the ucx backend between two real processes (fork: the child registers its pool and
// receives; the parent sends), over tcp and over shared memory: merged runs on fragmented pages
// equal byte for byte a naive page-by-page copy at page sizes 1, 16, 64; a killed peer fails
// transfers within a bound; injected faults. Each test forks before it creates any UCX object.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "kvserve/disagg/kv_runs.h"
#include "kvserve/disagg/kv_transport.h"
#include "unit/kv_transfer_scenario.h"

namespace kvserve::disagg {
namespace {

using namespace std::chrono_literals;
using testing::cpu_platform;
using testing::fill_random;
using testing::fragmented_pages;
using testing::naive_page_copy;
using testing::pool_region;
using testing::scenario_pool_config;
using testing::send_message;
using testing::write_all;

// The pipe protocol (kv_transfer_scenario.h) with this suite's bounds.
constexpr int kPipeTimeoutMs = 20000;
bool read_all(int fd, void* data, size_t n, int timeout_ms = kPipeTimeoutMs) {
  return testing::read_all(fd, data, n, timeout_ms);
}
bool recv_message(int fd, std::vector<uint8_t>& m) {
  return testing::recv_message(fd, m, uint64_t{1} << 31, kPipeTimeoutMs);
}

// One way of running UCX between the processes.
struct UcxVariant {
  std::string name;
  std::string tls;
  bool peer_failure_detection = true;
};

void PrintTo(const UcxVariant& v, std::ostream* os) {
  *os << v.name;
}

TransportOptions ucx_options(const UcxVariant& v, TransportFaults faults = {},
                             int timeout_ms = 30000) {
  TransportOptions o;
  o.kind = TransportKind::kUcx;
  o.ucx_transports = v.tls;
  o.ucx_peer_failure_detection = v.peer_failure_detection;
  o.faults = faults;
  o.transfer_timeout_ms = timeout_ms;
  o.ucx_keepalive_interval_s = 0.2;
  return o;
}

// The receiving process: a pool (or a plain region of `region_bytes` when no pool), its
// descriptor sent up, then 'D' (send the region back) and 'Q' (quit) commands. Never returns.
[[noreturn]] void receiver_main(int to_parent, int from_parent, const UcxVariant& tls,
                                int32_t page_size, int64_t pages, uint64_t seed,
                                uint64_t region_bytes) {
  int code = 1;
  {
    auto p = cpu_platform();
    std::unique_ptr<mem::MHATokenToKVPool> pool;
    std::vector<uint8_t> plain;
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    if (region_bytes == 0) {
      pool = mem::MHATokenToKVPool::create(*p, scenario_pool_config(page_size, pages)).value();
      base = pool_region(*pool).base;
      bytes = pool_region(*pool).bytes;
    } else {
      plain.assign(region_bytes, 0);
      base = plain.data();
      bytes = region_bytes;
    }
    fill_random(base, bytes, seed);
    auto t = create_kv_transport(ucx_options(tls));
    if (t.is_ok()) {
      auto d = (*t)->register_region(base, bytes, Device{});
      if (d.is_ok() && send_message(to_parent, region_descriptor_to_bytes(*d))) {
        char cmd = 0;
        while (read_all(from_parent, &cmd, 1, 60000)) {
          if (cmd == 'D') {
            if (!send_message(to_parent, std::vector<uint8_t>(base, base + bytes))) break;
          } else if (cmd == 'Q') {
            code = 0;
            break;
          }
        }
      } else {
        send_message(to_parent, {});
      }
    } else {
      std::fprintf(stderr, "receiver: %s\n", t.status().to_string().c_str());
      send_message(to_parent, {});
    }
  }
  ::_exit(code);
}

struct Child {
  pid_t pid = -1;
  int from_child = -1;
  int to_child = -1;
  RegionDescriptor descriptor;
  bool ok = false;

  Child(const UcxVariant& tls, int32_t page_size, int64_t pages, uint64_t seed,
        uint64_t region_bytes = 0) {
    int up[2];
    int down[2];
    ::signal(SIGPIPE, SIG_IGN);  // a dead child is a failed read or write here, not a signal
    if (::pipe(up) != 0 || ::pipe(down) != 0) return;
    std::fflush(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::close(up[0]);
      ::close(down[1]);
      receiver_main(up[1], down[0], tls, page_size, pages, seed, region_bytes);
    }
    ::close(up[1]);
    ::close(down[0]);
    from_child = up[0];
    to_child = down[1];
    std::vector<uint8_t> m;
    if (!recv_message(from_child, m) || m.empty()) return;
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
  void kill() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
      pid = -1;
    }
  }
  ~Child() {
    if (pid > 0) {
      const char cmd = 'Q';
      write_all(to_child, &cmd, 1);
      int status = 0;
      const auto end = std::chrono::steady_clock::now() + 10s;
      while (::waitpid(pid, &status, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > end) {
          kill();
          break;
        }
        std::this_thread::sleep_for(1ms);
      }
    }
    if (from_child >= 0) ::close(from_child);
    if (to_child >= 0) ::close(to_child);
  }
};

TransferStatus wait(KvTransport& t, TransferId id, std::chrono::milliseconds limit = 20000ms) {
  return testing::wait_transfer(t, id, limit, 200us);
}

class UcxTransportTest : public ::testing::TestWithParam<UcxVariant> {};

// tcp; shared memory listed with tcp (UCX 1.13 then still puts over tcp: its shared-memory
// transports cannot detect a dead peer, which these endpoints require); shared memory proper
// (posix/memory puts, no peer failure detection: UCP_ERR_HANDLING_MODE_NONE).
INSTANTIATE_TEST_SUITE_P(Transports, UcxTransportTest,
                         ::testing::Values(UcxVariant{"tcp", "tcp", true},
                                           UcxVariant{"posix_cma_tcp", "posix,cma,tcp", true},
                                           UcxVariant{"posix_shm", "posix", false}),
                         [](const ::testing::TestParamInfo<UcxVariant>& param_info) {
                           return param_info.param.name;
                         });

TEST_P(UcxTransportTest, TwoProcessesEqualNaivePageCopyOnFragmentedPages) {
  const UcxVariant& tls = GetParam();
  auto p = cpu_platform();
  for (const int32_t page_size : {1, 16, 64}) {
    const uint64_t seed = 2000 + page_size;
    SCOPED_TRACE(::testing::Message()
                 << tls.name << ", page size " << page_size << ", seed " << seed);
    std::printf("ucx %s page size %d seed %llu\n", tls.name.c_str(), page_size,
                static_cast<unsigned long long>(seed));
    const int64_t pages = 4096 / page_size + 8;
    Child child(tls, page_size, pages, seed + 1);
    ASSERT_TRUE(child.ok) << "the receiving process did not publish its region";

    std::mt19937_64 rng(seed);
    auto src = mem::MHATokenToKVPool::create(*p, scenario_pool_config(page_size, pages)).value();
    auto dst = mem::MHATokenToKVPool::create(*p, scenario_pool_config(page_size, pages)).value();
    const auto sr = pool_region(*src);
    const auto dr = pool_region(*dst);  // the child's pool, mirrored here for the reference
    fill_random(sr.base, sr.bytes, seed);
    fill_random(dr.base, dr.bytes, seed + 1);
    const size_t n = static_cast<size_t>(pages / 2);
    const auto src_pages = fragmented_pages(pages + 1, n, rng);
    const auto dst_pages = fragmented_pages(pages + 1, n, rng);
    std::vector<uint8_t> expected(dr.base, dr.base + dr.bytes);
    naive_page_copy(*src, *dst, src_pages, dst_pages, expected);
    ASSERT_EQ(child.descriptor.bytes, dr.bytes);

    auto t = create_kv_transport(ucx_options(tls));
    ASSERT_TRUE(t.is_ok()) << t.status().to_string();
    ASSERT_TRUE((*t)->register_region(sr.base, sr.bytes, Device{}).is_ok());
    const auto peer = (*t)->connect(child.descriptor);
    ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
    const auto ops = merge_runs(src_pages, dst_pages, kv_region_layout(*src, sr.base),
                                kv_region_layout(*dst, dr.base));
    ASSERT_TRUE(ops.is_ok());
    // Two batches: the first half of the ops, then the rest (several transfers on one peer).
    const size_t half = ops->size() / 2;
    const auto a = (*t)->post(*peer, std::span(*ops).first(half));
    const auto b = (*t)->post(*peer, std::span(*ops).subspan(half));
    ASSERT_TRUE(a.is_ok() && b.is_ok());
    EXPECT_EQ(wait(**t, *a), TransferStatus::kDone);
    EXPECT_EQ(wait(**t, *b), TransferStatus::kDone);
    const std::vector<uint8_t> got = child.dump();
    ASSERT_EQ(got.size(), expected.size());
    EXPECT_TRUE(got == expected) << "the receiver's pool differs from the naive page copy";
    (*t)->release(*a);
    (*t)->release(*b);
  }
}

TEST_P(UcxTransportTest, RefusesDeviceRegionsAndForeignDescriptors) {
  auto t = create_kv_transport(ucx_options(GetParam()));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  std::vector<uint8_t> buf(64);
  EXPECT_EQ((*t)->register_region(buf.data(), 64, Device{DeviceKind::kCuda, 0}).status().code(),
            StatusCode::kUnimplemented);
  EXPECT_EQ((*t)->connect(RegionDescriptor{"loopback", {1, 2}, 64}).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ((*t)->connect(RegionDescriptor{"ucx", {1, 2, 3}, 64}).status().code(),
            StatusCode::kInvalidArgument);
  const WriteOp op{0, 0, 8};
  EXPECT_EQ((*t)->post(PeerId{1}, std::span(&op, 1)).status().code(),
            StatusCode::kInvalidArgument);  // no region registered
}

// A peer killed in the middle of a large transfer: the transfer fails (no hang) within a bound,
// later posts to it fail at once, and a fresh peer on the same transport still works.
TEST_P(UcxTransportTest, KilledPeerFailsTransfersWithinABound) {
  const UcxVariant& tls = GetParam();
  if (!tls.peer_failure_detection) {
    GTEST_SKIP() << "without peer failure detection only the transfer timeout ends a transfer "
                    "to a dead peer (InjectedFaults covers the timeout)";
  }
  constexpr uint64_t kBytes = 128ull << 20;
  std::vector<uint8_t> src(kBytes, 0x5a);
  Child child(tls, 1, 1, 7, kBytes);
  ASSERT_TRUE(child.ok);
  auto t = create_kv_transport(ucx_options(tls, {}, 30000));
  ASSERT_TRUE(t.is_ok()) << t.status().to_string();
  ASSERT_TRUE((*t)->register_region(src.data(), src.size(), Device{}).is_ok());
  const auto peer = (*t)->connect(child.descriptor);
  ASSERT_TRUE(peer.is_ok());
  std::vector<WriteOp> ops;
  for (uint64_t off = 0; off < kBytes; off += 1 << 20)
    ops.push_back({off, off, 1 << 20});
  // Warm the connection with one small transfer, then the big one, killed under way.
  const WriteOp small{0, 0, 4096};
  const auto warm = (*t)->post(*peer, std::span(&small, 1));
  ASSERT_TRUE(warm.is_ok());
  ASSERT_EQ(wait(**t, *warm), TransferStatus::kDone);
  const auto big = (*t)->post(*peer, ops);
  ASSERT_TRUE(big.is_ok());
  std::this_thread::sleep_for(5ms);
  const auto killed_at = std::chrono::steady_clock::now();
  child.kill();
  const TransferStatus s = wait(**t, *big, 15000ms);
  const auto took = std::chrono::steady_clock::now() - killed_at;
  std::printf(
      "%s: big transfer %s %lld ms after the kill\n", tls.name.c_str(),
      std::string(transfer_status_name(s)).c_str(),
      static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(took).count()));
  // Done is possible only if every byte landed before the kill; otherwise it must fail, in time.
  EXPECT_NE(s, TransferStatus::kInProgress) << "a dead peer left the transfer hanging";
  EXPECT_LT(took, 10s);
  // The next transfer to the dead peer fails (at post, or within the bound).
  const auto after = (*t)->post(*peer, std::span(&small, 1));
  if (after.is_ok()) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(wait(**t, *after, 15000ms), TransferStatus::kFailed);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  } else {
    EXPECT_EQ(after.status().code(), StatusCode::kUnavailable);
  }
}

// Faults on a real peer: fail ends kFailed, drop stays in progress until the timeout, delay holds
// kDone back; the bytes land only for the delayed one.
TEST_P(UcxTransportTest, InjectedFaults) {
  const UcxVariant& tls = GetParam();
  std::vector<uint8_t> src(4096, 0x33);
  Child child(tls, 1, 1, 9, 4096);
  ASSERT_TRUE(child.ok);
  const auto untouched = child.dump();
  ASSERT_EQ(untouched.size(), 4096u);
  const WriteOp op{0, 0, 4096};
  const auto run = [&](TransportFaults faults, int timeout_ms) {
    auto t = create_kv_transport(ucx_options(tls, faults, timeout_ms)).value();
    EXPECT_TRUE(t->register_region(src.data(), src.size(), Device{}).is_ok());
    const PeerId peer = t->connect(child.descriptor).value();
    const auto start = std::chrono::steady_clock::now();
    const TransferId id = t->post(peer, std::span(&op, 1)).value();
    const TransferStatus first = t->poll(id);
    const TransferStatus last = wait(*t, id);
    return std::tuple(first, last, std::chrono::steady_clock::now() - start);
  };
  {
    const auto [first, last, took] = run({.fail_probability = 1.0}, 30000);
    EXPECT_EQ(last, TransferStatus::kFailed);
    EXPECT_LT(took, 2s);
    EXPECT_EQ(child.dump(), untouched);
  }
  {
    const auto [first, last, took] = run({.drop_probability = 1.0}, 300);
    EXPECT_EQ(first, TransferStatus::kInProgress);
    EXPECT_EQ(last, TransferStatus::kFailed);
    EXPECT_GE(took, 300ms);
    EXPECT_EQ(child.dump(), untouched);
  }
  {
    const auto [first, last, took] = run({.delay_ms = 200}, 30000);
    EXPECT_EQ(first, TransferStatus::kInProgress);
    EXPECT_EQ(last, TransferStatus::kDone);
    EXPECT_GE(took, 200ms);
    EXPECT_EQ(child.dump(), src);
  }
}

}  // namespace
}  // namespace kvserve::disagg

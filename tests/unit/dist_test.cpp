// The cpu communicator between real processes: every rank is a forked child (forked before the
// test process starts any thread), collectives checked against float64 / rank-ordered references,
// and a dead or aborting peer gives an error, not a hang.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/dist/cpu_communicator.h"

namespace kvserve::dist {
namespace {

using Clock = std::chrono::steady_clock;

// A rank's body: returns an empty string on success, else what went wrong.
using RankBody = std::function<std::string(CpuCommunicator&)>;

CpuCommunicatorOptions options(const std::string& name, int32_t rank, int32_t size, int64_t chunk) {
  CpuCommunicatorOptions o;
  o.name = name;
  o.rank = rank;
  o.size = size;
  o.chunk_bytes = chunk;
  o.attach_timeout = std::chrono::milliseconds(20000);
  return o;
}

// Forks `size` ranks running `body` and waits for them (at most `limit`); each rank's exit code.
// A rank still running at the limit is killed and reported as -1.
std::vector<int> run_group(int32_t size, int64_t chunk, const RankBody& body,
                           std::chrono::seconds limit = std::chrono::seconds(60)) {
  const std::string name = unique_shm_name();
  std::vector<pid_t> pids;
  for (int32_t r = 0; r < size; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      auto comm = CpuCommunicator::create(options(name, r, size, chunk));
      if (!comm.is_ok()) {
        std::fprintf(stderr, "rank %d: %s\n", r, comm.status().to_string().c_str());
        _exit(2);
      }
      const std::string err = body(**comm);
      if (!err.empty()) std::fprintf(stderr, "rank %d: %s\n", r, err.c_str());
      _exit(err.empty() ? 0 : 1);
    }
    pids.push_back(pid);
  }
  std::vector<int> codes(size, -1);
  const auto deadline = Clock::now() + limit;
  for (int32_t r = 0; r < size; ++r) {
    int status = 0;
    while (waitpid(pids[r], &status, WNOHANG) == 0) {
      if (Clock::now() > deadline) {
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status, 0);
        status = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    codes[r] = status == -1 ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128);
  }
  return codes;
}

uint64_t test_seed() {
  static const uint64_t seed = [] {
    const uint64_t s = std::random_device{}();
    std::printf("dist_test seed %llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}

// Rank r's input: normal values from (seed, r).
std::vector<float> rank_values(uint64_t seed, int32_t r, int64_t n) {
  std::mt19937_64 gen(seed * 1000003 + r);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v)
    x = d(gen);
  return v;
}

TEST(CpuCommunicator, AllReduceF32EqualsRankOrderedSumAndFloat64) {
  const uint64_t seed = test_seed();
  // 4 KiB chunks: 1000 floats take one chunk, 5000 take five (the last partial).
  for (const int32_t size : {2, 3}) {
    for (const int64_t n : {int64_t{1}, int64_t{1000}, int64_t{5000}}) {
      const auto codes = run_group(size, 4096, [&](CpuCommunicator& c) -> std::string {
        std::vector<float> data = rank_values(seed, c.rank(), n);
        Status s = c.all_reduce_sum(data.data(), n, DType::kF32, {});
        if (!s.is_ok()) return s.to_string();
        std::vector<std::vector<float>> in(size);
        for (int32_t r = 0; r < size; ++r)
          in[r] = rank_values(seed, r, n);
        for (int64_t i = 0; i < n; ++i) {
          float ordered = in[0][i];
          double exact = in[0][i];
          double mag = std::abs(in[0][i]);
          for (int32_t r = 1; r < size; ++r) {
            ordered += in[r][i];
            exact += in[r][i];
            mag += std::abs(in[r][i]);
          }
          if (std::memcmp(&ordered, &data[i], sizeof(float)) != 0) {
            return "element " + std::to_string(i) + ": " + std::to_string(data[i]) +
                   " is not the rank-ordered f32 sum " + std::to_string(ordered);
          }
          if (std::abs(data[i] - exact) > 1e-6 * mag + 1e-30) {
            return "element " + std::to_string(i) + " far from the float64 sum";
          }
        }
        return "";
      });
      for (int32_t r = 0; r < size; ++r)
        EXPECT_EQ(codes[r], 0) << "size " << size << " n " << n << " rank " << r;
    }
  }
}

TEST(CpuCommunicator, AllReduceBf16SumsInF32InRankOrder) {
  const uint64_t seed = test_seed();
  const int64_t n = 3000;  // 6000 bytes: two 4 KiB chunks
  const int32_t size = 3;
  const auto codes = run_group(size, 4096, [&](CpuCommunicator& c) -> std::string {
    auto to_bf16 = [&](int32_t r) {
      std::vector<uint16_t> v(n);
      const std::vector<float> f = rank_values(seed, r, n);
      for (int64_t i = 0; i < n; ++i)
        v[i] = float_to_bf16(f[i]);
      return v;
    };
    std::vector<uint16_t> data = to_bf16(c.rank());
    Status s = c.all_reduce_sum(data.data(), n, DType::kBF16, {});
    if (!s.is_ok()) return s.to_string();
    std::vector<std::vector<uint16_t>> in;
    for (int32_t r = 0; r < size; ++r)
      in.push_back(to_bf16(r));
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0;
      for (int32_t r = 0; r < size; ++r)
        exact += bf16_to_float(in[r][i]);
      float acc = 0;
      for (int32_t r = 0; r < size; ++r)
        acc += bf16_to_float(in[r][i]);
      if (data[i] != float_to_bf16(acc)) return "element " + std::to_string(i) + " differs";
      // bf16 keeps 8 significant bits: within one rounding of the exact sum.
      if (std::abs(bf16_to_float(data[i]) - exact) > std::abs(exact) / 128 + 1e-6) {
        return "element " + std::to_string(i) + " far from the float64 sum";
      }
    }
    return "";
  });
  for (int32_t r = 0; r < size; ++r)
    EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(CpuCommunicator, AllGatherIsRankMajorAndBroadcastCopiesTheRoot) {
  const int32_t size = 3;
  const int64_t bytes = 10000;  // three 4 KiB chunks, the last partial
  auto pattern = [](int32_t r, int64_t i) {
    return static_cast<uint8_t>((i * 31 + r * 7 + 1) & 255);
  };
  const auto codes = run_group(size, 4096, [&](CpuCommunicator& c) -> std::string {
    std::vector<uint8_t> send(bytes);
    for (int64_t i = 0; i < bytes; ++i)
      send[i] = pattern(c.rank(), i);
    std::vector<uint8_t> recv(bytes * size, 0);
    Status s = c.all_gather(send.data(), recv.data(), bytes, {});
    if (!s.is_ok()) return s.to_string();
    for (int32_t r = 0; r < size; ++r) {
      for (int64_t i = 0; i < bytes; ++i) {
        if (recv[r * bytes + i] != pattern(r, i)) {
          return "gathered byte " + std::to_string(i) + " of rank " + std::to_string(r);
        }
      }
    }
    for (const int32_t root : {0, 2}) {
      std::vector<uint8_t> buf(bytes, 0);
      if (c.rank() == root) buf = send;
      s = c.broadcast(buf.data(), bytes, root, {});
      if (!s.is_ok()) return s.to_string();
      for (int64_t i = 0; i < bytes; ++i) {
        if (buf[i] != pattern(root, i)) return "broadcast byte " + std::to_string(i);
      }
    }
    return "";
  });
  for (int32_t r = 0; r < size; ++r)
    EXPECT_EQ(codes[r], 0) << "rank " << r;
}

TEST(CpuCommunicator, DeadPeerFailsTheCollectiveInsteadOfHanging) {
  const int32_t size = 3;
  const auto start = Clock::now();
  const auto codes = run_group(
      size, 4096,
      [&](CpuCommunicator& c) -> std::string {
        if (c.rank() == 2) _exit(7);  // dies without a word (a zombie until the test reaps it)
        std::vector<float> data(100, 1.0f);
        Status s = c.all_reduce_sum(data.data(), 100, DType::kF32, {});
        if (s.is_ok()) return "the all-reduce succeeded without rank 2";
        if (s.code() != StatusCode::kUnavailable) return "unexpected " + s.to_string();
        // Later calls fail at once.
        s = c.barrier();
        if (s.is_ok()) return "a barrier after the failure succeeded";
        return "";
      },
      std::chrono::seconds(30));
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
  EXPECT_EQ(codes[2], 7);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(20));
}

TEST(CpuCommunicator, AbortFailsEveryRankWithTheReason) {
  const auto codes = run_group(2, 4096, [&](CpuCommunicator& c) -> std::string {
    if (c.rank() == 1) {
      c.abort("worker gave up");
      return "";
    }
    std::vector<float> data(10, 1.0f);
    Status s = c.all_reduce_sum(data.data(), 10, DType::kF32, {});
    if (s.is_ok()) return "the all-reduce succeeded after an abort";
    if (s.message().find("worker gave up") == std::string::npos) return s.to_string();
    return "";
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

TEST(CpuCommunicator, MissingRanksTimeOutAtAttach) {
  CpuCommunicatorOptions o = options(unique_shm_name(), 0, 2, 4096);
  o.attach_timeout = std::chrono::milliseconds(200);
  auto c = CpuCommunicator::create(o);
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(c.status().message().find("1 of 2 ranks attached"), std::string::npos)
      << c.status().to_string();
  // The segment is gone: a later group can use the name space freely.
  o.attach_check = [] { return unavailable("worker 1 exited with status 3"); };
  o.name = unique_shm_name();
  o.attach_timeout = std::chrono::milliseconds(20000);
  c = CpuCommunicator::create(o);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("worker 1 exited"), std::string::npos);
}

TEST(CpuCommunicator, RejectsBadOptions) {
  EXPECT_FALSE(CpuCommunicator::create(options("/x", 2, 2, 4096)).is_ok());
  EXPECT_FALSE(CpuCommunicator::create(options("x", 0, 1, 4096)).is_ok());
  EXPECT_FALSE(CpuCommunicator::create(options("/x", 0, 1, 100)).is_ok());
  EXPECT_FALSE(CpuCommunicator::create(options("/x", 0, 65, 4096)).is_ok());
}

}  // namespace
}  // namespace kvserve::dist

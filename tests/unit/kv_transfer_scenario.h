// A KV transfer between two CPU pools on fragmented pages, and its naive reference: what the
// transport suites (kv_transport_test, ucx_transport_test, kv_transfer_gpu_test) check every
// backend against; polling a transfer to its end; the pipe protocol between a test and the peer
// process it forks or spawns.
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "kvserve/disagg/kv_runs.h"
#include "kvserve/disagg/kv_transport.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/platform/platform.h"

namespace kvserve::disagg::testing {

inline std::unique_ptr<platform::Platform> cpu_platform() {
  return std::move(platform::create_platform(Device{}).value());
}

inline mem::KvPoolConfig scenario_pool_config(int32_t page_size, int64_t pages) {
  return mem::KvPoolConfig{.num_layers = 3,
                           .num_kv_heads = 2,
                           .head_dim = 8,
                           .size = pages * page_size,
                           .page_size = page_size,
                           .dtype = DType::kBF16};
}

// The whole pool as one region: its first buffer and the bytes of all buffers (one allocation).
struct PoolRegion {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
};
inline PoolRegion pool_region(const mem::MHATokenToKVPool& pool) {
  const auto infos = pool.get_contiguous_buf_infos();
  PoolRegion r{static_cast<uint8_t*>(infos.front().ptr), 0};
  for (const auto& b : infos)
    r.bytes += b.bytes;
  EXPECT_EQ(static_cast<uint8_t*>(infos.back().ptr) + infos.back().bytes, r.base + r.bytes)
      << "the pool is not one allocation";
  return r;
}

inline void fill_random(uint8_t* p, uint64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  for (uint64_t i = 0; i < n; ++i)
    p[i] = static_cast<uint8_t>(rng() >> 56);
}

// `n` distinct page ids in [1, pages): [1, pages) cut into blocks of 1-5 consecutive pages,
// shuffled, concatenated: fragmented, with some runs.
inline std::vector<int32_t> fragmented_pages(int64_t pages, size_t n, std::mt19937_64& rng) {
  std::vector<std::vector<int32_t>> blocks;
  for (int32_t p = 1; p < pages;) {
    const int32_t len =
        std::min<int32_t>(1 + static_cast<int32_t>(rng() % 5), static_cast<int32_t>(pages) - p);
    std::vector<int32_t> b(len);
    std::iota(b.begin(), b.end(), p);
    blocks.push_back(std::move(b));
    p += len;
  }
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> out;
  for (const auto& b : blocks)
    out.insert(out.end(), b.begin(), b.end());
  out.resize(std::min(out.size(), n));
  return out;
}

// The reference: page by page, buffer by buffer, from the pools' own buffer pointers (not through
// merge_runs' offsets) into a copy of the destination's bytes.
inline void naive_page_copy(const mem::MHATokenToKVPool& src, const mem::MHATokenToKVPool& dst,
                            std::span<const int32_t> src_pages, std::span<const int32_t> dst_pages,
                            std::vector<uint8_t>& dst_bytes) {
  const auto s = src.get_contiguous_buf_infos();
  const auto d = dst.get_contiguous_buf_infos();
  const auto* dst_base = static_cast<const uint8_t*>(d.front().ptr);
  for (size_t i = 0; i < src_pages.size(); ++i) {
    for (size_t b = 0; b < s.size(); ++b) {
      const auto* from = static_cast<const uint8_t*>(s[b].ptr) + src_pages[i] * s[b].page_bytes;
      const auto* to = static_cast<const uint8_t*>(d[b].ptr) + dst_pages[i] * d[b].page_bytes;
      std::memcpy(dst_bytes.data() + (to - dst_base), from, s[b].page_bytes);
    }
  }
}

// Polls `id` every `interval` until it leaves kInProgress or `limit` passes.
inline TransferStatus wait_transfer(KvTransport& t, TransferId id, std::chrono::milliseconds limit,
                                    std::chrono::microseconds interval) {
  const auto end = std::chrono::steady_clock::now() + limit;
  TransferStatus s = t.poll(id);
  while (s == TransferStatus::kInProgress && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(interval);
    s = t.poll(id);
  }
  return s;
}

// --- length-prefixed messages over a pipe; every read bounded by a deadline ---
inline bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

inline bool read_all(int fd, void* data, size_t n, int timeout_ms) {
  auto* p = static_cast<uint8_t*>(data);
  while (n > 0) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return false;
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

inline bool send_message(int fd, const std::vector<uint8_t>& m) {
  const uint64_t n = m.size();
  return write_all(fd, &n, 8) && write_all(fd, m.data(), m.size());
}

// A message of at most `max_bytes`, each read within `timeout_ms`.
inline bool recv_message(int fd, std::vector<uint8_t>& m, uint64_t max_bytes, int timeout_ms) {
  uint64_t n = 0;
  if (!read_all(fd, &n, 8, timeout_ms) || n > max_bytes) return false;
  m.resize(n);
  return read_all(fd, m.data(), n, timeout_ms);
}

}  // namespace kvserve::disagg::testing

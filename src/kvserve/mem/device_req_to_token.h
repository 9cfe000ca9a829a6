// DeviceReqToToken: the device mirror of the request-to-token table (seed 000's req_to_token
// tensor lives on the GPU; ours is authoritative on the host, req_to_token_pool.h).
//
// [size + 1, max_context_len] int32 in the platform's memory, next to the host ReqToTokenPool it
// mirrors. The scheduler and the prefix cache keep reading and writing the host rows; every
// forward writes into the mirror what it adds (and an extend its whole prefix, so the mirror never
// depends on history: prefix reuse, chunked continuation, retraction and re-admission stay
// correct), with ops::write_req_to_token on the forward's stream before any kernel reads it. The
// attention backends then build page lists and slot lists from the mirror on the device
// (ops::build_kv_indices), so only O(batch) integers cross from the host per forward.
//
// Invariant: for every request of a forward, the mirror row equals the host row on [0, kv_len)
// once the forward's write has run. Only the Platform API is used here (no CUDA).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/core/tensor.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/platform/platform.h"

namespace kvserve::mem {

class DeviceReqToToken {
 public:
  // Allocates the mirror of `host` on `platform`, zero-filled (row 0, the padding row, stays the
  // host's zeros until a padded decode writes slot 0 at its position 0).
  static Result<std::unique_ptr<DeviceReqToToken>> create(platform::Platform& platform,
                                                          ReqToTokenPool& host);

  ReqToTokenPool& host() { return host_; }
  const ReqToTokenPool& host() const { return host_; }
  int32_t* data() { return buffer_.data_as<int32_t>(); }
  const int32_t* data() const { return buffer_.data_as<const int32_t>(); }
  int32_t rows() const { return host_.size() + 1; }
  int64_t stride() const { return host_.max_context_len(); }
  size_t bytes() const { return buffer_.bytes(); }

  // Tests and checks: row `row`, positions [0, len), copied back (synchronizes the platform).
  std::vector<int32_t> read_row(int32_t row, int32_t len) const;

 private:
  DeviceReqToToken(platform::Platform& platform, ReqToTokenPool& host, Buffer buffer)
      : platform_(platform), host_(host), buffer_(std::move(buffer)) {}

  platform::Platform& platform_;
  ReqToTokenPool& host_;
  Buffer buffer_;
};

}  // namespace kvserve::mem

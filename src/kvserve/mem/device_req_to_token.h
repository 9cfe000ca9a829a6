// DeviceReqToToken: the device mirror of the request-to-token table (seed 000's req_to_token
// tensor lives on the GPU; ours is authoritative on the host, req_to_token_pool.h).
//
// [size + 1, max_context_len] int32 in the platform's memory, the shape of the host ReqToTokenPool
// it mirrors. The runner owns it; the scheduler owns the host table, and the prefix cache keeps
// reading and writing the host rows. Every forward writes into the mirror what its batch carries
// (its new slots and ForwardBatch::row_rewrites: an extend's whole prefix, so the mirror never
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
  // Allocates a mirror of `rows` rows (the padding row included) of `stride` positions on
  // `platform`, zero-filled (row 0, the padding row, stays zeros until a padded decode writes slot
  // 0 at its position 0).
  static Result<std::unique_ptr<DeviceReqToToken>> create(platform::Platform& platform,
                                                          int32_t rows, int32_t stride);
  // The mirror of a table of `host`'s shape (nothing of `host` is kept).
  static Result<std::unique_ptr<DeviceReqToToken>> create(platform::Platform& platform,
                                                          const ReqToTokenPool& host) {
    return create(platform, host.size() + 1, host.max_context_len());
  }

  // Whether this mirrors a table of `host`'s shape.
  bool mirrors(const ReqToTokenPool& host) const {
    return rows_ == host.size() + 1 && stride_ == host.max_context_len();
  }
  int32_t* data() { return buffer_.data_as<int32_t>(); }
  const int32_t* data() const { return buffer_.data_as<const int32_t>(); }
  int32_t rows() const { return rows_; }
  int64_t stride() const { return stride_; }
  size_t bytes() const { return buffer_.bytes(); }

  // Tests and checks: row `row`, positions [0, len), copied back (synchronizes the platform).
  std::vector<int32_t> read_row(int32_t row, int32_t len) const;

 private:
  DeviceReqToToken(platform::Platform& platform, int32_t rows, int32_t stride, Buffer buffer)
      : platform_(platform), rows_(rows), stride_(stride), buffer_(std::move(buffer)) {}

  platform::Platform& platform_;
  int32_t rows_;
  int32_t stride_;
  Buffer buffer_;
};

}  // namespace kvserve::mem

// Communicator: the collectives tensor parallelism needs (docs/tensor-parallel.md), over a fixed
// group of ranks, one process each. Backends: `cpu` (POSIX shared memory between processes, host
// memory; cpu_communicator.h) and `nccl` (device memory on the caller's stream, usable inside
// captured CUDA graphs; nccl_communicator.h).
//
// Every rank calls the same collectives in the same order with the same sizes. A collective that
// cannot complete (a rank died or aborted the group) returns a Status; after one failure the group
// is unusable and every later call fails too.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"
#include "kvserve/platform/handles.h"

namespace kvserve::dist {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int32_t rank() const = 0;
  virtual int32_t size() const = 0;
  virtual std::string_view backend() const = 0;

  // data[0, count) of `dtype` (f32 or bf16) becomes the element-wise sum over the ranks, equal bit
  // for bit on every rank, queued on `stream` (the cpu backend runs it before returning).
  virtual Status all_reduce_sum(void* data, int64_t count, DType dtype,
                                platform::StreamHandle stream) = 0;
  // recv[r * bytes_per_rank, (r + 1) * bytes_per_rank) = rank r's send (rank-major concatenation).
  virtual Status all_gather(const void* send, void* recv, int64_t bytes_per_rank,
                            platform::StreamHandle stream) = 0;
  // data[0, bytes) of `root` copied to every rank.
  virtual Status broadcast(void* data, int64_t bytes, int32_t root,
                           platform::StreamHandle stream) = 0;

  // Marks the group failed (a rank gives up): every rank's pending and later calls fail. The nccl
  // backend aborts the NCCL communicator at once, which ends collectives queued on a stream that
  // would otherwise wait forever for a dead rank.
  virtual void abort(std::string_view reason) = 0;
  // A failure the backend has found on its own since the collectives were queued (nccl:
  // ncclCommGetAsyncError, e.g. a peer's connection broke); ok while the group works. Called by
  // rank 0's wait watch while it waits on the device (model/tp_group.h).
  virtual Status check() { return Status::ok(); }
};

}  // namespace kvserve::dist

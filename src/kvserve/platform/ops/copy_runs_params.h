// Parameters of copy_runs (fmt-free: CUDA sources include it): many (src offset, dst offset,
// length) byte copies between two regions in one launch, for the cuda-ipc KV transport (a chunk's
// merged page runs into a peer's pool mapped through CUDA IPC: one kernel per chunk, not one
// cudaMemcpy per page).
//   dst[runs[3r + 1] + i] = src[runs[3r] + i], i < runs[3r + 2], r < num_runs
// Runs must not overlap on the destination.
#pragma once

#include <cstdint>

namespace kvserve::ops {

struct CopyRunsParams {
  const uint8_t* src = nullptr;
  uint8_t* dst = nullptr;
  const uint64_t* runs = nullptr;  // [num_runs][3]: src offset, dst offset, length; memory the
                                   // op's device reads
  int32_t num_runs = 0;
};

}  // namespace kvserve::ops

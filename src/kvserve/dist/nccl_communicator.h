// The `nccl` communicator (CUDA builds): NCCL's all-reduce / all-gather / broadcast on device
// memory, queued on the caller's stream (the runner's), so they can be captured in the decode
// CUDA graphs. libnccl.so.2 is loaded at run time (dlopen): a binary that never asks for tensor
// parallelism over NCCL runs without it. Rank 0 makes the unique id; the other ranks get it over
// the control channel (the cpu communicator) and every rank calls create_nccl_communicator.
// In a build without CUDA every call returns kUnimplemented.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "kvserve/dist/communicator.h"

namespace kvserve::dist {

using NcclUniqueId = std::array<uint8_t, 128>;

// Whether libnccl.so.2 loads (and has the functions used here); the reason when it does not.
Status nccl_library_status();
// ncclGetUniqueId: made by rank 0, sent to every rank.
Result<NcclUniqueId> nccl_unique_id();
// ncclCommInitRank on CUDA device `device` (made current for the call). Blocks until every rank
// of the group has called it.
Result<std::unique_ptr<Communicator>> create_nccl_communicator(const NcclUniqueId& id, int32_t rank,
                                                               int32_t size, int32_t device);

}  // namespace kvserve::dist

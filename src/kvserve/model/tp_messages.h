// What rank 0 of a tensor-parallel group sends its workers over the control channel
// (docs/tensor-parallel.md): the setup once (checkpoint, runner options, which communicator), then
// per step a forward command (the batch's integers: everything a forward reads of the
// scheduler's memory) or shutdown. Both ends are the same binary: the encoding is plain bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/dist/communicator.h"
#include "kvserve/dist/nccl_communicator.h"
#include "kvserve/mem/forward_batch.h"

namespace kvserve::model {

struct ModelRunnerOptions;

enum class TpMessageKind : uint64_t { kSetup = 1, kForward = 2, kShutdown = 3 };

struct TpSetup {
  std::filesystem::path model_dir;
  bool nccl = false;  // the forward's collectives over NCCL (CUDA), else over the control channel
  dist::NcclUniqueId nccl_id{};
};

// The setup with the runner options every rank uses (device: rank 0's; a worker adds its rank to
// the CUDA device index). Options that only rank 0 uses (progress bar, failure callback, fault
// injection) do not cross.
std::vector<uint8_t> encode_setup(const TpSetup& setup, const ModelRunnerOptions& options);
Status decode_setup(std::span<const uint8_t> bytes, TpSetup& setup, ModelRunnerOptions& options);

// A decoder-only batch's integers (mode, per-request and per-token arrays, row rewrites); the
// runner's pointers and the table do not cross.
void encode_forward(const mem::ForwardBatch& batch, std::vector<uint8_t>& out);
Status decode_forward(std::span<const uint8_t> bytes, mem::ForwardBatch& batch);

// One message over `control` (a broadcast from rank 0 of a 16-byte header, then the payload).
// Rank 0 sends; the others receive into `kind` and `payload`.
Status send_message(dist::Communicator& control, TpMessageKind kind,
                    std::span<const uint8_t> payload);
Status receive_message(dist::Communicator& control, TpMessageKind& kind,
                       std::vector<uint8_t>& payload);

}  // namespace kvserve::model

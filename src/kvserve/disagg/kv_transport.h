// KvTransport: one-sided writes of KV bytes from this process's registered region into a peer's
// (issue 18, prefill/decode disaggregation).
//
// The model: each process registers one region once (the KV pool's single allocation, or a
// staging buffer) and publishes its RegionDescriptor through the control plane. A sender connects
// to a peer's descriptor once, then posts batches of WriteOps (offsets into its own region and the
// peer's) and polls each batch until it is kDone (every byte is visible in the peer's region) or
// kFailed (the peer died, the transport failed, or an injected fault). The receiver takes no part
// in a write: the sender tells it through the control plane that a transfer is done.
//
// Backends (create_kv_transport):
//   loopback  in-process memcpy between regions of one process (unit tests; peers are the
//             descriptors of regions registered on any loopback transport of this process)
//   ucx       UCP over whatever transports UCX finds (tcp, sysv/posix shared memory, cma): the
//             cross-machine path. Host memory only: Debian's UCX has no CUDA transports, so a GPU
//             pool goes through pinned host staging (disagg/kv_staging.h: gather on the device
//             into a pinned host staging region, which is what is registered here).
//   cuda-ipc  same host, GPU to GPU: the receiver exports a CUDA IPC handle of its region, the
//             sender maps it and copies every op of a batch with one kernel on its transfer
//             stream (CUDA builds).
//
// Threading: every method may be called from any thread; poll never blocks for long.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/core/tensor.h"
#include "kvserve/platform/handles.h"

namespace kvserve::platform {
class Platform;
}

namespace kvserve::disagg {

enum class TransportKind { kLoopback, kUcx, kCudaIpc };

// "loopback", "ucx", "cuda-ipc" (the names of --disaggregation-transfer-backend).
std::string_view transport_kind_name(TransportKind kind);
// kInvalidArgument naming the valid names.
Result<TransportKind> parse_transport_kind(std::string_view name);

// kDone: every byte of the batch is visible in the peer's region. kFailed is final; a transfer
// never goes back to kInProgress.
enum class TransferStatus { kInProgress, kDone, kFailed };
std::string_view transfer_status_name(TransferStatus status);

// What a peer needs to write into a registered region: the backend that made it, that backend's
// opaque bytes (UCX: worker address + packed rkey + base address; cuda-ipc: IPC handle + offset;
// loopback: a region id), and the region's size.
struct RegionDescriptor {
  std::string backend;
  std::vector<uint8_t> blob;
  uint64_t bytes = 0;

  bool operator==(const RegionDescriptor&) const = default;
};

// {"backend": ..., "bytes": N, "blob": "<hex>"} as one line of JSON; the parse is strict
// (kInvalidArgument naming the field).
std::string region_descriptor_to_json(const RegionDescriptor& descriptor);
Result<RegionDescriptor> region_descriptor_from_json(std::string_view json);
// A compact binary form (little-endian lengths) for binary control channels (ZeroMQ frames).
std::vector<uint8_t> region_descriptor_to_bytes(const RegionDescriptor& descriptor);
Result<RegionDescriptor> region_descriptor_from_bytes(std::span<const uint8_t> bytes);

// One write: `length` bytes from offset `src_offset` of the local registered region to offset
// `dst_offset` of the peer's.
struct WriteOp {
  uint64_t src_offset = 0;
  uint64_t dst_offset = 0;
  uint64_t length = 0;

  bool operator==(const WriteOp&) const = default;
};

// Test-only fault injection, drawn per posted transfer from a generator seeded with `seed`:
//   fail_probability  the transfer ends kFailed (nothing or part of it written)
//   drop_probability  the transfer is lost: nothing is written and it stays kInProgress forever
//                     (what a lost message looks like; the caller's timeout must end it)
//   delay_ms          every transfer reports kDone no earlier than this long after its post
struct TransportFaults {
  double fail_probability = 0;
  double drop_probability = 0;
  int delay_ms = 0;
  uint64_t seed = 0;

  bool any() const { return fail_probability > 0 || drop_probability > 0 || delay_ms > 0; }
};

struct TransportOptions {
  TransportKind kind = TransportKind::kLoopback;
  TransportFaults faults;
  // A transfer not done this long after its post (its ready event included) fails. 0: never.
  int transfer_timeout_ms = 30000;
  // UCX: the transports to use (UCX_TLS syntax, e.g. "tcp", "posix,cma", "sm"); empty: UCX's own
  // choice (the UCX_TLS environment variable or all).
  std::string ucx_transports;
  // UCX: seconds between keepalive probes, so a peer that died without closing its sockets is
  // detected; 0: UCX's default.
  double ucx_keepalive_interval_s = 1.0;
  // UCX: endpoints in UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails its transfers instead of
  // hanging. UCX 1.13's shared-memory transports (posix, sysv) have no peer failure handler and
  // cma no active messages, so with it UCX puts over tcp even between processes of one host.
  // false: UCP_ERR_HANDLING_MODE_NONE, which lets UCX put through shared memory (posix/memory,
  // ~50x tcp's rate here) but notices no dead peer: only the transfer timeout ends a transfer to
  // one, and its endpoint is then leaked. For same-host peers whose liveness the control plane
  // watches.
  bool ucx_peer_failure_detection = true;
  // cuda-ipc: the platform whose device the regions live on and whose kernels copy (required).
  // Loopback: used, when set, to wait on ready events and to copy device memory.
  platform::Platform* platform = nullptr;
};

struct PeerId {
  uint64_t value = 0;
  bool operator==(const PeerId&) const = default;
};
struct TransferId {
  uint64_t value = 0;
  bool operator==(const TransferId&) const = default;
};

class KvTransport {
 public:
  virtual ~KvTransport() = default;

  virtual std::string_view name() const = 0;

  // Registers the region writes go to or come from: once per transport (the KV pool's
  // allocation, or a staging buffer). kInvalidArgument for a second region, kUnimplemented for a
  // device this backend cannot reach (ucx: a CUDA region; use pinned host staging).
  virtual Result<RegionDescriptor> register_region(void* base, uint64_t bytes, Device device) = 0;

  // Connects to a peer's region, once per peer. kInvalidArgument for another backend's or a
  // malformed descriptor, kUnavailable when the peer cannot be reached.
  virtual Result<PeerId> connect(const RegionDescriptor& remote) = 0;
  // Forgets a peer; its transfers still in progress fail.
  virtual void disconnect(PeerId peer) = 0;

  // Starts one batch of writes to `peer`. The source bytes are read once `ready` has completed
  // (an event on the stream that produced them; a null handle: they are ready now): the forward
  // that wrote the KV need not be waited for on the caller's thread. Every op must lie inside
  // both regions (kInvalidArgument otherwise, nothing started); an unknown or failed peer is
  // kUnavailable. The local source must stay unchanged, and `ready` neither re-recorded nor
  // destroyed, until the transfer ends.
  virtual Result<TransferId> post(PeerId peer, std::span<const WriteOp> ops,
                                  platform::EventHandle ready = {}) = 0;

  // The transfer's state, driving progress where the backend needs it; never blocks for long.
  // An unknown (or released) id is kFailed.
  virtual TransferStatus poll(TransferId transfer) = 0;

  // The device's time on a transfer that is kDone, where the backend can tell (cuda-ipc: from
  // events around its copy, i.e. the bandwidth the write itself got, apart from when it was
  // polled); -1 otherwise.
  virtual double device_seconds(TransferId transfer) {
    (void)transfer;
    return -1;
  }

  // Forgets a transfer. Releasing one still in progress detaches it: the transport finishes or
  // fails it in the background (its writes may still land until then).
  virtual void release(TransferId transfer) = 0;
};

Result<std::unique_ptr<KvTransport>> create_kv_transport(const TransportOptions& options);

}  // namespace kvserve::disagg

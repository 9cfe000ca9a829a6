// Prefill/decode disaggregation as the engine sees it (docs/disaggregation.md): the server's role,
// its timeouts, what a request carries to find its other half, and the counters the server shows.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "kvserve/core/status.h"
#include "kvserve/disagg/kv_staging.h"
#include "kvserve/disagg/kv_transport.h"
#include "kvserve/engine/disagg_target.h"
#include "kvserve/pd/channel.h"
#include "kvserve/pd/layout.h"

namespace kvserve::engine {

enum class DisaggMode { kNone, kPrefill, kDecode };
std::string_view disagg_mode_name(DisaggMode mode);  // "null", "prefill", "decode"
// --disaggregation-mode: null|prefill|decode; kInvalidArgument naming the flag.
Result<DisaggMode> parse_disagg_mode(std::string_view name);

struct DisaggOptions {
  DisaggMode mode = DisaggMode::kNone;
  disagg::TransportKind transport = disagg::TransportKind::kLoopback;
  // Prefill: the control plane's port (0: any free port; Engine::disagg_bootstrap_port says
  // which) and the address it binds.
  int32_t bootstrap_port = 8998;
  std::string bootstrap_bind = "0.0.0.0";
  // Bootstrapping (the other side not there yet: no destination pages at the prefill, no
  // handshake at the decode) may last this long.
  double bootstrap_timeout_s = 30;
  // WaitingForInput + Transferring together may last this long (SGLang PR 31800: a timeout that
  // covers only the first leaves requests stuck in the second).
  double transfer_timeout_s = 30;
  // Decode -> prefill pings; a peer silent for heartbeat_timeout_s is dead: its requests fail and
  // the decode side frees their KV (a dead sender writes nothing more). The next request to it
  // starts a new handshake: nothing is remembered against a peer.
  double heartbeat_interval_s = 1;
  double heartbeat_timeout_s = 5;
  // Test-only: faults the transport injects into transfers.
  disagg::TransportFaults faults;
  // UCX transports (UCX_TLS syntax), empty: UCX's choice.
  std::string ucx_transports;
  // MiB of the staging buffer KV moves through (disagg/kv_staging.h; both sides of a pair need
  // one). 0: none, unless the backend cannot reach the pool (ucx with a GPU pool), which takes
  // kDefaultStagingBufferMb of pinned host memory.
  double staging_buffer_mb = 0;
};

inline constexpr double kDefaultStagingBufferMb = 256;

// What the scheduler's disaggregation queues need from the engine.
struct DisaggContext {
  DisaggOptions options;
  disagg::KvTransport* transport = nullptr;
  disagg::RegionDescriptor region;  // this side's registered region: the KV pool or its staging
  // The staging buffer (layout.staging_bytes nonzero; the engine owns the memory) and the pool
  // its stagers gather from and scatter into.
  disagg::StagingRegion staging;
  mem::MHATokenToKVPool* pool = nullptr;
  pd::KvLayout layout;                        // this side's
  std::unique_ptr<pd::ControlServer> server;  // prefill
  std::string id;                             // decode: its identity towards prefill servers
  // Prefill: waits until the KV the last forward wrote is in memory (the runner's stream),
  // before a transfer reads it. Null: nothing to wait for.
  std::function<void()> kv_written;
};

// Counters of one server's KV hand-offs (/metrics, /get_server_info).
struct DisaggStats {
  DisaggMode mode = DisaggMode::kNone;
  int32_t bootstrap_port = 0;  // prefill
  // Requests now in each stage.
  int32_t bootstrapping = 0;
  int32_t waiting_for_input = 0;
  int32_t transferring = 0;
  int32_t draining = 0;  // ended, waiting until no write of theirs can land
  int32_t peers = 0;
  // Totals.
  int64_t succeeded = 0;
  int64_t failed = 0;
  int64_t timeouts = 0;
  int64_t aborted = 0;
  int64_t transfers = 0;          // prefill: write batches done
  int64_t transfer_failures = 0;  // prefill: write batches failed
  int64_t transfer_bytes = 0;     // prefill: bytes written
  double transfer_seconds = 0;    // prefill: post -> done, summed over batches
  double transfer_max_seconds = 0;
  // prefill: the device's own time on the batches whose backend tells (cuda-ipc), and their bytes
  int64_t transfer_device_bytes = 0;
  double transfer_device_seconds = 0;
  // Each side: from the hand-off's start (decode: the request's arrival) to Success, summed.
  double handoff_seconds = 0;
  // The hand-off's stages, summed over successes. Prefill: the request and its destination pages
  // both here (bootstrap), then its prompt forwarded and every chunk posted (forward: queue +
  // forward), then the last write done (last_transfer: what the KV transfer adds to TTFT).
  // Decode: from the request's arrival to its pages allocated and their ids sent (bootstrap),
  // then until the prefill's done arrived (wait).
  double bootstrap_seconds = 0;
  double forward_seconds = 0;
  double last_transfer_seconds = 0;
  double wait_seconds = 0;
  int64_t refused_peers = 0;  // handshakes refused (layout mismatch)
  // Staging (layout.staging_bytes nonzero). Decode: the staging region's token capacity and the
  // tokens its rooms hold now. Prefill: chunks gathered and written through it.
  int64_t staging_tokens = 0;
  int64_t staging_used_tokens = 0;
  int64_t staged_chunks = 0;
};

}  // namespace kvserve::engine

// The cuda-ipc backend: GPU to GPU on one host (see kv_transport.h).
//
// The receiver registers its KV pool (device memory) and publishes a CUDA IPC handle of the
// allocation holding it; the sender maps that allocation once per peer and copies every write of
// a batch with one ops::copy_runs kernel on its transfer stream, ordered after the batch's ready
// event (the forward that wrote the KV), never one cudaMemcpy per page. kDone once the kernel
// has completed on the device (its event), at which point the bytes are in the receiver's memory.
//
// A post's run list goes to the device from pinned host memory into a device buffer, both taken
// from a free list of earlier posts' (the kernel's event returns them): a copy from pageable
// memory may wait for the transfer stream, which waits for the forward, so the engine thread would
// stall in post(); and a fresh device buffer per post is a cudaMalloc/cudaFree pair (the free waits
// for the whole device) wherever the platform has no pool.
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "kvserve/disagg/backends.h"
#include "kvserve/disagg/transport_faults.h"
#include "kvserve/platform/device_ipc.h"
#include "kvserve/platform/ops/copy_runs.h"
#include "kvserve/platform/platform.h"

namespace kvserve::disagg {
namespace {

using Clock = std::chrono::steady_clock;

// blob: IPC handle (64) | offset (8) | exporting pid (8) | address in the exporting process (8)
constexpr size_t kBlobBytes = 64 + 8 + 8 + 8;
// The longest run one copy_runs block copies (page-16 runs of an 8B-shaped pool are 32 KiB).
constexpr uint64_t kMaxRunBytes = uint64_t{256} << 10;

class CudaIpcTransport final : public KvTransport {
 public:
  CudaIpcTransport(const TransportOptions& options, platform::Platform& platform)
      : options_(options), platform_(&platform), faults_(options.faults) {
    stream_ = platform_->create_stream();
  }

  ~CudaIpcTransport() override {
    platform_->synchronize_stream(stream_);
    for (auto& [id, t] : transfers_) {
      if (t.done.ptr != nullptr) platform_->destroy_event(t.done);
      if (t.start.ptr != nullptr) platform_->destroy_event(t.start);
      free_run_list(std::exchange(t.runs, {}));
    }
    for (RunList& r : run_lists_)
      free_run_list(std::move(r));
    for (auto& [id, p] : peers_) {
      if (!p.own) platform::close_device_memory(p.mapped, p.handle);
    }
    platform_->destroy_stream(stream_);
  }

  std::string_view name() const override { return "cuda-ipc"; }

  Result<RegionDescriptor> register_region(void* base, uint64_t bytes, Device device) override {
    std::lock_guard lock(mu_);
    if (local_ != nullptr) return invalid_argument("cuda-ipc transport: a region is registered");
    if (device != platform_->device()) {
      return make_status(StatusCode::kUnimplemented,
                         "cuda-ipc transport: a {} region on a {} platform", device.to_string(),
                         platform_->device().to_string());
    }
    if (base == nullptr || bytes == 0) {
      return invalid_argument("cuda-ipc transport: an empty region");
    }
    KV_ASSIGN_OR_RETURN(platform::DeviceIpcHandle h, platform::export_device_memory(base));
    local_ = static_cast<uint8_t*>(base);
    local_bytes_ = bytes;
    std::vector<uint8_t> blob(kBlobBytes);
    std::memcpy(blob.data(), h.handle.data(), 64);
    std::memcpy(blob.data() + 64, &h.offset, 8);
    const uint64_t pid = static_cast<uint64_t>(::getpid());
    std::memcpy(blob.data() + 72, &pid, 8);
    const uint64_t address = reinterpret_cast<uint64_t>(base);
    std::memcpy(blob.data() + 80, &address, 8);
    return RegionDescriptor{"cuda-ipc", std::move(blob), bytes};
  }

  Result<PeerId> connect(const RegionDescriptor& remote) override {
    if (remote.backend != "cuda-ipc" || remote.blob.size() != kBlobBytes) {
      return invalid_argument("cuda-ipc transport: a '{}' descriptor of {} bytes", remote.backend,
                              remote.blob.size());
    }
    Peer p;
    std::memcpy(p.handle.handle.data(), remote.blob.data(), 64);
    std::memcpy(&p.handle.offset, remote.blob.data() + 64, 8);
    uint64_t pid = 0;
    std::memcpy(&pid, remote.blob.data() + 72, 8);
    if (pid == static_cast<uint64_t>(::getpid())) {
      // CUDA refuses to open a process's own handle; the address is valid here as it is.
      uint64_t address = 0;
      std::memcpy(&address, remote.blob.data() + 80, 8);
      p.mapped = reinterpret_cast<void*>(address);
      p.own = true;
    } else {
      KV_ASSIGN_OR_RETURN(p.mapped, platform::open_device_memory(p.handle));
    }
    p.bytes = remote.bytes;
    std::lock_guard lock(mu_);
    const PeerId id{next_peer_++};
    peers_[id.value] = p;
    return id;
  }

  void disconnect(PeerId peer) override {
    std::lock_guard lock(mu_);
    const auto it = peers_.find(peer.value);
    if (it == peers_.end()) return;
    // Kernels writing into the mapping must finish before it goes.
    platform_->synchronize_stream(stream_);
    for (auto& [id, t] : transfers_) {
      if (t.peer == peer.value && t.status == TransferStatus::kInProgress) {
        t.status = TransferStatus::kFailed;
      }
    }
    if (!it->second.own) platform::close_device_memory(it->second.mapped, it->second.handle);
    peers_.erase(it);
  }

  Result<TransferId> post(PeerId peer, std::span<const WriteOp> ops,
                          platform::EventHandle ready) override {
    std::lock_guard lock(mu_);
    if (local_ == nullptr) return invalid_argument("cuda-ipc transport: no region registered");
    const auto it = peers_.find(peer.value);
    if (it == peers_.end()) {
      return unavailable("cuda-ipc transport: unknown peer {}", peer.value);
    }
    KV_RETURN_IF_ERROR(check_write_ops(ops, local_bytes_, it->second.bytes));
    Transfer t;
    t.peer = peer.value;
    t.posted = Clock::now();
    const FaultDraw fault = faults_.draw();
    t.done_not_before = t.posted + fault.delay;
    if (fault.kind == FaultDraw::Kind::kFail) {
      t.status = TransferStatus::kFailed;
    } else if (fault.kind == FaultDraw::Kind::kDrop) {
      t.dropped = true;
    } else {
      // copy_runs gives each run one block: a long write (a staging piece is one write of up
      // to the whole buffer) is cut into kMaxRunBytes runs, so it spreads over the SMs.
      size_t num_runs = 0;
      for (const WriteOp& op : ops)
        num_runs += std::max<uint64_t>(1, (op.length + kMaxRunBytes - 1) / kMaxRunBytes);
      KV_ASSIGN_OR_RETURN(t.runs, take_run_list(num_runs * 3 * sizeof(uint64_t)));
      auto* runs = static_cast<uint64_t*>(t.runs.host);
      for (const WriteOp& op : ops) {
        uint64_t at = 0;
        do {
          const uint64_t n = std::min(op.length - at, kMaxRunBytes);
          *runs++ = op.src_offset + at;
          *runs++ = op.dst_offset + at;
          *runs++ = n;
          at += n;
        } while (at < op.length);
      }
      if (ready.ptr != nullptr) platform_->stream_wait_event(stream_, ready);
      t.start = platform_->create_event();
      platform_->record_event(t.start, stream_);
      platform_->copy(t.runs.device.data(), t.runs.host, num_runs * 3 * sizeof(uint64_t),
                      platform::CopyKind::kHostToDevice, stream_);
      ops::CopyRunsParams params;
      params.src = local_;
      params.dst = static_cast<uint8_t*>(it->second.mapped);
      params.runs = t.runs.device.data_as<const uint64_t>();
      params.num_runs = static_cast<int32_t>(num_runs);
      ops::copy_runs(*platform_, params, stream_);
      t.done = platform_->create_event();
      platform_->record_event(t.done, stream_);
    }
    const TransferId id{next_transfer_++};
    transfers_.emplace(id.value, std::move(t));
    return id;
  }

  TransferStatus poll(TransferId transfer) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(transfer.value);
    if (it == transfers_.end()) return TransferStatus::kFailed;
    Transfer& t = it->second;
    if (t.status != TransferStatus::kInProgress) return t.status;
    const auto now = Clock::now();
    if (t.done.ptr != nullptr && !t.kernel_done && platform_->event_done(t.done)) {
      t.kernel_done = true;
      give_back_run_list(std::exchange(t.runs, {}));  // the kernel has read it
    }
    if (t.kernel_done && now >= t.done_not_before) {
      t.status = TransferStatus::kDone;
    } else if (options_.transfer_timeout_ms > 0 &&
               now - t.posted >= std::chrono::milliseconds(options_.transfer_timeout_ms)) {
      t.status = TransferStatus::kFailed;
    }
    return t.status;
  }

  double device_seconds(TransferId transfer) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(transfer.value);
    if (it == transfers_.end() || it->second.status != TransferStatus::kDone ||
        it->second.start.ptr == nullptr) {
      return -1;
    }
    return platform_->elapsed_ms(it->second.start, it->second.done) / 1e3;
  }

  void release(TransferId transfer) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(transfer.value);
    if (it == transfers_.end()) return;
    Transfer& t = it->second;
    if (t.done.ptr != nullptr) {
      platform_->synchronize_event(t.done);  // its run list is free for another post now
      platform_->destroy_event(t.done);
    }
    if (t.start.ptr != nullptr) platform_->destroy_event(t.start);
    give_back_run_list(std::exchange(t.runs, {}));
    transfers_.erase(it);
  }

 private:
  // A post's run list: pinned host memory and the device buffer the kernel reads, of one capacity.
  struct RunList {
    void* host = nullptr;
    Buffer device;
    size_t capacity = 0;
  };
  // Free run lists kept for later posts (more are freed when their transfers end).
  static constexpr size_t kKeptRunLists = 8;

  // A free run list of at least `bytes` (the smallest that fits), or a new one of a power of two.
  Result<RunList> take_run_list(size_t bytes) {
    auto best = run_lists_.end();
    for (auto it = run_lists_.begin(); it != run_lists_.end(); ++it) {
      if (it->capacity >= bytes && (best == run_lists_.end() || it->capacity < best->capacity)) {
        best = it;
      }
    }
    if (best != run_lists_.end()) {
      RunList r = std::move(*best);
      run_lists_.erase(best);
      return r;
    }
    RunList r;
    r.capacity = std::bit_ceil(std::max<size_t>(bytes, 4096));
    KV_ASSIGN_OR_RETURN(r.device, platform_->allocate_buffer(r.capacity));
    KV_ASSIGN_OR_RETURN(r.host, platform_->allocate_host(r.capacity));
    return r;
  }
  // Back to the free list once no kernel reads it; beyond kKeptRunLists the smallest goes.
  void give_back_run_list(RunList r) {
    if (r.host == nullptr) return;
    run_lists_.push_back(std::move(r));
    if (run_lists_.size() <= kKeptRunLists) return;
    auto smallest = std::min_element(
        run_lists_.begin(), run_lists_.end(),
        [](const RunList& a, const RunList& b) { return a.capacity < b.capacity; });
    free_run_list(std::move(*smallest));
    run_lists_.erase(smallest);
  }
  void free_run_list(RunList r) {
    if (r.host != nullptr) platform_->deallocate_host(r.host, r.capacity);
  }

  struct Peer {
    platform::DeviceIpcHandle handle;
    void* mapped = nullptr;
    uint64_t bytes = 0;
    bool own = false;  // a region of this process: not mapped, not closed
  };
  struct Transfer {
    uint64_t peer = 0;
    TransferStatus status = TransferStatus::kInProgress;
    bool dropped = false;
    bool kernel_done = false;
    Clock::time_point posted;
    Clock::time_point done_not_before;
    RunList runs;                 // until the kernel has read it
    platform::EventHandle start;  // before the run list's copy: device_seconds
    platform::EventHandle done;
  };

  TransportOptions options_;
  platform::Platform* platform_;
  FaultInjector faults_;
  std::mutex mu_;
  platform::StreamHandle stream_;
  uint8_t* local_ = nullptr;
  uint64_t local_bytes_ = 0;
  uint64_t next_peer_ = 1;
  uint64_t next_transfer_ = 1;
  std::map<uint64_t, Peer> peers_;
  std::map<uint64_t, Transfer> transfers_;
  std::vector<RunList> run_lists_;  // free
};

}  // namespace

Result<std::unique_ptr<KvTransport>> create_cuda_ipc_transport(const TransportOptions& options) {
  if (options.platform == nullptr || options.platform->device().kind != DeviceKind::kCuda) {
    return unavailable("the cuda-ipc KV transfer backend needs a CUDA platform");
  }
  return std::unique_ptr<KvTransport>(new CudaIpcTransport(options, *options.platform));
}

}  // namespace kvserve::disagg

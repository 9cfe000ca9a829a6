// The cuda-ipc backend: GPU to GPU on one host (see kv_transport.h).
//
// The receiver registers its KV pool (device memory) and publishes a CUDA IPC handle of the
// allocation holding it; the sender maps that allocation once per peer and copies every write of
// a batch with one ops::copy_runs kernel on its transfer stream, ordered after the batch's ready
// event (the forward that wrote the KV), never one cudaMemcpy per page. kDone once the kernel
// has completed on the device (its event), at which point the bytes are in the receiver's memory.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

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
    }
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
      std::vector<uint64_t> runs;
      runs.reserve(ops.size() * 3);
      for (const WriteOp& op : ops) {
        runs.insert(runs.end(), {op.src_offset, op.dst_offset, op.length});
      }
      KV_ASSIGN_OR_RETURN(t.runs, platform_->allocate_buffer(runs.size() * sizeof(uint64_t)));
      if (ready.ptr != nullptr) platform_->stream_wait_event(stream_, ready);
      // From pageable memory: the copy has taken the bytes when it returns.
      platform_->copy(t.runs.data(), runs.data(), runs.size() * sizeof(uint64_t),
                      platform::CopyKind::kHostToDevice, stream_);
      ops::CopyRunsParams params;
      params.src = local_;
      params.dst = static_cast<uint8_t*>(it->second.mapped);
      params.runs = t.runs.data_as<const uint64_t>();
      params.num_runs = static_cast<int32_t>(ops.size());
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
    if (t.done.ptr != nullptr && platform_->event_done(t.done)) {
      t.kernel_done = true;
      t.runs.reset();  // the kernel has read it
    }
    if (t.kernel_done && now >= t.done_not_before) {
      t.status = TransferStatus::kDone;
    } else if (options_.transfer_timeout_ms > 0 &&
               now - t.posted >= std::chrono::milliseconds(options_.transfer_timeout_ms)) {
      t.status = TransferStatus::kFailed;
    }
    return t.status;
  }

  void release(TransferId transfer) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(transfer.value);
    if (it == transfers_.end()) return;
    Transfer& t = it->second;
    if (t.done.ptr != nullptr) {
      platform_->synchronize_event(t.done);  // its runs buffer goes back to the pool now
      platform_->destroy_event(t.done);
    }
    transfers_.erase(it);
  }

 private:
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
    Buffer runs;
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
};

}  // namespace

Result<std::unique_ptr<KvTransport>> create_cuda_ipc_transport(const TransportOptions& options) {
  if (options.platform == nullptr || options.platform->device().kind != DeviceKind::kCuda) {
    return unavailable("the cuda-ipc KV transfer backend needs a CUDA platform");
  }
  return std::unique_ptr<KvTransport>(new CudaIpcTransport(options, *options.platform));
}

}  // namespace kvserve::disagg

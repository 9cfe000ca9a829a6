// The loopback backend: writes between regions registered in this process, copied at post time
// (memcpy, or the platform's copy when a region is device memory). What the unit tests of the
// transfer logic run on; faults and timeouts behave as on the other backends.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <mutex>

#include "kvserve/disagg/backends.h"
#include "kvserve/disagg/transport_faults.h"
#include "kvserve/platform/platform.h"

namespace kvserve::disagg {
namespace {

using Clock = std::chrono::steady_clock;

struct Region {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  Device device;
};

// Every loopback region of this process, by id.
struct RegionRegistry {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<uint64_t, Region> regions;
};

RegionRegistry& registry() {
  static RegionRegistry* r = new RegionRegistry();  // never destroyed: outlives every transport
  return *r;
}

std::vector<uint8_t> encode_blob(uint64_t region_id) {
  std::vector<uint8_t> blob(16);
  const uint64_t pid = static_cast<uint64_t>(::getpid());
  std::memcpy(blob.data(), &region_id, 8);
  std::memcpy(blob.data() + 8, &pid, 8);
  return blob;
}

platform::CopyKind copy_kind(Device src, Device dst) {
  if (src.is_cpu())
    return dst.is_cpu() ? platform::CopyKind::kHostToHost : platform::CopyKind::kHostToDevice;
  return dst.is_cpu() ? platform::CopyKind::kDeviceToHost : platform::CopyKind::kDeviceToDevice;
}

class LoopbackTransport final : public KvTransport {
 public:
  explicit LoopbackTransport(const TransportOptions& options)
      : options_(options), faults_(options.faults) {}

  ~LoopbackTransport() override {
    if (region_id_ != 0) {
      std::lock_guard lock(registry().mu);
      registry().regions.erase(region_id_);
    }
  }

  std::string_view name() const override { return "loopback"; }

  Result<RegionDescriptor> register_region(void* base, uint64_t bytes, Device device) override {
    std::lock_guard lock(mu_);
    if (region_id_ != 0) return invalid_argument("loopback transport: a region is registered");
    if (base == nullptr || bytes == 0) {
      return invalid_argument("loopback transport: an empty region");
    }
    if (!device.is_cpu() && options_.platform == nullptr) {
      return invalid_argument("loopback transport: a {} region needs a platform in the options",
                              device.to_string());
    }
    RegionRegistry& r = registry();
    std::lock_guard registry_lock(r.mu);
    region_id_ = r.next_id++;
    local_ = {static_cast<uint8_t*>(base), bytes, device};
    r.regions[region_id_] = local_;
    return RegionDescriptor{"loopback", encode_blob(region_id_), bytes};
  }

  Result<PeerId> connect(const RegionDescriptor& remote) override {
    if (remote.backend != "loopback" || remote.blob.size() != 16) {
      return invalid_argument("loopback transport: a '{}' descriptor of {} bytes", remote.backend,
                              remote.blob.size());
    }
    uint64_t id = 0;
    uint64_t pid = 0;
    std::memcpy(&id, remote.blob.data(), 8);
    std::memcpy(&pid, remote.blob.data() + 8, 8);
    if (pid != static_cast<uint64_t>(::getpid())) {
      return unavailable("loopback transport: the region belongs to process {}", pid);
    }
    {
      std::lock_guard registry_lock(registry().mu);
      if (registry().regions.count(id) == 0) {
        return unavailable("loopback transport: region {} is not registered", id);
      }
    }
    std::lock_guard lock(mu_);
    const PeerId peer{next_peer_++};
    peers_[peer.value] = id;
    return peer;
  }

  void disconnect(PeerId peer) override {
    std::lock_guard lock(mu_);
    peers_.erase(peer.value);
    for (auto& [id, t] : transfers_) {
      if (t.peer == peer.value && t.status == TransferStatus::kInProgress) {
        t.status = TransferStatus::kFailed;
      }
    }
  }

  Result<TransferId> post(PeerId peer, std::span<const WriteOp> ops,
                          platform::EventHandle ready) override {
    uint64_t region_id = 0;
    Region local;
    {
      std::lock_guard lock(mu_);
      if (region_id_ == 0) return invalid_argument("loopback transport: no region registered");
      const auto it = peers_.find(peer.value);
      if (it == peers_.end()) return unavailable("loopback transport: unknown peer {}", peer.value);
      region_id = it->second;
      local = local_;
    }
    Region remote;
    {
      std::lock_guard registry_lock(registry().mu);
      const auto it = registry().regions.find(region_id);
      if (it == registry().regions.end()) {
        return unavailable("loopback transport: the peer's region {} is gone", region_id);
      }
      remote = it->second;
    }
    KV_RETURN_IF_ERROR(check_write_ops(ops, local.bytes, remote.bytes));
    if (ready.ptr != nullptr && options_.platform == nullptr) {
      return invalid_argument("loopback transport: a ready event needs a platform in the options");
    }

    Transfer t;
    t.peer = peer.value;
    t.posted = Clock::now();
    const FaultDraw fault = faults_.draw();
    t.done_at = t.posted + fault.delay;
    if (fault.kind == FaultDraw::Kind::kFail) {
      t.status = TransferStatus::kFailed;
    } else if (fault.kind == FaultDraw::Kind::kDrop) {
      t.dropped = true;
    } else {
      if (ready.ptr != nullptr) options_.platform->synchronize_event(ready);
      copy_ops(local, remote, ops);
    }
    std::lock_guard lock(mu_);
    const TransferId id{next_transfer_++};
    transfers_[id.value] = t;
    return id;
  }

  TransferStatus poll(TransferId transfer) override {
    std::lock_guard lock(mu_);
    const auto it = transfers_.find(transfer.value);
    if (it == transfers_.end()) return TransferStatus::kFailed;
    Transfer& t = it->second;
    if (t.status != TransferStatus::kInProgress) return t.status;
    const auto now = Clock::now();
    if (options_.transfer_timeout_ms > 0 &&
        now - t.posted >= std::chrono::milliseconds(options_.transfer_timeout_ms)) {
      t.status = TransferStatus::kFailed;
    } else if (!t.dropped && now >= t.done_at) {
      t.status = TransferStatus::kDone;
    }
    return t.status;
  }

  void release(TransferId transfer) override {
    std::lock_guard lock(mu_);
    transfers_.erase(transfer.value);
  }

 private:
  struct Transfer {
    uint64_t peer = 0;
    TransferStatus status = TransferStatus::kInProgress;
    bool dropped = false;
    Clock::time_point posted;
    Clock::time_point done_at;
  };

  void copy_ops(const Region& local, const Region& remote, std::span<const WriteOp> ops) {
    if (local.device.is_cpu() && remote.device.is_cpu()) {
      for (const WriteOp& op : ops) {
        std::memmove(remote.base + op.dst_offset, local.base + op.src_offset, op.length);
      }
      return;
    }
    const platform::CopyKind kind = copy_kind(local.device, remote.device);
    for (const WriteOp& op : ops) {
      options_.platform->copy(remote.base + op.dst_offset, local.base + op.src_offset, op.length,
                              kind);
    }
    options_.platform->synchronize();
  }

  TransportOptions options_;
  FaultInjector faults_;
  std::mutex mu_;
  uint64_t region_id_ = 0;
  Region local_;
  uint64_t next_peer_ = 1;
  uint64_t next_transfer_ = 1;
  std::map<uint64_t, uint64_t> peers_;  // peer -> region id
  std::map<uint64_t, Transfer> transfers_;
};

}  // namespace

Result<std::unique_ptr<KvTransport>> create_loopback_transport(const TransportOptions& options) {
  return std::unique_ptr<KvTransport>(new LoopbackTransport(options));
}

}  // namespace kvserve::disagg

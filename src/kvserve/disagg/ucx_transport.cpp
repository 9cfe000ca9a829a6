// The ucx backend: one-sided puts over UCP (see kv_transport.h).
//
// One transfer thread owns the UCP context, worker, endpoints and remote keys: every UCP call is
// made there. Callers' threads only validate, record a transfer's public status and queue a
// command; the thread issues one ucp_put_nbx per write, then ucp_ep_flush_nbx, and reports kDone
// when the flush completes (a put's completion only frees the source; the flush completes at the
// target). Endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails its requests through
// the error handler instead of hanging; keepalive probes find a peer that died without closing
// its sockets; a transfer past the timeout fails and force-closes its endpoint (writes to that
// peer stop; the caller connects again for later transfers: nothing is blacklisted).
//
// Host memory only: this UCX has no CUDA transports. A GPU pool reaches it through a pinned host
// staging region (disagg/kv_staging.h).
#include <ucp/api/ucp.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "kvserve/core/logging.h"
#include "kvserve/disagg/backends.h"
#include "kvserve/disagg/transport_faults.h"
#include "kvserve/platform/platform.h"

namespace kvserve::disagg {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kConnectTimeoutMs = 10000;

Status ucx_error(std::string_view what, ucs_status_t status) {
  return make_status(StatusCode::kUnavailable, "UCX {}: {}", what, ucs_status_string(status));
}

void put_u64(std::vector<uint8_t>& out, uint64_t v) {
  const size_t at = out.size();
  out.resize(at + 8);
  std::memcpy(out.data() + at, &v, 8);
}

bool get_u64(std::span<const uint8_t>& in, uint64_t& v) {
  if (in.size() < 8) return false;
  std::memcpy(&v, in.data(), 8);
  in = in.subspan(8);
  return true;
}

// A descriptor's blob: base address, worker address, packed remote key.
struct RemoteRegion {
  uint64_t base = 0;
  std::vector<uint8_t> worker_address;
  std::vector<uint8_t> rkey;
};

std::vector<uint8_t> encode_blob(uint64_t base, const void* address, size_t address_len,
                                 const void* rkey, size_t rkey_len) {
  std::vector<uint8_t> blob;
  put_u64(blob, base);
  put_u64(blob, address_len);
  const auto* a = static_cast<const uint8_t*>(address);
  blob.insert(blob.end(), a, a + address_len);
  put_u64(blob, rkey_len);
  const auto* r = static_cast<const uint8_t*>(rkey);
  blob.insert(blob.end(), r, r + rkey_len);
  return blob;
}

Result<RemoteRegion> decode_blob(std::span<const uint8_t> in) {
  RemoteRegion r;
  uint64_t n = 0;
  if (!get_u64(in, r.base) || !get_u64(in, n) || n == 0 || n > in.size()) {
    return invalid_argument("ucx descriptor: truncated worker address");
  }
  r.worker_address.assign(in.begin(), in.begin() + static_cast<ptrdiff_t>(n));
  in = in.subspan(n);
  if (!get_u64(in, n) || n == 0 || n != in.size()) {
    return invalid_argument("ucx descriptor: remote key length does not match");
  }
  r.rkey.assign(in.begin(), in.end());
  return r;
}

class UcxTransport final : public KvTransport {
 public:
  explicit UcxTransport(const TransportOptions& options)
      : options_(options), faults_(options.faults) {}

  ~UcxTransport() override {
    if (thread_.joinable()) {
      {
        std::lock_guard lock(mu_);
        stop_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }
  }

  // Starts the transfer thread, which creates the context and worker.
  Status start() {
    std::promise<Status> started;
    auto future = started.get_future();
    thread_ = std::thread([this, &started] { run(started); });
    Status s = future.get();
    if (!s.is_ok()) thread_.join();
    return s;
  }

  std::string_view name() const override { return "ucx"; }

  Result<RegionDescriptor> register_region(void* base, uint64_t bytes, Device device) override {
    if (!device.is_cpu()) {
      return make_status(StatusCode::kUnimplemented,
                         "ucx transport: a {} region: this UCX has no CUDA transports; register "
                         "a pinned host staging region instead",
                         device.to_string());
    }
    if (base == nullptr || bytes == 0) return invalid_argument("ucx transport: an empty region");
    {
      std::lock_guard lock(mu_);
      if (local_base_ != nullptr) return invalid_argument("ucx transport: a region is registered");
    }
    Result<RegionDescriptor> result = invalid_argument("ucx transport: not run");
    run_on_worker([&] { result = map_region(base, bytes); });
    return result;
  }

  Result<PeerId> connect(const RegionDescriptor& remote) override {
    if (remote.backend != "ucx") {
      return invalid_argument("ucx transport: a '{}' descriptor", remote.backend);
    }
    KV_ASSIGN_OR_RETURN(RemoteRegion region, decode_blob(remote.blob));
    Result<PeerId> result = invalid_argument("ucx transport: not run");
    run_on_worker([&] { result = create_peer(region, remote.bytes); });
    return result;
  }

  void disconnect(PeerId peer) override {
    {
      std::lock_guard lock(mu_);
      if (peer_public_.erase(peer.value) == 0) return;
    }
    enqueue([this, peer] {
      const auto it = peers_.find(peer.value);
      if (it == peers_.end()) return;
      fail_transfers_of(peer.value);
      begin_close(*it->second);
    });
  }

  Result<TransferId> post(PeerId peer, std::span<const WriteOp> ops,
                          platform::EventHandle ready) override {
    if (ready.ptr != nullptr && options_.platform == nullptr) {
      return invalid_argument("ucx transport: a ready event needs a platform in the options");
    }
    auto t = std::make_unique<Transfer>();
    {
      std::lock_guard lock(mu_);
      if (local_base_ == nullptr) return invalid_argument("ucx transport: no region registered");
      const auto it = peer_public_.find(peer.value);
      if (it == peer_public_.end()) {
        return unavailable("ucx transport: unknown peer {}", peer.value);
      }
      if (it->second.failed) {
        return unavailable("ucx transport: peer {} failed ({}); connect again", peer.value,
                           it->second.reason);
      }
      KV_RETURN_IF_ERROR(check_write_ops(ops, local_bytes_, it->second.bytes));
      t->id = next_transfer_++;
      statuses_[t->id] = TransferStatus::kInProgress;
    }
    t->peer = peer.value;
    t->ops.assign(ops.begin(), ops.end());
    t->ready = ready;
    t->posted = Clock::now();
    const FaultDraw fault = faults_.draw();
    t->fault = fault.kind;
    t->done_not_before = t->posted + fault.delay;
    const TransferId id{t->id};
    // Commands are copyable std::functions: the transfer travels as a raw pointer, owned again
    // by the transfer thread's map (every queued command runs, shutdown included).
    enqueue([this, raw = t.release()] { transfers_[raw->id].reset(raw); });
    return id;
  }

  TransferStatus poll(TransferId transfer) override {
    std::lock_guard lock(mu_);
    const auto it = statuses_.find(transfer.value);
    return it == statuses_.end() ? TransferStatus::kFailed : it->second;
  }

  void release(TransferId transfer) override {
    std::lock_guard lock(mu_);
    statuses_.erase(transfer.value);
  }

 private:
  // --- the transfer thread's state (touched only there) ---
  enum class Phase { kWaitReady, kDropped, kFlushing, kFinished };
  struct Transfer {
    uint64_t id = 0;
    uint64_t peer = 0;
    std::vector<WriteOp> ops;
    platform::EventHandle ready;
    Clock::time_point posted;
    Clock::time_point done_not_before;
    FaultDraw::Kind fault = FaultDraw::Kind::kNone;
    Phase phase = Phase::kWaitReady;
    int pending = 0;  // UCX requests not completed yet
    bool error = false;
  };
  struct Peer {
    UcxTransport* self = nullptr;
    uint64_t id = 0;
    ucp_ep_h ep = nullptr;
    ucp_rkey_h rkey = nullptr;
    uint64_t remote_base = 0;
    bool failed = false;
    bool closing = false;
    void* close_request = nullptr;
  };
  struct PeerPublic {
    uint64_t bytes = 0;
    bool failed = false;
    std::string reason;
  };

  static void on_request_done(void* request, ucs_status_t status, void* user_data) {
    auto* t = static_cast<Transfer*>(user_data);
    if (status != UCS_OK) t->error = true;
    --t->pending;
    ucp_request_free(request);
  }

  static void on_peer_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* peer = static_cast<Peer*>(arg);
    peer->failed = true;
    peer->self->mark_peer_failed(peer->id, ucs_status_string(status));
  }

  void mark_peer_failed(uint64_t peer, std::string reason) {
    std::lock_guard lock(mu_);
    const auto it = peer_public_.find(peer);
    if (it != peer_public_.end()) {
      it->second.failed = true;
      it->second.reason = std::move(reason);
    }
  }

  void enqueue(std::function<void()> fn) {
    {
      std::lock_guard lock(mu_);
      commands_.push_back(std::move(fn));
    }
    cv_.notify_all();
  }

  void run_on_worker(const std::function<void()>& fn) {
    std::promise<void> done;
    auto future = done.get_future();
    enqueue([&] {
      fn();
      done.set_value();
    });
    future.wait();
  }

  void run(std::promise<Status>& started) {
    Status s = init();
    const bool ok = s.is_ok();
    started.set_value(std::move(s));
    if (!ok) return;
    loop();
    shutdown();
  }

  Status init() {
    ucp_config_t* config = nullptr;
    ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) return ucx_error("config", st);
    if (!options_.ucx_transports.empty()) {
      st = ucp_config_modify(config, "TLS", options_.ucx_transports.c_str());
      if (st != UCS_OK) {
        ucp_config_release(config);
        return invalid_argument("UCX transports '{}': {}", options_.ucx_transports,
                                ucs_status_string(st));
      }
    }
    if (options_.ucx_keepalive_interval_s > 0) {
      const std::string interval = fmt::format("{}s", options_.ucx_keepalive_interval_s);
      st = ucp_config_modify(config, "KEEPALIVE_INTERVAL", interval.c_str());
      if (st != UCS_OK) {
        ucp_config_release(config);
        return ucx_error("keepalive interval", st);
      }
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_RMA;
    st = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (st != UCS_OK) return ucx_error("init", st);
    ucp_worker_params_t wparams{};
    wparams.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wparams.thread_mode = UCS_THREAD_MODE_SINGLE;
    st = ucp_worker_create(context_, &wparams, &worker_);
    if (st != UCS_OK) {
      ucp_cleanup(context_);
      context_ = nullptr;
      return ucx_error("worker", st);
    }
    return Status::ok();
  }

  Result<RegionDescriptor> map_region(void* base, uint64_t bytes) {
    ucp_mem_map_params_t mp{};
    mp.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    mp.address = base;
    mp.length = bytes;
    ucs_status_t st = ucp_mem_map(context_, &mp, &memh_);
    if (st != UCS_OK) return ucx_error("mem_map", st);
    void* rkey = nullptr;
    size_t rkey_len = 0;
    st = ucp_rkey_pack(context_, memh_, &rkey, &rkey_len);
    if (st != UCS_OK) {
      ucp_mem_unmap(context_, memh_);
      memh_ = nullptr;
      return ucx_error("rkey_pack", st);
    }
    ucp_address_t* address = nullptr;
    size_t address_len = 0;
    st = ucp_worker_get_address(worker_, &address, &address_len);
    if (st != UCS_OK) {
      ucp_rkey_buffer_release(rkey);
      ucp_mem_unmap(context_, memh_);
      memh_ = nullptr;
      return ucx_error("worker address", st);
    }
    RegionDescriptor d{
        "ucx", encode_blob(reinterpret_cast<uint64_t>(base), address, address_len, rkey, rkey_len),
        bytes};
    ucp_worker_release_address(worker_, address);
    ucp_rkey_buffer_release(rkey);
    std::lock_guard lock(mu_);
    local_base_ = static_cast<uint8_t*>(base);
    local_bytes_ = bytes;
    return d;
  }

  Result<PeerId> create_peer(const RemoteRegion& region, uint64_t bytes) {
    auto peer = std::make_unique<Peer>();
    peer->self = this;
    peer->remote_base = region.base;
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(region.worker_address.data());
    ep.err_mode = options_.ucx_peer_failure_detection ? UCP_ERR_HANDLING_MODE_PEER
                                                      : UCP_ERR_HANDLING_MODE_NONE;
    ep.err_handler.cb = &UcxTransport::on_peer_error;
    ep.err_handler.arg = peer.get();
    ucs_status_t st = ucp_ep_create(worker_, &ep, &peer->ep);
    if (st != UCS_OK) return ucx_error("ep_create", st);
    st = ucp_ep_rkey_unpack(peer->ep, region.rkey.data(), &peer->rkey);
    if (st != UCS_OK) {
      peer->rkey = nullptr;
      peer->failed = true;
      begin_close(*peer);
      closing_.push_back(std::move(peer));
      return ucx_error("rkey_unpack", st);
    }
    // Wait for the connection to be wired up (a flush with nothing outstanding completes once
    // it is): an unreachable peer fails here, and no endpoint is torn down half wired (UCX 1.13
    // asserts at a receiver whose reverse wireup meets a sender that already left).
    if (Status ready = wait_wired(*peer); !ready.is_ok()) {
      peer->failed = true;
      begin_close(*peer);
      closing_.push_back(std::move(peer));
      return ready;
    }
    std::lock_guard lock(mu_);
    peer->id = next_peer_++;
    const PeerId id{peer->id};
    peer_public_[id.value] = PeerPublic{bytes, false, {}};
    peers_[id.value] = std::move(peer);
    return id;
  }

  Status wait_wired(Peer& peer) {
    ucp_request_param_t p{};
    void* req = ucp_ep_flush_nbx(peer.ep, &p);
    if (UCS_PTR_IS_ERR(req)) return ucx_error("connect", UCS_PTR_STATUS(req));
    if (req == nullptr) return Status::ok();
    const int timeout_ms = options_.transfer_timeout_ms > 0
                               ? std::min(options_.transfer_timeout_ms, kConnectTimeoutMs)
                               : kConnectTimeoutMs;
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    ucs_status_t st = UCS_INPROGRESS;
    while ((st = ucp_request_check_status(req)) == UCS_INPROGRESS && !peer.failed &&
           Clock::now() < deadline) {
      if (ucp_worker_progress(worker_) == 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    if (st == UCS_INPROGRESS) {
      ucp_request_cancel(worker_, req);
      while (ucp_request_check_status(req) == UCS_INPROGRESS)
        ucp_worker_progress(worker_);
      ucp_request_free(req);
      return unavailable("UCX connect: the peer did not answer within {} ms", timeout_ms);
    }
    ucp_request_free(req);
    if (st != UCS_OK) return ucx_error("connect", st);
    return Status::ok();
  }

  // Closes the endpoint: a live peer's by flushing, a failed peer's by force (requests still
  // outstanding complete with an error); the remote key is destroyed once nothing uses it
  // (reap_peers).
  void begin_close(Peer& peer) {
    if (peer.closing) return;
    peer.closing = true;
    if (peer.rkey != nullptr && pending_of(peer.id) == 0) {
      ucp_rkey_destroy(peer.rkey);
      peer.rkey = nullptr;
    }
    // A forced close needs peer error handling on both sides; without it, a flushing close.
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    p.flags = options_.ucx_peer_failure_detection && peer.failed ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    void* req = ucp_ep_close_nbx(peer.ep, &p);
    if (UCS_PTR_IS_PTR(req)) peer.close_request = req;
    peer.ep = nullptr;
  }

  int pending_of(uint64_t peer) const {
    int n = 0;
    for (const auto& [id, t] : transfers_) {
      if (t->peer == peer) n += t->pending;
    }
    return n;
  }

  void publish(Transfer& t, TransferStatus status) {
    t.phase = Phase::kFinished;
    std::lock_guard lock(mu_);
    const auto it = statuses_.find(t.id);
    if (it != statuses_.end()) it->second = status;
  }

  void fail_transfers_of(uint64_t peer) {
    for (auto& [id, t] : transfers_) {
      if (t->peer == peer && t->phase != Phase::kFinished) publish(*t, TransferStatus::kFailed);
    }
  }

  void issue(Transfer& t, Peer& peer) {
    ucp_request_param_t p{};
    p.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    p.cb.send = &UcxTransport::on_request_done;
    p.user_data = &t;
    for (const WriteOp& op : t.ops) {
      void* req = ucp_put_nbx(peer.ep, local_base_ + op.src_offset, op.length,
                              peer.remote_base + op.dst_offset, peer.rkey, &p);
      if (UCS_PTR_IS_ERR(req)) {
        t.error = true;
        break;
      }
      if (req != nullptr) ++t.pending;
    }
    if (!t.error) {
      void* req = ucp_ep_flush_nbx(peer.ep, &p);
      if (UCS_PTR_IS_ERR(req)) {
        t.error = true;
      } else if (req != nullptr) {
        ++t.pending;
      }
    }
    t.phase = Phase::kFlushing;
  }

  // One pass over the transfers; true while any is unfinished or has requests outstanding.
  bool advance() {
    const auto now = Clock::now();
    const auto timeout = std::chrono::milliseconds(options_.transfer_timeout_ms);
    bool active = false;
    for (auto it = transfers_.begin(); it != transfers_.end();) {
      Transfer& t = *it->second;
      const auto peer_it = peers_.find(t.peer);
      Peer* peer = peer_it == peers_.end() ? nullptr : peer_it->second.get();
      if (t.phase != Phase::kFinished) {
        if (peer == nullptr || peer->failed || peer->closing) {
          publish(t, TransferStatus::kFailed);
        } else if (options_.transfer_timeout_ms > 0 && now - t.posted >= timeout) {
          KV_LOG_WARN("ucx transport: transfer {} to peer {} timed out after {} ms", t.id, t.peer,
                      options_.transfer_timeout_ms);
          publish(t, TransferStatus::kFailed);
          mark_peer_failed(peer->id, "transfer timed out");
          peer->failed = true;
          fail_transfers_of(peer->id);
          begin_close(*peer);
        } else if (t.phase == Phase::kWaitReady) {
          if (t.ready.ptr == nullptr || options_.platform->event_done(t.ready)) {
            if (t.fault == FaultDraw::Kind::kFail) {
              publish(t, TransferStatus::kFailed);
            } else if (t.fault == FaultDraw::Kind::kDrop) {
              t.phase = Phase::kDropped;
            } else {
              issue(t, *peer);
            }
          }
        } else if (t.phase == Phase::kFlushing && t.pending == 0) {
          if (t.error) {
            publish(t, TransferStatus::kFailed);
          } else if (now >= t.done_not_before) {
            publish(t, TransferStatus::kDone);
          }
        }
      }
      if (t.phase == Phase::kFinished && t.pending == 0) {
        it = transfers_.erase(it);
      } else {
        active = true;
        ++it;
      }
    }
    return active;
  }

  // Peers being closed: freed once their close request and their transfers' requests are done.
  void reap_peers() {
    for (auto it = peers_.begin(); it != peers_.end();) {
      if (it->second->closing) {
        closing_.push_back(std::move(it->second));
        it = peers_.erase(it);
      } else {
        ++it;
      }
    }
    for (auto it = closing_.begin(); it != closing_.end();) {
      Peer& p = **it;
      if (p.close_request != nullptr) {
        if (ucp_request_check_status(p.close_request) == UCS_INPROGRESS) {
          ++it;
          continue;
        }
        ucp_request_free(p.close_request);
        p.close_request = nullptr;
      }
      if (pending_of(p.id) > 0) {
        ++it;
        continue;
      }
      if (p.rkey != nullptr) ucp_rkey_destroy(p.rkey);
      it = closing_.erase(it);
    }
  }

  void loop() {
    while (true) {
      std::deque<std::function<void()>> commands;
      bool stop = false;
      {
        std::lock_guard lock(mu_);
        commands.swap(commands_);
        stop = stop_;
      }
      for (auto& fn : commands)
        fn();
      if (stop) return;
      const unsigned progressed = ucp_worker_progress(worker_);
      for (auto& [id, p] : peers_) {
        if (p->failed && !p->closing) {
          fail_transfers_of(id);
          begin_close(*p);
        }
      }
      const bool active = advance();
      reap_peers();
      if (progressed != 0) continue;
      if (active || !closing_.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      } else {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(1),
                     [this] { return stop_ || !commands_.empty(); });
      }
    }
  }

  void shutdown() {
    for (auto& [id, p] : peers_) {
      fail_transfers_of(id);
      begin_close(*p);
    }
    const auto deadline = Clock::now() + std::chrono::seconds(2);
    do {
      ucp_worker_progress(worker_);
      advance();
      reap_peers();
    } while ((!closing_.empty() || !transfers_.empty()) && Clock::now() < deadline);
    if (!closing_.empty() || !transfers_.empty()) {
      KV_LOG_WARN("ucx transport: {} endpoints still closing at shutdown", closing_.size());
    } else {
      // Everything drained: the worker, the registration and the context can go.
      if (memh_ != nullptr) ucp_mem_unmap(context_, memh_);
      ucp_worker_destroy(worker_);
      ucp_cleanup(context_);
    }
  }

  TransportOptions options_;
  FaultInjector faults_;
  std::thread thread_;

  // Shared between callers and the transfer thread.
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> commands_;
  bool stop_ = false;
  uint8_t* local_base_ = nullptr;
  uint64_t local_bytes_ = 0;
  uint64_t next_peer_ = 1;
  uint64_t next_transfer_ = 1;
  std::map<uint64_t, PeerPublic> peer_public_;
  std::map<uint64_t, TransferStatus> statuses_;

  // The transfer thread's.
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_mem_h memh_ = nullptr;
  std::map<uint64_t, std::unique_ptr<Peer>> peers_;
  std::vector<std::unique_ptr<Peer>> closing_;
  std::map<uint64_t, std::unique_ptr<Transfer>> transfers_;
};

}  // namespace

Result<std::unique_ptr<KvTransport>> create_ucx_transport(const TransportOptions& options) {
  auto t = std::make_unique<UcxTransport>(options);
  KV_RETURN_IF_ERROR(t->start());
  return std::unique_ptr<KvTransport>(std::move(t));
}

}  // namespace kvserve::disagg

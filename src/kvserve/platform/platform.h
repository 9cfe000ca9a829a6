// The hardware layer: every device call kvserve makes goes through a Platform.
//
// A Platform owns one device: its memory (device and pinned host), copies, streams, events and
// graphs (captured device work replayed with one launch).
// Work submitted to a stream runs in submission order; an event recorded on one stream and
// waited on by another orders producer before consumer (seed 002: nothing outside platform/
// names CUDA). Kernels live beside the platform as ops (platform/ops/*) that dispatch on the
// device kind at one boundary.
//
// The CPU platform executes everything synchronously on the calling thread, so its streams are
// trivially ordered and its events complete at record time.
//
// Device memory pool: a serving process reserves one pool up front (reserve_device_pool: one
// cudaMalloc of nearly all free memory, never managed memory) and every later device allocation
// is a sub-allocation of it (device_arena.h), so the KV cache is sized from what the pool has
// left after the weights and nothing calls cudaMalloc/cudaFree while serving. Without a
// reservation a platform allocates directly, as tests and tools that hold several platforms on
// one GPU at once need.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/core/tensor.h"
#include "kvserve/platform/allocation_faults.h"
#include "kvserve/platform/device_arena.h"
#include "kvserve/platform/handles.h"
#include "kvserve/platform/kernel_switches.h"

namespace kvserve::platform {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

// After reserve_device_pool, the pool: free_bytes is what it has left (fragments included; the
// largest single block is in device_pool()), total_bytes its size. Before, the whole device.
struct MemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

// A reserved pool: where it lies and how it is used.
struct DevicePoolInfo {
  uintptr_t base = 0;  // the pool is [base, base + stats.size)
  ArenaStats stats;
};

class Platform : public MemoryResource {
 public:
  ~Platform() override = default;

  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  // One line for logs: the device's name and memory.
  virtual std::string description() const = 0;

  // --- memory -------------------------------------------------------------------------------
  // Device memory (CUDA: 256-byte aligned, pool or not; CPU: 64). Running out is an expected
  // failure (kOutOfMemory), never a crash; inside a pool the message names the free bytes and the
  // largest free block. Inside a pool, deallocate returns the block at once, with no device
  // synchronisation (cudaFree waits for the device): work still queued that uses it must be ordered
  // before the next owner's work, which holds when both are on one stream (a runner's current
  // stream); a caller that frees memory another stream still uses synchronises that stream first.
  virtual Result<void*> allocate(size_t bytes) = 0;
  void deallocate(void* ptr, size_t bytes) override = 0;
  // Reserves `bytes` of device memory as this platform's pool (one allocation); allocate and
  // deallocate then sub-allocate from it, memory_info reports it, and running out of it is
  // kOutOfMemory even if the device has memory left (nothing outside the pool grows). Memory
  // allocated before the reservation stays valid and is freed directly. Once per platform
  // (kInvalidArgument after the first); kOutOfMemory if the device cannot give `bytes`. Sizing
  // (free memory minus a headroom for what CUDA and libraries allocate themselves) is the
  // caller's: reserve_device_pool in device_pool.h. The CPU platform has no pool: a no-op.
  virtual Status reserve_device_pool(size_t bytes);
  // The pool, or nullopt without one (and always on the CPU).
  virtual std::optional<DevicePoolInfo> device_pool() const;
  // Page-locked host memory for asynchronous copies (plain memory on the CPU platform).
  virtual Result<void*> allocate_host(size_t bytes) = 0;
  virtual void deallocate_host(void* ptr, size_t bytes) = 0;
  virtual MemoryInfo memory_info() const = 0;

  // Owned device memory, returned to this platform when the Buffer dies. kOutOfMemory also when
  // an installed AllocationFaults says so (tests: allocation_faults.h).
  Result<Buffer> allocate_buffer(size_t bytes);
  // An owned tensor of this platform (uninitialised; zeroed with `zero`).
  Result<Tensor> empty(DType dtype, std::span<const int64_t> shape, bool zero = false);
  Result<Tensor> empty(DType dtype, std::initializer_list<int64_t> shape, bool zero = false) {
    return empty(dtype, std::span<const int64_t>(shape.begin(), shape.size()), zero);
  }

  // The CUDA kernels' A/B switches (kernel_switches.h) this platform's ops, backends and models
  // follow; the defaults until a runner sets the ones its options carry (once, at creation).
  const KernelSwitches& kernel_switches() const { return switches_; }
  void set_kernel_switches(const KernelSwitches& switches) { switches_ = switches; }

  // Tests: the fault injector allocate_buffer consults (null: none, the default).
  void set_allocation_faults(std::shared_ptr<AllocationFaults> faults) {
    faults_ = std::move(faults);
  }

  // --- copies (asynchronous with respect to the host on device platforms) ---------------------
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind,
                    StreamHandle stream = {}) = 0;
  virtual void memset(void* dst, int value, size_t bytes, StreamHandle stream = {}) = 0;

  // --- streams and events --------------------------------------------------------------------
  // Work submitted with a null StreamHandle (copies, memsets, ops, event records) goes to the
  // current stream: the device's default stream unless a caller sets one of create_stream's. A
  // ModelRunner sets its own so that its eager forwards and its graph replays are ordered on one
  // stream that can be captured. Not thread-safe: the thread that owns the platform sets it.
  void set_current_stream(StreamHandle stream) { current_stream_ = stream; }
  StreamHandle current_stream() const { return current_stream_; }
  // `stream`, or the current stream for a null handle.
  StreamHandle resolve(StreamHandle stream) const {
    return stream.ptr != nullptr ? stream : current_stream_;
  }

  virtual StreamHandle create_stream() = 0;
  virtual void destroy_stream(StreamHandle stream) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;
  virtual void synchronize() = 0;  // every stream of this device
  // A check that the blocking waits (synchronize, synchronize_stream, synchronize_event) run on
  // the waiting thread about every millisecond while the device is not done, instead of blocking
  // in the driver; empty (the default) blocks. Rank 0 of a tensor-parallel group over NCCL sets
  // one that notices a dead worker and aborts the group, which ends the collectives such a wait
  // would otherwise wait on forever (model/tp_group.h: TpGroup::watch). A platform that never
  // waits on a device (the CPU's) ignores it.
  virtual void set_wait_watch(std::function<void()> watch) { (void)watch; }

  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) = 0;
  virtual void record_event(EventHandle event, StreamHandle stream) = 0;
  // Work submitted to `stream` after this call waits for `event` (no host block).
  virtual void stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  virtual void synchronize_event(EventHandle event) = 0;
  virtual bool event_done(EventHandle event) = 0;
  // Milliseconds between two recorded, completed events.
  virtual float elapsed_ms(EventHandle start, EventHandle end) = 0;

  // --- graphs --------------------------------------------------------------------------------
  // Between begin_capture and end_capture the work submitted to `stream` (one of create_stream's,
  // never the default stream) is recorded instead of run; end_capture instantiates the recording
  // and replay launches all of it at once, with the pointers and launch parameters it was
  // captured with (only the contents of the memory it reads may change between replays). While
  // capturing, the calling thread must not allocate, free, synchronize or copy from pageable host
  // memory: CUDA captures in thread-local mode, so such a call fails the capture. A failed capture
  // ends capture mode and returns the error. The CPU platform has no graphs (kUnimplemented).
  virtual Status begin_capture(StreamHandle stream);
  virtual Result<GraphHandle> end_capture(StreamHandle stream);
  virtual void replay(GraphHandle graph, StreamHandle stream);
  virtual void destroy_graph(GraphHandle graph);

 private:
  StreamHandle current_stream_;
  KernelSwitches switches_;
  std::shared_ptr<AllocationFaults> faults_;
};

// RAII owners for streams and events.
class Stream {
 public:
  explicit Stream(Platform& p) : platform_(&p), handle_(p.create_stream()) {}
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { platform_->destroy_stream(handle_); }
  StreamHandle handle() const { return handle_; }
  void synchronize() { platform_->synchronize_stream(handle_); }

 private:
  Platform* platform_;
  StreamHandle handle_;
};

// An instantiated graph (Platform::end_capture), destroyed with its owner.
class Graph {
 public:
  Graph() = default;
  Graph(Platform& p, GraphHandle handle) : platform_(&p), handle_(handle) {}
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&& other) noexcept { *this = std::move(other); }
  Graph& operator=(Graph&& other) noexcept {
    if (this != &other) {
      reset();
      platform_ = std::exchange(other.platform_, nullptr);
      handle_ = std::exchange(other.handle_, GraphHandle{});
    }
    return *this;
  }
  ~Graph() { reset(); }
  void reset() {
    if (platform_ != nullptr && handle_.ptr != nullptr) platform_->destroy_graph(handle_);
    platform_ = nullptr;
    handle_ = GraphHandle{};
  }
  bool empty() const { return handle_.ptr == nullptr; }
  void replay(StreamHandle stream = {}) { platform_->replay(handle_, stream); }

 private:
  Platform* platform_ = nullptr;
  GraphHandle handle_;
};

class Event {
 public:
  explicit Event(Platform& p) : platform_(&p), handle_(p.create_event()) {}
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { platform_->destroy_event(handle_); }
  EventHandle handle() const { return handle_; }
  void record(StreamHandle stream = {}) { platform_->record_event(handle_, stream); }
  void synchronize() { platform_->synchronize_event(handle_); }
  bool done() { return platform_->event_done(handle_); }

 private:
  Platform* platform_;
  EventHandle handle_;
};

// --- registry ------------------------------------------------------------------------------

struct PlatformInfo {
  Device device;
  std::string description;
};

// Whether this build contains the CUDA platform (KVSERVE_CUDA at configure time).
bool cuda_compiled();
// The devices this build can drive on this machine; CPU is always first.
std::vector<PlatformInfo> list_platforms();
// Parses "cpu", "cuda" or "cuda:N".
Result<Device> parse_device(std::string_view name);
// Creates the platform for a device: kUnavailable if this build or this machine lacks it.
Result<std::unique_ptr<Platform>> create_platform(Device device);

}  // namespace kvserve::platform

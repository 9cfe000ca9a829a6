// The hardware layer: every device call kvserve makes goes through a Platform.
//
// A Platform owns one device: its memory (device and pinned host), copies, streams and events.
// Work submitted to a stream runs in submission order; an event recorded on one stream and
// waited on by another orders producer before consumer (seed 002: nothing outside platform/
// names CUDA). Kernels live beside the platform as ops (platform/ops/*) that dispatch on the
// device kind at one boundary.
//
// The CPU platform executes everything synchronously on the calling thread, so its streams are
// trivially ordered and its events complete at record time.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/core/tensor.h"
#include "kvserve/platform/handles.h"

namespace kvserve::platform {

enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice, kHostToHost };

struct MemoryInfo {
  size_t free_bytes = 0;
  size_t total_bytes = 0;
};

class Platform : public MemoryResource {
 public:
  ~Platform() override = default;

  virtual std::string_view name() const = 0;
  virtual Device device() const = 0;
  // One line for logs: the device's name and memory.
  virtual std::string description() const = 0;

  // --- memory -------------------------------------------------------------------------------
  // Device memory. Running out is an expected failure (kOutOfMemory), never a crash.
  virtual Result<void*> allocate(size_t bytes) = 0;
  void deallocate(void* ptr, size_t bytes) override = 0;
  // Page-locked host memory for asynchronous copies (plain memory on the CPU platform).
  virtual Result<void*> allocate_host(size_t bytes) = 0;
  virtual void deallocate_host(void* ptr, size_t bytes) = 0;
  virtual MemoryInfo memory_info() const = 0;

  // Owned device memory, returned to this platform when the Buffer dies.
  Result<Buffer> allocate_buffer(size_t bytes);
  // An owned tensor of this platform (uninitialised; zeroed with `zero`).
  Result<Tensor> empty(DType dtype, std::span<const int64_t> shape, bool zero = false);
  Result<Tensor> empty(DType dtype, std::initializer_list<int64_t> shape, bool zero = false) {
    return empty(dtype, std::span<const int64_t>(shape.begin(), shape.size()), zero);
  }

  // --- copies (asynchronous with respect to the host on device platforms) ---------------------
  virtual void copy(void* dst, const void* src, size_t bytes, CopyKind kind,
                    StreamHandle stream = {}) = 0;
  virtual void memset(void* dst, int value, size_t bytes, StreamHandle stream = {}) = 0;

  // --- streams and events --------------------------------------------------------------------
  virtual StreamHandle create_stream() = 0;
  virtual void destroy_stream(StreamHandle stream) = 0;
  virtual void synchronize_stream(StreamHandle stream) = 0;
  virtual void synchronize() = 0;  // every stream of this device

  virtual EventHandle create_event() = 0;
  virtual void destroy_event(EventHandle event) = 0;
  virtual void record_event(EventHandle event, StreamHandle stream) = 0;
  // Work submitted to `stream` after this call waits for `event` (no host block).
  virtual void stream_wait_event(StreamHandle stream, EventHandle event) = 0;
  virtual void synchronize_event(EventHandle event) = 0;
  virtual bool event_done(EventHandle event) = 0;
  // Milliseconds between two recorded, completed events.
  virtual float elapsed_ms(EventHandle start, EventHandle end) = 0;
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

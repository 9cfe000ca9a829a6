#include "kvserve/platform/cpu/cpu_platform.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <thread>

#include "kvserve/core/check.h"

namespace kvserve::platform::cpu {
namespace {

constexpr size_t kAlignment = 64;

struct CpuEvent {
  std::chrono::steady_clock::time_point time;
  bool recorded = false;
};

// Reads "<key>: <n> kB" from /proc/meminfo; 0 when absent.
size_t meminfo_bytes(const char* key) {
  std::ifstream in("/proc/meminfo");
  std::string name;
  size_t kb = 0;
  std::string unit;
  while (in >> name >> kb >> unit) {
    if (name.size() == std::strlen(key) + 1 && name.starts_with(key)) return kb * 1024;
  }
  return 0;
}

class CpuPlatform final : public Platform {
 public:
  std::string_view name() const override { return "cpu"; }
  Device device() const override { return Device{DeviceKind::kCpu, 0}; }
  std::string description() const override { return describe_host(); }

  Result<void*> allocate(size_t bytes) override {
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (p == nullptr) return out_of_memory("cpu: cannot allocate {} bytes", bytes);
    return p;
  }
  void deallocate(void* ptr, size_t /*bytes*/) override { std::free(ptr); }
  Result<void*> allocate_host(size_t bytes) override { return allocate(bytes); }
  void deallocate_host(void* ptr, size_t bytes) override { deallocate(ptr, bytes); }

  MemoryInfo memory_info() const override {
    return {meminfo_bytes("MemAvailable"), meminfo_bytes("MemTotal")};
  }

  void copy(void* dst, const void* src, size_t bytes, CopyKind /*kind*/,
            StreamHandle /*stream*/) override {
    if (bytes > 0) std::memmove(dst, src, bytes);
  }
  void memset(void* dst, int value, size_t bytes, StreamHandle /*stream*/) override {
    if (bytes > 0) std::memset(dst, value, bytes);
  }

  // Work runs on the calling thread at submission, so a stream is only a name for an order.
  StreamHandle create_stream() override { return StreamHandle{new int(0)}; }
  void destroy_stream(StreamHandle stream) override { delete static_cast<int*>(stream.ptr); }
  void synchronize_stream(StreamHandle /*stream*/) override {}
  void synchronize() override {}

  EventHandle create_event() override { return EventHandle{new CpuEvent}; }
  void destroy_event(EventHandle event) override { delete static_cast<CpuEvent*>(event.ptr); }
  void record_event(EventHandle event, StreamHandle /*stream*/) override {
    auto* e = static_cast<CpuEvent*>(event.ptr);
    e->time = std::chrono::steady_clock::now();
    e->recorded = true;
  }
  void stream_wait_event(StreamHandle /*stream*/, EventHandle /*event*/) override {}
  void synchronize_event(EventHandle /*event*/) override {}
  bool event_done(EventHandle /*event*/) override { return true; }
  float elapsed_ms(EventHandle start, EventHandle end) override {
    const auto* s = static_cast<const CpuEvent*>(start.ptr);
    const auto* e = static_cast<const CpuEvent*>(end.ptr);
    KV_CHECK(s->recorded && e->recorded, "elapsed_ms needs two recorded events");
    return std::chrono::duration<float, std::milli>(e->time - s->time).count();
  }
};

}  // namespace

std::unique_ptr<Platform> create_platform() {
  return std::make_unique<CpuPlatform>();
}

std::string describe_host() {
  utsname u{};
  uname(&u);
  const double gib = static_cast<double>(meminfo_bytes("MemTotal")) / (1024.0 * 1024 * 1024);
  return fmt::format("{}, {} cores, {:.1f} GiB", u.machine, std::thread::hardware_concurrency(),
                     gib);
}

}  // namespace kvserve::platform::cpu

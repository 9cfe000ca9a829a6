#include "kvserve/platform/cuda/cuda_platform.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "kvserve/core/check.h"
#include "kvserve/core/logging.h"
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/device_arena.h"

namespace kvserve::platform::cuda {
namespace {

// Makes `device` current for the scope of a call and restores the previous device after it.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    KV_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) KV_CUDA_CHECK(cudaSetDevice(device));
    restore_ = previous_ != device;
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard() {
    if (restore_) cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

cudaMemcpyKind to_cuda(CopyKind kind) {
  switch (kind) {
    case CopyKind::kHostToDevice:
      return cudaMemcpyHostToDevice;
    case CopyKind::kDeviceToHost:
      return cudaMemcpyDeviceToHost;
    case CopyKind::kDeviceToDevice:
      return cudaMemcpyDeviceToDevice;
    case CopyKind::kHostToHost:
      return cudaMemcpyHostToHost;
  }
  return cudaMemcpyDefault;
}

// Captures this thread has begun and not ended. CUDA captures in thread-local mode, so a cudaMalloc
// or cudaFree by this thread while it captures fails; a pool block would silently succeed and
// leave the graph holding a pointer the pool may hand out again, so the pool refuses it too.
thread_local int tl_captures = 0;

cudaStream_t to_cuda(StreamHandle s) {
  return static_cast<cudaStream_t>(s.ptr);
}
cudaEvent_t to_cuda(EventHandle e) {
  return static_cast<cudaEvent_t>(e.ptr);
}

std::string describe_device(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown CUDA device";
  return fmt::format("{}, sm_{}{}, {} SMs, {:.1f} GiB", prop.name, prop.major, prop.minor,
                     prop.multiProcessorCount,
                     static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024 * 1024));
}

class CudaPlatform final : public Platform {
 public:
  explicit CudaPlatform(int index) : index_(index), description_(describe_device(index)) {}

  std::string_view name() const override { return "cuda"; }
  Device device() const override { return Device{DeviceKind::kCuda, index_}; }
  std::string description() const override { return description_; }

  ~CudaPlatform() override {
    if (pool_ == nullptr) return;
    const ArenaStats stats = pool_->stats();
    if (stats.blocks_in_use > 0) {
      // Buffers that outlive their platform are a bug of the owner; say so rather than crash in
      // a destructor (the memory goes back to the device with the pool either way).
      KV_LOG_ERROR("cuda:{}: device pool destroyed with {} blocks ({} bytes) still in use", index_,
                   stats.blocks_in_use, stats.bytes_in_use);
    }
    DeviceGuard guard(index_);
    cudaFree(reinterpret_cast<void*>(pool_->base()));
  }

  Result<void*> allocate(size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      if (pool_ != nullptr) {
        KV_CHECK(tl_captures == 0,
                 "cuda:{}: allocating {} bytes while this thread captures a graph", index_, bytes);
        Result<uintptr_t> block = pool_->allocate(bytes);
        if (!block.is_ok()) {
          return make_status(block.status().code(), "cuda:{}: {}", index_,
                             block.status().message());
        }
        return reinterpret_cast<void*>(*block);
      }
    }
    DeviceGuard guard(index_);
    void* p = nullptr;
    const cudaError_t err = cudaMalloc(&p, std::max<size_t>(bytes, 1));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free allocation error
      return out_of_memory("cuda:{}: cannot allocate {} bytes", index_, bytes);
    }
    KV_CUDA_CHECK(err);
    return p;
  }
  void deallocate(void* ptr, size_t /*bytes*/) override {
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      if (pool_ != nullptr && pool_->contains(reinterpret_cast<uintptr_t>(ptr))) {
        KV_CHECK(tl_captures == 0,
                 "cuda:{}: freeing device memory while this thread captures a graph", index_);
        pool_->deallocate(reinterpret_cast<uintptr_t>(ptr));
        return;
      }
    }
    DeviceGuard guard(index_);  // allocated before the reservation, or without one
    KV_CUDA_CHECK(cudaFree(ptr));
  }
  Status reserve_device_pool(size_t bytes) override {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (pool_ != nullptr) {
      return invalid_argument("cuda:{}: a device pool of {} bytes is already reserved", index_,
                              pool_->size());
    }
    if (bytes < DeviceArena::kAlignment) {
      return invalid_argument("cuda:{}: a device pool needs at least {} bytes, got {}", index_,
                              DeviceArena::kAlignment, bytes);
    }
    DeviceGuard guard(index_);
    void* base = nullptr;
    const cudaError_t err = cudaMalloc(&base, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      size_t free_bytes = 0;
      size_t total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      return out_of_memory("cuda:{}: cannot reserve a device pool of {} bytes ({} free of {})",
                           index_, bytes, free_bytes, total_bytes);
    }
    KV_CUDA_CHECK(err);
    pool_ = std::make_unique<DeviceArena>(reinterpret_cast<uintptr_t>(base), bytes);
    return Status::ok();
  }
  std::optional<DevicePoolInfo> device_pool() const override {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    if (pool_ == nullptr) return std::nullopt;
    return DevicePoolInfo{pool_->base(), pool_->stats()};
  }
  Result<void*> allocate_host(size_t bytes) override {
    void* p = nullptr;
    const cudaError_t err = cudaMallocHost(&p, std::max<size_t>(bytes, 1));
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return out_of_memory("cuda: cannot allocate {} bytes of pinned host memory", bytes);
    }
    KV_CUDA_CHECK(err);
    return p;
  }
  void deallocate_host(void* ptr, size_t /*bytes*/) override { KV_CUDA_CHECK(cudaFreeHost(ptr)); }
  MemoryInfo memory_info() const override {
    {
      std::lock_guard<std::mutex> lock(pool_mutex_);
      if (pool_ != nullptr) {
        const ArenaStats stats = pool_->stats();
        return MemoryInfo{stats.free_bytes, stats.size};
      }
    }
    DeviceGuard guard(index_);
    MemoryInfo info;
    KV_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
    return info;
  }

  void copy(void* dst, const void* src, size_t bytes, CopyKind kind, StreamHandle stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(index_);
    KV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, to_cuda(kind), to_cuda(resolve(stream))));
  }
  void memset(void* dst, int value, size_t bytes, StreamHandle stream) override {
    if (bytes == 0) return;
    DeviceGuard guard(index_);
    KV_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, to_cuda(resolve(stream))));
  }

  StreamHandle create_stream() override {
    DeviceGuard guard(index_);
    cudaStream_t s = nullptr;
    KV_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return StreamHandle{s};
  }
  void destroy_stream(StreamHandle stream) override {
    if (stream.ptr != nullptr) KV_CUDA_CHECK(cudaStreamDestroy(to_cuda(stream)));
  }
  void synchronize_stream(StreamHandle stream) override {
    DeviceGuard guard(index_);
    cudaStream_t s = to_cuda(resolve(stream));
    if (wait_watch_) {
      wait_watched([s] { return cudaStreamQuery(s); });
    } else {
      KV_CUDA_CHECK(cudaStreamSynchronize(s));
    }
  }
  void synchronize() override {
    DeviceGuard guard(index_);
    // Watched: the current stream (where the forward and its collectives run) is polled first;
    // the device-wide wait then covers the other streams.
    if (wait_watch_) {
      cudaStream_t s = to_cuda(resolve({}));
      wait_watched([s] { return cudaStreamQuery(s); });
    }
    KV_CUDA_CHECK(cudaDeviceSynchronize());
  }
  void set_wait_watch(std::function<void()> watch) override { wait_watch_ = std::move(watch); }

  EventHandle create_event() override {
    DeviceGuard guard(index_);
    cudaEvent_t e = nullptr;
    KV_CUDA_CHECK(cudaEventCreate(&e));
    return EventHandle{e};
  }
  void destroy_event(EventHandle event) override {
    KV_CUDA_CHECK(cudaEventDestroy(to_cuda(event)));
  }
  void record_event(EventHandle event, StreamHandle stream) override {
    DeviceGuard guard(index_);
    KV_CUDA_CHECK(cudaEventRecord(to_cuda(event), to_cuda(resolve(stream))));
  }
  void stream_wait_event(StreamHandle stream, EventHandle event) override {
    DeviceGuard guard(index_);
    KV_CUDA_CHECK(cudaStreamWaitEvent(to_cuda(resolve(stream)), to_cuda(event), 0));
  }
  void synchronize_event(EventHandle event) override {
    cudaEvent_t e = to_cuda(event);
    if (wait_watch_) {
      wait_watched([e] { return cudaEventQuery(e); });
    } else {
      KV_CUDA_CHECK(cudaEventSynchronize(e));
    }
  }
  bool event_done(EventHandle event) override {
    const cudaError_t err = cudaEventQuery(to_cuda(event));
    if (err == cudaErrorNotReady) return false;
    KV_CUDA_CHECK(err);
    return true;
  }
  float elapsed_ms(EventHandle start, EventHandle end) override {
    float ms = 0;
    KV_CUDA_CHECK(cudaEventElapsedTime(&ms, to_cuda(start), to_cuda(end)));
    return ms;
  }

  // Thread-local capture: an unsafe call (cudaMalloc, a synchronization, a pageable copy) made by
  // this thread while it captures fails instead of silently escaping the graph; other threads
  // are not affected.
  Status begin_capture(StreamHandle stream) override {
    if (stream.ptr == nullptr) {
      return invalid_argument("cuda:{}: capture needs a stream of create_stream, not the default",
                              index_);
    }
    DeviceGuard guard(index_);
    const cudaError_t err =
        cudaStreamBeginCapture(to_cuda(stream), cudaStreamCaptureModeThreadLocal);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return make_status(StatusCode::kInternal, "cuda:{}: cudaStreamBeginCapture: {}", index_,
                         cudaGetErrorString(err));
    }
    ++tl_captures;
    return Status::ok();
  }
  Result<GraphHandle> end_capture(StreamHandle stream) override {
    DeviceGuard guard(index_);
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(to_cuda(stream), &graph);
    if (tl_captures > 0) --tl_captures;  // capture mode ends whether or not the capture worked
    if (err != cudaSuccess) {
      cudaGetLastError();
      if (graph != nullptr) cudaGraphDestroy(graph);
      return make_status(StatusCode::kInternal, "cuda:{}: cudaStreamEndCapture: {}", index_,
                         cudaGetErrorString(err));
    }
    cudaGraphExec_t exec = nullptr;
    err = cudaGraphInstantiate(&exec, graph, 0);
    cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    if (err == cudaSuccess) err = cudaGraphUpload(exec, to_cuda(stream));
    if (err != cudaSuccess) {
      cudaGetLastError();
      if (exec != nullptr) cudaGraphExecDestroy(exec);
      return make_status(StatusCode::kInternal, "cuda:{}: instantiating the graph: {}", index_,
                         cudaGetErrorString(err));
    }
    return GraphHandle{exec};
  }
  void replay(GraphHandle graph, StreamHandle stream) override {
    DeviceGuard guard(index_);
    KV_CUDA_CHECK(
        cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph.ptr), to_cuda(resolve(stream))));
  }
  void destroy_graph(GraphHandle graph) override {
    if (graph.ptr != nullptr) {
      KV_CUDA_CHECK(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph.ptr)));
    }
  }

 private:
  // Polls `query` (cudaStreamQuery / cudaEventQuery) until the work is done, running the wait
  // watch about every millisecond meanwhile. A watch that aborts what the work waits on (an NCCL
  // group) makes the work end, so the wait still returns.
  template <typename Query>
  void wait_watched(Query query) {
    using Clock = std::chrono::steady_clock;
    auto next = Clock::now() + std::chrono::milliseconds(1);
    for (;;) {
      const cudaError_t e = query();
      if (e != cudaErrorNotReady) {
        KV_CUDA_CHECK(e);
        return;
      }
      if (Clock::now() >= next) {
        wait_watch_();
        next = Clock::now() + std::chrono::milliseconds(1);
      }
      std::this_thread::yield();
    }
  }

  int index_;
  std::string description_;
  std::function<void()> wait_watch_;  // set_wait_watch
  // The reserved pool (null until reserve_device_pool). The mutex makes allocate/deallocate as
  // thread-safe as cudaMalloc/cudaFree, which callers may rely on.
  mutable std::mutex pool_mutex_;
  std::unique_ptr<DeviceArena> pool_;
};

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: not an error for a listing
    return 0;
  }
  return n;
}

}  // namespace

bool compiled() {
  return true;
}

std::vector<PlatformInfo> list_devices() {
  std::vector<PlatformInfo> out;
  const int n = device_count();
  for (int i = 0; i < n; ++i)
    out.push_back({Device{DeviceKind::kCuda, i}, describe_device(i)});
  return out;
}

Result<std::unique_ptr<Platform>> create_platform(int device_index) {
  const int n = device_count();
  if (device_index < 0 || device_index >= n) {
    return unavailable("cuda:{} is not available: this machine has {} CUDA device(s)", device_index,
                       n);
  }
  return std::unique_ptr<Platform>(std::make_unique<CudaPlatform>(device_index));
}

}  // namespace kvserve::platform::cuda

// How a serving process sizes its device memory pool (Platform::reserve_device_pool).
//
// The pool takes the device's free memory at startup minus a headroom left to what does not go
// through the platform: the CUDA context's own growth (module loads, kernels' local memory), the
// cuBLASLt handle and its 32 MiB workspace (platform/cuda/gemm.cpp: process-wide, allocated at
// the first GEMM) with the buffer its plan tuning overwrites (twice the L2: 100 MiB on an H100,
// allocated at the first tuned GEMM), CUDA graph executables (instantiated and uploaded by the
// driver), and cuDNN later. Default headroom: max(1 GiB, 4 % of the device's total memory).
// Everything kvserve allocates itself (weights, KV cache, activations, workspaces, graph buffers)
// then comes from the pool, and --mem-fraction-static sizes the KV cache from what the pool has
// left after the weights (model_runner.cpp).
#pragma once

#include <cstddef>
#include <string>

#include "kvserve/core/status.h"
#include "kvserve/platform/platform.h"

namespace kvserve::platform {

struct DevicePoolOptions {
  // False: no pool, every allocation direct (tests and tools that hold several runners on one
  // GPU at once, or share it with other test processes).
  bool reserve = true;
  size_t bytes = 0;           // 0: the free memory minus the headroom (or see utilization)
  size_t headroom_bytes = 0;  // 0: default_pool_headroom(total); ignored when bytes is set
  // --gpu-memory-utilization (vLLM's name): the share of the device's total memory this process
  // holds, pool and headroom together, so that several servers can share one GPU (a prefill and a
  // decode server of a disaggregated pair); 0: all the free memory. Ignored when bytes is set.
  double utilization = 0;
};

constexpr size_t kMinPoolHeadroom = size_t{1} << 30;
constexpr double kPoolHeadroomFraction = 0.04;

// max(1 GiB, 4 % of the device's total memory).
size_t default_pool_headroom(size_t total_bytes);

// The pool's size and the headroom left outside it on a device with `device`'s memory, as
// `options` say. kOutOfMemory if the free memory does not exceed the headroom, or is less than
// the utilization asks for (naming --gpu-memory-utilization); kInvalidArgument for a utilization
// outside (0, 1] or one whose share is no larger than the headroom.
struct DevicePoolSize {
  size_t bytes = 0;
  size_t headroom = 0;
};
Result<DevicePoolSize> device_pool_size(const MemoryInfo& device, const DevicePoolOptions& options,
                                        const std::string& device_name);

// Reserves the pool of a freshly created platform as `options` say and logs one line (pool size,
// headroom, the device's free memory). A no-op on the CPU platform or without options.reserve.
// kOutOfMemory if the free memory does not exceed the headroom or the device refuses the size.
Status reserve_device_pool(Platform& platform, const DevicePoolOptions& options);

}  // namespace kvserve::platform

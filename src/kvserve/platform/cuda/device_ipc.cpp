// CUDA IPC for platform/device_ipc.h. The handle covers a whole cudaMalloc allocation, so the
// exported pointer's allocation base comes from the driver (cuMemGetAddressRange, reached through
// the runtime's entry-point query: the runtime is linked statically and libcuda is not linked).
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstring>

#include "kvserve/platform/device_ipc.h"

namespace kvserve::platform {
namespace {

using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);

// The driver's cuMemGetAddressRange, or null (the runtime's error in *err).
GetAddressRange address_range_fn(cudaError_t* err) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult found{};
  *err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                          &found);
  if (*err != cudaSuccess || found != cudaDriverEntryPointSuccess) return nullptr;
  return reinterpret_cast<GetAddressRange>(fn);
}

}  // namespace

Result<DeviceIpcHandle> export_device_memory(void* ptr) {
  cudaError_t lookup = cudaSuccess;
  const GetAddressRange range = address_range_fn(&lookup);
  if (range == nullptr) {
    return make_status(StatusCode::kInternal, "CUDA: cuMemGetAddressRange not found: {}",
                       cudaGetErrorString(lookup));
  }
  CUdeviceptr base = 0;
  size_t size = 0;
  if (range(&base, &size, reinterpret_cast<CUdeviceptr>(ptr)) != CUDA_SUCCESS) {
    return make_status(StatusCode::kInternal, "CUDA: {} is not device memory", ptr);
  }
  cudaIpcMemHandle_t h;
  const cudaError_t err = cudaIpcGetMemHandle(&h, reinterpret_cast<void*>(base));
  if (err != cudaSuccess) {
    cudaGetLastError();
    return make_status(StatusCode::kInternal, "CUDA: cudaIpcGetMemHandle: {}",
                       cudaGetErrorString(err));
  }
  DeviceIpcHandle out;
  static_assert(sizeof(h) == sizeof(out.handle));
  std::memcpy(out.handle.data(), &h, sizeof(h));
  out.offset = reinterpret_cast<uint64_t>(ptr) - static_cast<uint64_t>(base);
  return out;
}

Result<void*> open_device_memory(const DeviceIpcHandle& handle) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.handle.data(), sizeof(h));
  void* base = nullptr;
  const cudaError_t err = cudaIpcOpenMemHandle(&base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return invalid_argument("CUDA: cudaIpcOpenMemHandle: {}", cudaGetErrorString(err));
  }
  return static_cast<void*>(static_cast<uint8_t*>(base) + handle.offset);
}

void close_device_memory(void* opened, const DeviceIpcHandle& handle) {
  if (opened == nullptr) return;
  const cudaError_t err = cudaIpcCloseMemHandle(static_cast<uint8_t*>(opened) - handle.offset);
  if (err != cudaSuccess) cudaGetLastError();
}

}  // namespace kvserve::platform

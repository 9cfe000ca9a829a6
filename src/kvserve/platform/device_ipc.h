// Device memory shared between processes of one host (CUDA IPC), for the cuda-ipc KV transport:
// the receiving process exports its KV pool's allocation, the sending process maps it and writes
// into it with its own kernels. No CUDA types here (the CUDA build implements it in
// cuda/device_ipc.cpp; without CUDA every call is kUnavailable).
#pragma once

#include <array>
#include <cstdint>

#include "kvserve/core/status.h"

namespace kvserve::platform {

struct DeviceIpcHandle {
  std::array<uint8_t, 64> handle{};  // cudaIpcMemHandle_t's bytes (of the whole allocation)
  uint64_t offset = 0;               // of the exported pointer inside that allocation
};

// The handle of the device allocation holding `ptr` (which need not be its start: a pool's
// sub-allocation). kUnavailable without CUDA, kInternal when the runtime refuses (memory not from
// cudaMalloc).
Result<DeviceIpcHandle> export_device_memory(void* ptr);
// Maps another process's exported memory into this one (on the current device) and returns the
// address of the exported pointer; close_device_memory(that address) unmaps it. In the exporting
// process itself CUDA refuses: kInvalidArgument.
Result<void*> open_device_memory(const DeviceIpcHandle& handle);
void close_device_memory(void* opened, const DeviceIpcHandle& handle);

}  // namespace kvserve::platform

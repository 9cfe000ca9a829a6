#include "kvserve/platform/device_pool.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

#include "kvserve/core/logging.h"

namespace kvserve::platform {
namespace {

std::string gib(size_t bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1024.0 * 1024.0 * 1024.0));
}

}  // namespace

size_t default_pool_headroom(size_t total_bytes) {
  return std::max(kMinPoolHeadroom,
                  static_cast<size_t>(static_cast<double>(total_bytes) * kPoolHeadroomFraction));
}

Result<DevicePoolSize> device_pool_size(const MemoryInfo& device, const DevicePoolOptions& options,
                                        const std::string& device_name) {
  if (options.bytes > 0) {
    return DevicePoolSize{
        options.bytes, device.free_bytes > options.bytes ? device.free_bytes - options.bytes : 0};
  }
  const size_t headroom = options.headroom_bytes > 0 ? options.headroom_bytes
                                                     : default_pool_headroom(device.total_bytes);
  if (options.utilization != 0) {
    if (!(options.utilization > 0 && options.utilization <= 1)) {
      return invalid_argument("--gpu-memory-utilization must be in (0, 1], got {}",
                              options.utilization);
    }
    const auto share =
        static_cast<size_t>(static_cast<double>(device.total_bytes) * options.utilization);
    if (share <= headroom) {
      return invalid_argument(
          "--gpu-memory-utilization {}: {} of {}'s {} is no more than the {} this process needs "
          "outside its device pool",
          options.utilization, gib(share), device_name, gib(device.total_bytes), gib(headroom));
    }
    if (share > device.free_bytes) {
      return out_of_memory(
          "--gpu-memory-utilization {} asks for {} of {}, which has {} free of {} (another "
          "process on this GPU?)",
          options.utilization, gib(share), device_name, gib(device.free_bytes),
          gib(device.total_bytes));
    }
    return DevicePoolSize{share - headroom, headroom};
  }
  if (device.free_bytes <= headroom) {
    return out_of_memory(
        "{}: {} free of {}, no more than the {} headroom left outside the device pool (another "
        "process on this GPU?)",
        device_name, gib(device.free_bytes), gib(device.total_bytes), gib(headroom));
  }
  return DevicePoolSize{device.free_bytes - headroom, headroom};
}

Status reserve_device_pool(Platform& platform, const DevicePoolOptions& options) {
  if (!options.reserve || platform.device().is_cpu()) return Status::ok();
  const MemoryInfo device = platform.memory_info();
  KV_ASSIGN_OR_RETURN(const DevicePoolSize size,
                      device_pool_size(device, options, platform.device().to_string()));
  KV_RETURN_IF_ERROR(platform.reserve_device_pool(size.bytes));
  KV_LOG_INFO(
      "{}: device pool {} reserved up front ({} left outside it for the CUDA context, "
      "cuBLASLt and graph executables; {} free of {} before)",
      platform.device().to_string(), gib(size.bytes), gib(size.headroom), gib(device.free_bytes),
      gib(device.total_bytes));
  return Status::ok();
}

}  // namespace kvserve::platform

#include "kvserve/platform/device_pool.h"

#include <fmt/format.h>

#include <algorithm>

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

Status reserve_device_pool(Platform& platform, const DevicePoolOptions& options) {
  if (!options.reserve || platform.device().is_cpu()) return Status::ok();
  const MemoryInfo device = platform.memory_info();
  size_t bytes = options.bytes;
  size_t headroom = 0;
  if (bytes == 0) {
    headroom = options.headroom_bytes > 0 ? options.headroom_bytes
                                          : default_pool_headroom(device.total_bytes);
    if (device.free_bytes <= headroom) {
      return out_of_memory(
          "{}: {} free of {}, no more than the {} headroom left outside the device pool "
          "(another process on this GPU?)",
          platform.device().to_string(), gib(device.free_bytes), gib(device.total_bytes),
          gib(headroom));
    }
    bytes = device.free_bytes - headroom;
  } else {
    headroom = device.free_bytes > bytes ? device.free_bytes - bytes : 0;
  }
  KV_RETURN_IF_ERROR(platform.reserve_device_pool(bytes));
  KV_LOG_INFO(
      "{}: device pool {} reserved up front ({} left outside it for the CUDA context, "
      "cuBLASLt and graph executables; {} free of {} before)",
      platform.device().to_string(), gib(bytes), gib(headroom), gib(device.free_bytes),
      gib(device.total_bytes));
  return Status::ok();
}

}  // namespace kvserve::platform

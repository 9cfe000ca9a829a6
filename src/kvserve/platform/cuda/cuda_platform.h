// The CUDA platform's entry points. This header names no CUDA type: the rest of kvserve includes
// it freely, and a build without CUDA links cuda_unavailable.cpp instead of cuda_platform.cpp.
#pragma once

#include <memory>
#include <vector>

#include "kvserve/platform/platform.h"

namespace kvserve::platform::cuda {

bool compiled();
// The CUDA devices visible to this process (empty without CUDA or without a driver).
std::vector<PlatformInfo> list_devices();
Result<std::unique_ptr<Platform>> create_platform(int device_index);

}  // namespace kvserve::platform::cuda

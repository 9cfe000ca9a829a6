// The CPU platform: host memory, synchronous copies, streams that order trivially.
#pragma once

#include <memory>
#include <string>

#include "kvserve/platform/platform.h"

namespace kvserve::platform::cpu {

std::unique_ptr<Platform> create_platform();
// "x86_64, 2 cores, 23.4 GiB" style summary of the host.
std::string describe_host();

}  // namespace kvserve::platform::cpu

#include "kvserve/core/tensor.h"

#include <fmt/format.h>

namespace kvserve {

std::string Device::to_string() const {
  switch (kind) {
    case DeviceKind::kCpu:
      return "cpu";
    case DeviceKind::kCuda:
      return fmt::format("cuda:{}", index);
  }
  return "unknown";
}

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < ndim_; ++i)
    s += fmt::format("{}{}", i ? ", " : "", shape_[i]);
  return s + "]";
}

}  // namespace kvserve

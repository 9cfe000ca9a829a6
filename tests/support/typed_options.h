// Tests write devices, backends and KV dtypes by name; the runners take typed values
// (model/model_runner.h). These parse the names as the command line does (bad names are bugs
// in the test: CHECKs).
#pragma once

#include <optional>
#include <string_view>

#include "kvserve/attention/capabilities.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/platform.h"

namespace kvserve::test_support {

inline Device device_of(std::string_view name) {
  return platform::parse_device(name).value();
}

// "" (or "auto"): the device's default.
inline std::optional<attention::AttentionBackendKind> backend_of(std::string_view name) {
  if (name.empty() || name == "auto") return std::nullopt;
  return attention::parse_attention_backend(name).value();
}

// "auto": the compute dtype.
inline std::optional<DType> kv_dtype_of(std::string_view name) {
  if (name == "auto") return std::nullopt;
  DType t{};
  KV_CHECK(parse_dtype(name, &t), "unknown dtype {}", name);
  return t;
}

}  // namespace kvserve::test_support

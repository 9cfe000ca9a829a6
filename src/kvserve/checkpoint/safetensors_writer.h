// Writing safetensors files by streaming: the header is computed from the tensors' shapes, then
// each tensor's bytes are produced on demand, so a checkpoint never has to fit in memory.
// (write_safetensors in weights.h is the in-memory convenience over this.)
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "kvserve/checkpoint/safetensors_format.h"
#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status write(const void* data, size_t bytes) = 0;
};

// Called once per tensor, in the file's order; must write exactly spec.bytes() bytes.
using TensorFill = std::function<Status(const TensorSpec& spec, ByteSink& out)>;

// Writes `file` (replacing it) with the tensors in the reference writer's order
// (safetensors_write_order). Names must be unique, non-empty, valid UTF-8 and not
// "__metadata__". On failure the partial file is removed.
Status write_safetensors_streaming(const std::filesystem::path& file, std::vector<TensorSpec> specs,
                                   const std::map<std::string, std::string>& metadata,
                                   const TensorFill& fill);

}  // namespace kvserve::checkpoint

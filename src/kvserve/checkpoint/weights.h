// Checkpoint weights: safetensors files, one (model.safetensors) or sharded
// (model.safetensors.index.json + the shards it names), memory-mapped and read in place.
//
// The safetensors format: 8 bytes little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, ...,
//  "__metadata__": {...}}, then the data; offsets are relative to the end of the header.
// Truncated files, overlapping or out-of-range offsets, shape/size mismatches, unsupported
// dtypes and missing shards are kInvalidArgument / kNotFound errors naming the file and tensor.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

// A tensor inside a mapped file; valid while its WeightStore lives.
struct WeightView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t bytes = 0;
  std::string file;  // the file it lives in, for error messages

  int64_t numel() const;
};

class WeightStore {
 public:
  virtual ~WeightStore() = default;
  // Opens <dir>/model.safetensors, or <dir>/model.safetensors.index.json and its shards.
  static Result<std::unique_ptr<WeightStore>> open(const std::filesystem::path& dir);
  // Opens one safetensors file.
  static Result<std::unique_ptr<WeightStore>> open_file(const std::filesystem::path& file);

  virtual bool contains(std::string_view name) const = 0;
  // kNotFound naming the tensor and the checkpoint when absent.
  virtual Result<WeightView> get(std::string_view name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  // Total bytes of tensor data.
  virtual size_t total_bytes() const = 0;
};

// One tensor to write: bytes in `dtype`, row-major `shape`.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const uint8_t> data;
};

// Writes a safetensors file with optional "__metadata__" string entries, e.g. {"format": "pt"}:
// byte-for-byte what the reference writer produces (tensors ordered by dtype, widest first, then
// by name; header padded with spaces to a multiple of 8 bytes, so every tensor is aligned).
Status write_safetensors(const std::filesystem::path& file, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata = {});

// The safetensors dtype string ("BF16", "F16", "F32", "F8_E4M3", "F8_E5M2", "I32", "I64", "U8").
std::string_view safetensors_dtype_name(DType t);

}  // namespace kvserve::checkpoint

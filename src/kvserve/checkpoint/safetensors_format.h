// The safetensors format, shared by the reader and the writer: dtype names, header parsing with
// validation, and header serialization byte-for-byte as the reference (Rust) writer does it.
// Internal to model/.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

// The largest header the reference reader accepts (100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// One of the safetensors dtypes with a whole-byte element size. `dtype` is empty for those
// kvserve has no type for (BOOL, I8, I16, U16, U32, U64, F64, F8_E8M0): such tensors can be
// present in a file but not read.
struct SafetensorsDType {
  std::string_view name;
  size_t size = 0;
  std::optional<DType> dtype;
  int rank = 0;  // position in the reference's Dtype enum: its writer sorts by it, descending
};

const SafetensorsDType* find_safetensors_dtype(std::string_view name);
const SafetensorsDType& safetensors_dtype(DType t);

// One tensor of a header; offsets are relative to the start of the data (after the header).
struct SafetensorsEntry {
  std::string name;
  const SafetensorsDType* dtype = nullptr;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;
};

// Parses and validates the JSON header of `file` whose data section holds `data_bytes` bytes:
// known dtypes, non-negative shapes, offsets within the data and not overlapping, and
// numel * element size == end - begin for every tensor.
Result<SafetensorsHeader> parse_safetensors_header(std::string_view header_json,
                                                   uint64_t data_bytes, const std::string& file);

// Elements of a shape (1 for a scalar); empty when the product overflows 63 bits.
std::optional<uint64_t> shape_numel(const std::vector<int64_t>& shape);

// A tensor to lay out in a file.
struct TensorSpec {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;

  uint64_t bytes() const;
};

// The reference writer's order: descending dtype rank (wider types first, which keeps every
// tensor aligned to its element size), then name.
std::vector<TensorSpec> safetensors_write_order(std::vector<TensorSpec> specs);

// The header (without the 8-byte length) for tensors already in write order, data contiguous
// from offset 0: compact JSON, "__metadata__" first when not empty, each tensor as
// {"dtype":..,"shape":[..],"data_offsets":[b,e]}, padded with spaces to a multiple of 8 bytes.
std::string serialize_safetensors_header(const std::vector<TensorSpec>& ordered,
                                         const std::map<std::string, std::string>& metadata);

}  // namespace kvserve::checkpoint

// One validated safetensors file, memory-mapped: its tensor table and views of its data.
// Internal to model/ (WeightStore is the public face).
#pragma once

#include <filesystem>
#include <memory>
#include <string_view>
#include <unordered_map>

#include "kvserve/checkpoint/mapped_file.h"
#include "kvserve/checkpoint/safetensors_format.h"
#include "kvserve/checkpoint/weights.h"

namespace kvserve::checkpoint {

class SafetensorsFile {
 public:
  // Maps and validates the file (header length, JSON, dtypes, offsets, sizes).
  static Result<std::unique_ptr<SafetensorsFile>> open(const std::filesystem::path& path);

  const SafetensorsEntry* find(std::string_view name) const;
  // kUnimplemented when the tensor's dtype has no kvserve type.
  Result<WeightView> view(const SafetensorsEntry& entry) const;
  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint64_t data_bytes() const;  // sum of the tensors' sizes

 private:
  SafetensorsFile() = default;

  std::unique_ptr<MappedFile> map_;
  std::string path_;
  const uint8_t* data_ = nullptr;  // start of the data section
  SafetensorsHeader header_;
  std::unordered_map<std::string_view, size_t> index_;  // name -> header_.tensors position
};

}  // namespace kvserve::checkpoint

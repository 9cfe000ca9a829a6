// A whole file mapped read-only into memory (POSIX mmap), unmapped on destruction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

class MappedFile {
 public:
  // kNotFound when the file does not exist, kIoError when it cannot be opened or mapped.
  static Result<std::unique_ptr<MappedFile>> open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;  // nullptr for an empty file
  size_t size_ = 0;
};

}  // namespace kvserve::checkpoint

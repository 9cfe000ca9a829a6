// Device tags, owned buffers and non-owning tensor views.
//
// Buffer owns a byte range on one device and returns it, on destruction, to the MemoryResource
// (a Platform) that allocated it. TensorView is a typed, shaped, non-owning view of contiguous
// memory; it carries the device so that code can CHECK it is handed memory it may touch.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <utility>

#include "kvserve/core/check.h"
#include "kvserve/core/dtype.h"

namespace kvserve {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool operator==(const Device&) const = default;
  std::string to_string() const;  // "cpu" or "cuda:0"
};

// Anything that hands out device memory and takes it back (each Platform is one).
class MemoryResource {
 public:
  virtual ~MemoryResource() = default;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
};

// Move-only owner of `bytes` bytes of memory on `device`.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t bytes, Device device, MemoryResource* owner)
      : data_(data), bytes_(bytes), device_(device), owner_(owner) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      data_ = std::exchange(other.data_, nullptr);
      bytes_ = std::exchange(other.bytes_, 0);
      device_ = other.device_;
      owner_ = std::exchange(other.owner_, nullptr);
    }
    return *this;
  }
  ~Buffer() { reset(); }

  void reset() {
    if (data_ != nullptr && owner_ != nullptr) owner_->deallocate(data_, bytes_);
    data_ = nullptr;
    bytes_ = 0;
    owner_ = nullptr;
  }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  bool empty() const { return data_ == nullptr; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
  MemoryResource* owner_ = nullptr;
};

// A contiguous, row-major, non-owning view with up to kMaxDims dimensions.
class TensorView {
 public:
  static constexpr int kMaxDims = 4;

  TensorView() = default;
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device = {})
      : TensorView(data, dtype, std::span<const int64_t>(shape.begin(), shape.size()), device) {}
  TensorView(void* data, DType dtype, std::span<const int64_t> shape, Device device = {})
      : data_(data), dtype_(dtype), device_(device) {
    KV_CHECK_LE(shape.size(), static_cast<size_t>(kMaxDims));
    for (int64_t d : shape) {
      KV_CHECK_GE(d, 0, "negative dimension");
      shape_[ndim_++] = d;
    }
  }

  void* data() const { return data_; }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  int64_t dim(int i) const {
    KV_CHECK(i >= 0 && i < ndim_, "dim {} of a {}-d tensor", i, ndim_);
    return shape_[i];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i)
      n *= shape_[i];
    return n;
  }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  std::string shape_string() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_;
  std::array<int64_t, kMaxDims> shape_{};
  int ndim_ = 0;
};

// An owned, contiguous tensor: a Buffer plus its view. Move-only. Created through a platform
// (Tensor::empty in platform/platform.h) so its memory lives on that platform's device.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Buffer buffer, DType dtype, std::span<const int64_t> shape)
      : buffer_(std::move(buffer)), view_(buffer_.data(), dtype, shape, buffer_.device()) {
    KV_CHECK_LE(view_.bytes(), buffer_.bytes(), "tensor {} larger than its buffer",
                view_.shape_string());
  }

  const TensorView& view() const { return view_; }
  operator const TensorView&() const { return view_; }  // NOLINT(google-explicit-constructor)
  void* data() const { return view_.data(); }
  template <typename T>
  T* data_as() const {
    return view_.data_as<T>();
  }
  DType dtype() const { return view_.dtype(); }
  Device device() const { return view_.device(); }
  int ndim() const { return view_.ndim(); }
  int64_t dim(int i) const { return view_.dim(i); }
  int64_t numel() const { return view_.numel(); }
  size_t bytes() const { return view_.bytes(); }
  bool empty() const { return buffer_.empty(); }

 private:
  Buffer buffer_;
  TensorView view_;
};

}  // namespace kvserve

#include "kvserve/platform/platform.h"

#include <charconv>

#include "kvserve/platform/cpu/cpu_platform.h"
#include "kvserve/platform/cuda/cuda_platform.h"

namespace kvserve::platform {

Result<Buffer> Platform::allocate_buffer(size_t bytes) {
  if (faults_ != nullptr && faults_->should_fail(bytes)) [[unlikely]] {
    return out_of_memory("{}: cannot allocate {} bytes (injected fault)", name(), bytes);
  }
  KV_ASSIGN_OR_RETURN(void* ptr, allocate(bytes));
  return Buffer(ptr, bytes, device(), this);
}

Result<Tensor> Platform::empty(DType dtype, std::span<const int64_t> shape, bool zero) {
  int64_t numel = 1;
  for (const int64_t d : shape)
    numel *= d;
  KV_ASSIGN_OR_RETURN(Buffer buf, allocate_buffer(static_cast<size_t>(numel) * dtype_size(dtype)));
  if (zero) memset(buf.data(), 0, buf.bytes());
  return Tensor(std::move(buf), dtype, shape);
}

Status Platform::reserve_device_pool(size_t /*bytes*/) {
  return Status::ok();  // host memory needs no pool: the CPU platform allocates directly
}

std::optional<DevicePoolInfo> Platform::device_pool() const {
  return std::nullopt;
}

Status Platform::begin_capture(StreamHandle /*stream*/) {
  return make_status(StatusCode::kUnimplemented, "{}: no graph capture", name());
}

Result<GraphHandle> Platform::end_capture(StreamHandle /*stream*/) {
  return make_status(StatusCode::kUnimplemented, "{}: no graph capture", name());
}

void Platform::replay(GraphHandle /*graph*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "{}: no graphs to replay", name());
}

void Platform::destroy_graph(GraphHandle /*graph*/) {
  KV_CHECK(false, "{}: no graphs to destroy", name());
}

bool cuda_compiled() {
  return cuda::compiled();
}

std::vector<PlatformInfo> list_platforms() {
  std::vector<PlatformInfo> out;
  out.push_back({Device{DeviceKind::kCpu, 0}, cpu::describe_host()});
  for (PlatformInfo& info : cuda::list_devices())
    out.push_back(std::move(info));
  return out;
}

Result<Device> parse_device(std::string_view name) {
  if (name == "cpu") return Device{DeviceKind::kCpu, 0};
  if (name == "cuda") return Device{DeviceKind::kCuda, 0};
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (name.starts_with(kCudaPrefix)) {
    int index = -1;
    const std::string_view digits = name.substr(kCudaPrefix.size());
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) {
      return Device{DeviceKind::kCuda, index};
    }
  }
  return invalid_argument("unknown device '{}' (expected cpu, cuda or cuda:N)", name);
}

Result<std::unique_ptr<Platform>> create_platform(Device device) {
  switch (device.kind) {
    case DeviceKind::kCpu:
      return cpu::create_platform();
    case DeviceKind::kCuda:
      return cuda::create_platform(device.index);
  }
  return invalid_argument("unknown device kind");
}

}  // namespace kvserve::platform

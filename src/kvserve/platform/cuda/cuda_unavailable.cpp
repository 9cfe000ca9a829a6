// The CUDA entry points of a build configured with KVSERVE_CUDA=OFF (or without nvcc).
#include "kvserve/platform/cuda/cuda_platform.h"

namespace kvserve::platform::cuda {

bool compiled() {
  return false;
}

std::vector<PlatformInfo> list_devices() {
  return {};
}

Result<std::unique_ptr<Platform>> create_platform(int /*device_index*/) {
  return unavailable("this kvserve was built without CUDA (configure with -DKVSERVE_CUDA=ON)");
}

}  // namespace kvserve::platform::cuda

#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {

void store_kv(const ops::KvStoreParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void paged_decode(const ops::PagedDecodeParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

int multiprocessor_count() {
  KV_CHECK(false, "CUDA called in a build without CUDA");
  return 0;
}

}  // namespace kvserve::platform::cuda

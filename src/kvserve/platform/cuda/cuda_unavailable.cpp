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
#include "kvserve/platform/cuda/sampling_radix.h"

namespace kvserve::platform::cuda {

void store_kv(const ops::KvStoreParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void paged_decode(const ops::PagedDecodeParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void paged_prefill(const ops::PagedPrefillParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}
void paged_prefill_sm90(const ops::PagedPrefillParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}
bool paged_prefill_sm90_device() {
  return false;
}

void write_req_to_token(const ops::WriteReqToTokenParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void build_kv_indices(const ops::BuildKvIndicesParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void kv_staging(const ops::KvStagingParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void copy_runs(const ops::CopyRunsParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void embedding(const ops::EmbeddingParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void rms_norm(const ops::RmsNormParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void rope(const ops::RopeParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void act_and_mul(const ops::ActAndMulParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void softcap(const ops::SoftcapParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void split_qkv_rope(const ops::SplitQkvRopeParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void gemm(const ops::GemmParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void argmax_rows(const float* /*logits*/, int64_t /*rows*/, int64_t /*vocab*/, int32_t* /*out*/,
                 bool /*pdl*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void sample_rows(const ops::SampleRowsParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void sample_rows_radix(const ops::SampleRowsParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void layer_norm(const ops::LayerNormParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void gelu(const ops::GeluParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void conv1d(const ops::Conv1dParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void add_position_embedding(const ops::AddPositionEmbeddingParams& /*params*/,
                            StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void gather_kv(const ops::GatherKvParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

void varlen_attention(const ops::VarlenAttentionParams& /*params*/, StreamHandle /*stream*/) {
  KV_CHECK(false, "CUDA kernel called in a build without CUDA");
}

int multiprocessor_count() {
  KV_CHECK(false, "CUDA called in a build without CUDA");
  return 0;
}

}  // namespace kvserve::platform::cuda

// CUDA IPC (platform/device_ipc.h): nothing to share without CUDA.
#include "kvserve/platform/device_ipc.h"

namespace kvserve::platform {

Result<DeviceIpcHandle> export_device_memory(void* /*ptr*/) {
  return unavailable("CUDA IPC: this build has no CUDA");
}

Result<void*> open_device_memory(const DeviceIpcHandle& /*handle*/) {
  return unavailable("CUDA IPC: this build has no CUDA");
}

void close_device_memory(void* /*opened*/, const DeviceIpcHandle& /*handle*/) {}

}  // namespace kvserve::platform

// The device mirror of req_to_token (ops/req_to_token_params.h): one block per request, its
// threads striding over the request's positions, as seed 000's one-program-per-request Triton
// kernel. Both kernels are memory-bound copies of a few thousand integers per request; the page
// size stays a run-time divisor (one integer division per page is noise next to the loads), so
// no template dispatch is needed. A row or position outside the table is a bug upstream: trap.
#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void write_segment(int32_t* row, int64_t stride, int64_t start,
                                              const int32_t* src, int64_t n) {
  if (n <= 0) return;
  if (start < 0 || start + n > stride) __trap();
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
    row[start + i] = src[i];
}

__global__ void write_req_to_token_kernel(const __grid_constant__ ops::WriteReqToTokenParams p) {
  const int32_t b = blockIdx.x;
  const int32_t r = p.rows[b];
  if (r < 0 || r >= p.table_rows) __trap();
  int32_t* row = p.table + static_cast<int64_t>(r) * p.stride;
  if (p.prefix_indptr != nullptr) {
    const int32_t at = p.prefix_indptr[b];
    write_segment(row, p.stride, p.prefix_start == nullptr ? 0 : p.prefix_start[b],
                  p.prefix_slots + at, p.prefix_indptr[b + 1] - at);
  }
  const int32_t at = p.new_indptr[b];
  write_segment(row, p.stride, p.new_start[b], p.new_slots + at, p.new_indptr[b + 1] - at);
}

__global__ void build_kv_indices_kernel(const __grid_constant__ ops::BuildKvIndicesParams p) {
  const int32_t b = blockIdx.x;
  const int32_t r = p.rows[b];
  if (r < 0 || r >= p.table_rows) __trap();
  const int64_t start = p.starts == nullptr ? 0 : p.starts[b];
  const int64_t n = p.indptr[b + 1] - p.indptr[b];
  if (n <= 0) return;
  if (start < 0 || start + (n - 1) * p.page_size >= p.stride) __trap();
  const int32_t* src = p.table + static_cast<int64_t>(r) * p.stride + start;
  int32_t* dst = p.out + p.indptr[b];
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dst[j] = src[j * p.page_size] / p.page_size;
}

}  // namespace

void write_req_to_token(const ops::WriteReqToTokenParams& p, StreamHandle stream_handle) {
  auto stream = static_cast<cudaStream_t>(stream_handle.ptr);
  write_req_to_token_kernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(p);
  KV_CUDA_CHECK(cudaGetLastError());
}

void build_kv_indices(const ops::BuildKvIndicesParams& p, StreamHandle stream_handle) {
  KV_CHECK_MSG(p.page_size >= 1, "build_kv_indices: page size must be >= 1");
  auto stream = static_cast<cudaStream_t>(stream_handle.ptr);
  build_kv_indices_kernel<<<static_cast<unsigned>(p.batch), kThreads, 0, stream>>>(p);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

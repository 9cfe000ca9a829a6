#include "kvserve/platform/ops/req_to_token.h"

#include "kvserve/core/check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/dispatch.h"

namespace kvserve::ops {
namespace cpu {
namespace {

// table[row][start, start + n) = src[0, n), bounds checked (a bad row or length is a bug upstream).
void write_segment(const WriteReqToTokenParams& p, int32_t b, int32_t row, int64_t start,
                   const int32_t* src, int64_t n) {
  if (n == 0) return;
  KV_CHECK(start >= 0 && start + n <= p.stride,
           "request {}: positions [{}, {}) outside a row of {}", b, start, start + n, p.stride);
  int32_t* dst = p.table + row * p.stride + start;
  for (int64_t i = 0; i < n; ++i)
    dst[i] = src[i];
}

}  // namespace

void write_req_to_token(const WriteReqToTokenParams& p) {
  for (int32_t b = 0; b < p.batch; ++b) {
    const int32_t row = p.rows[b];
    KV_CHECK(row >= 0 && row < p.table_rows, "request {}: row {} outside a table of {}", b, row,
             p.table_rows);
    if (p.prefix_indptr != nullptr) {
      const int32_t at = p.prefix_indptr[b];
      write_segment(p, b, row, p.prefix_start == nullptr ? 0 : p.prefix_start[b],
                    p.prefix_slots + at, p.prefix_indptr[b + 1] - at);
    }
    const int32_t at = p.new_indptr[b];
    write_segment(p, b, row, p.new_start[b], p.new_slots + at, p.new_indptr[b + 1] - at);
  }
}

void build_kv_indices(const BuildKvIndicesParams& p) {
  KV_CHECK_GE(p.page_size, 1);
  for (int32_t b = 0; b < p.batch; ++b) {
    const int32_t row = p.rows[b];
    KV_CHECK(row >= 0 && row < p.table_rows, "request {}: row {} outside a table of {}", b, row,
             p.table_rows);
    const int64_t start = p.starts == nullptr ? 0 : p.starts[b];
    const int64_t n = p.indptr[b + 1] - p.indptr[b];
    KV_CHECK(start >= 0 && (n == 0 || start + (n - 1) * p.page_size < p.stride),
             "request {}: {} entries from position {} outside a row of {}", b, n, start, p.stride);
    const int32_t* src = p.table + row * p.stride + start;
    int32_t* dst = p.out + p.indptr[b];
    for (int64_t j = 0; j < n; ++j)
      dst[j] = src[j * p.page_size] / p.page_size;
  }
}

}  // namespace cpu

void write_req_to_token(platform::Platform& platform, const WriteReqToTokenParams& params,
                        platform::StreamHandle stream) {
  if (params.batch == 0) return;
  dispatch(platform, params, stream, &cpu::write_req_to_token, &platform::cuda::write_req_to_token);
}

void build_kv_indices(platform::Platform& platform, const BuildKvIndicesParams& params,
                      platform::StreamHandle stream) {
  if (params.batch == 0) return;
  dispatch(platform, params, stream, &cpu::build_kv_indices, &platform::cuda::build_kv_indices);
}

}  // namespace kvserve::ops

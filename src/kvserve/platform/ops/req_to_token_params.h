// Parameters of the request-to-token ops (fmt-free: CUDA sources include it): the device mirror
// of the req_to_token table is written and read on the device, so only O(batch) integers (rows,
// lengths, prefix sums) cross from the host each forward (mem/device_req_to_token.h).
//
// write_req_to_token (seed 000's one-program-per-request Triton kernel), for request b of row
// rows[b]:
//   table[row][prefix_start[b] + i] = prefix_slots[prefix_indptr[b] + i],
//       i < prefix_indptr[b + 1] - prefix_indptr[b]
//   table[row][new_start[b] + i]    = new_slots[new_indptr[b] + i],
//       i < new_indptr[b + 1] - new_indptr[b]
// An extend's prefix is [0, prefix_len) (prefix_start 0) and its new slots start at prefix_len; a
// decode step has no prefix (or only the positions the host rewrote since the last forward) and
// one new slot at seq_len - 1. Encoder-decoder rows add the decoder region's start to new_start.
//
// build_kv_indices (the page-table / CSR builder), for request b of row rows[b]:
//   out[indptr[b] + j] = table[row][starts[b] + j * page_size] / page_size,
//       j < indptr[b + 1] - indptr[b]  (= ceil(kv_lens / page_size), computed by the host)
// page_size 1 gives the token-slot list of a ragged gather; page_size > 1 the page ids of
// `req_to_token[:, ::page_size] // page_size` (starts page-aligned).
#pragma once

#include <cstdint>

namespace kvserve::ops {

struct WriteReqToTokenParams {
  int32_t* table = nullptr;                // [table_rows, stride] on the device
  int64_t stride = 0;                      // columns of the table (max_context_len)
  int32_t table_rows = 0;                  // for bounds checks
  const int32_t* rows = nullptr;           // [batch]
  const int32_t* prefix_indptr = nullptr;  // [batch + 1] into prefix_slots; null: no prefixes
  const int32_t* prefix_start = nullptr;   // [batch] first position of the prefix; null: 0
  const int32_t* prefix_slots = nullptr;
  const int32_t* new_indptr = nullptr;  // [batch + 1] into new_slots
  const int32_t* new_start = nullptr;   // [batch] position of the first new slot
  const int32_t* new_slots = nullptr;   // the forward's out_cache_loc (request-major)
  int32_t batch = 0;
};

struct BuildKvIndicesParams {
  const int32_t* table = nullptr;  // [table_rows, stride] on the device
  int64_t stride = 0;
  int32_t table_rows = 0;
  const int32_t* rows = nullptr;    // [batch]
  const int32_t* starts = nullptr;  // [batch] first position of each range; null: 0
  const int32_t* indptr = nullptr;  // [batch + 1] output offsets (entries per request)
  int32_t* out = nullptr;           // [indptr[batch]]
  int32_t batch = 0;
  int32_t page_size = 1;  // 1: token slots
};

}  // namespace kvserve::ops

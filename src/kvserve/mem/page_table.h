// Attention metadata builders: what the attention backends read (seed 000; style-anchors §7.2).
//
// A backend attends, for each request, over a range of its req_to_token row. Three forms:
//   * a page table: page_table[b][j] = row[start + j * page_size] / page_size, the
//     `req_to_token[:, ::page_size] // page_size` of seed 000 (start must be page-aligned);
//   * CSR indices: kv_indptr[B + 1] and kv_indices (token slots, or page ids), with
//     kv_last_page_len, as FlashInfer's paged_kv_t;
//   * cu_seqlens for ragged (varlen) tensors.
// A range may be empty (encoder_len == 0): its entries are empty, and total_kv() == 0 tells a
// backend to write zeros without launching anything.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/mem/req_to_token_pool.h"

namespace kvserve::mem {

// Positions [start, start + len) of one request's row.
struct KvRange {
  int32_t row = 0;
  int32_t start = 0;
  int32_t len = 0;
};

struct PageTable {
  int32_t page_size = 1;
  int32_t max_pages = 0;         // columns of `table`
  std::vector<int32_t> table;    // [batch, max_pages]; unused entries are page 0
  std::vector<int32_t> kv_lens;  // [batch] tokens per request
  int64_t total_kv() const;
};

enum class IndexUnit { kToken, kPage };

struct KvIndices {
  IndexUnit unit = IndexUnit::kToken;
  int32_t page_size = 1;
  std::vector<int32_t> indptr;         // [batch + 1]
  std::vector<int32_t> indices;        // [indptr.back()] token slots or page ids
  std::vector<int32_t> last_page_len;  // [batch] tokens used in each request's last page
  std::vector<int32_t> kv_lens;        // [batch] tokens per request
  int64_t total_kv() const;
};

// CHECKs that ranges sit on page boundaries (start % page_size == 0).
void build_page_table(const ReqToTokenPool& req_to_token, std::span<const KvRange> ranges,
                      int32_t page_size, PageTable& out);
// kToken: every slot of every range (the gather list of a ragged backend); any start.
// kPage: one page id per page of every range; start must be page-aligned.
void build_kv_indices(const ReqToTokenPool& req_to_token, std::span<const KvRange> ranges,
                      IndexUnit unit, int32_t page_size, KvIndices& out);
// cu[0] = 0, cu[i + 1] = cu[i] + lens[i].
void build_cu_seqlens(std::span<const int32_t> lens, std::vector<int32_t>& cu);

// Whether a range of a row obeys the paging invariant: every page-aligned group of positions
// lives in one physical page, in order (row[start + j*ps + k] == page * ps + k). O(len): tests
// and the invariant checker use it, backends rely on it.
bool range_is_paged(const ReqToTokenPool& req_to_token, const KvRange& range, int32_t page_size);

}  // namespace kvserve::mem

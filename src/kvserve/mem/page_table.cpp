#include "kvserve/mem/page_table.h"

#include "kvserve/mem/common.h"

namespace kvserve::mem {

int64_t PageTable::total_kv() const {
  int64_t n = 0;
  for (const int32_t l : kv_lens)
    n += l;
  return n;
}

int64_t KvIndices::total_kv() const {
  int64_t n = 0;
  for (const int32_t l : kv_lens)
    n += l;
  return n;
}

void build_page_table(const ReqToTokenPool& req_to_token, std::span<const KvRange> ranges,
                      int32_t page_size, PageTable& out) {
  out.page_size = page_size;
  out.max_pages = 0;
  out.kv_lens.resize(ranges.size());
  for (size_t b = 0; b < ranges.size(); ++b) {
    const KvRange& r = ranges[b];
    KV_CHECK_EQ(r.start % page_size, 0, "request {}: range starts mid-page", b);
    out.kv_lens[b] = r.len;
    out.max_pages = std::max(out.max_pages, static_cast<int32_t>(ceil_div(r.len, page_size)));
  }
  out.table.assign(ranges.size() * static_cast<size_t>(out.max_pages), 0);
  for (size_t b = 0; b < ranges.size(); ++b) {
    const KvRange& r = ranges[b];
    const auto row = req_to_token.row(r.row, r.start, r.len);
    int32_t* dst = out.table.data() + b * out.max_pages;
    for (int32_t j = 0; j * page_size < r.len; ++j)
      dst[j] = row[j * page_size] / page_size;
  }
}

void build_kv_indices(const ReqToTokenPool& req_to_token, std::span<const KvRange> ranges,
                      IndexUnit unit, int32_t page_size, KvIndices& out) {
  out.unit = unit;
  out.page_size = unit == IndexUnit::kToken ? 1 : page_size;
  const int32_t ps = out.page_size;
  out.indptr.resize(ranges.size() + 1);
  out.last_page_len.resize(ranges.size());
  out.kv_lens.resize(ranges.size());
  out.indptr[0] = 0;
  for (size_t b = 0; b < ranges.size(); ++b) {
    const KvRange& r = ranges[b];
    KV_CHECK_EQ(r.start % ps, 0, "request {}: range starts mid-page", b);
    out.kv_lens[b] = r.len;
    out.indptr[b + 1] = out.indptr[b] + static_cast<int32_t>(ceil_div(r.len, ps));
    out.last_page_len[b] = r.len == 0 ? 0 : (r.len - 1) % ps + 1;
  }
  out.indices.resize(out.indptr.back());
  for (size_t b = 0; b < ranges.size(); ++b) {
    const KvRange& r = ranges[b];
    const auto row = req_to_token.row(r.row, r.start, r.len);
    int32_t* dst = out.indices.data() + out.indptr[b];
    for (int32_t j = 0; j * ps < r.len; ++j)
      dst[j] = row[j * ps] / ps;
  }
}

void build_cu_seqlens(std::span<const int32_t> lens, std::vector<int32_t>& cu) {
  cu.resize(lens.size() + 1);
  cu[0] = 0;
  for (size_t i = 0; i < lens.size(); ++i)
    cu[i + 1] = cu[i] + lens[i];
}

bool range_is_paged(const ReqToTokenPool& req_to_token, const KvRange& range, int32_t page_size) {
  if (range.start % page_size != 0) return false;
  const auto row = req_to_token.row(range.row, range.start, range.len);
  for (int32_t i = 0; i < range.len; ++i) {
    const int32_t first = row[i - i % page_size];
    if (first % page_size != 0 || row[i] != first + i % page_size) return false;
  }
  return true;
}

}  // namespace kvserve::mem

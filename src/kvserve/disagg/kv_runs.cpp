#include "kvserve/disagg/kv_runs.h"

namespace kvserve::disagg {

KvRegionLayout kv_region_layout(std::span<const mem::KvBufferInfo> buffers,
                                const void* region_base) {
  KvRegionLayout layout;
  const auto* base = static_cast<const uint8_t*>(region_base);
  for (const mem::KvBufferInfo& b : buffers) {
    const auto* p = static_cast<const uint8_t*>(b.ptr);
    KV_CHECK(p >= base, "KV buffer below the registered region's base");
    layout.buffer_offsets.push_back(static_cast<uint64_t>(p - base));
    KV_CHECK(layout.page_bytes == 0 || layout.page_bytes == b.page_bytes,
             "KV buffers with different page sizes");
    layout.page_bytes = b.page_bytes;
    KV_CHECK(layout.buffer_bytes == 0 || layout.buffer_bytes == b.bytes,
             "KV buffers with different sizes");
    layout.buffer_bytes = b.bytes;
  }
  return layout;
}

KvRegionLayout kv_region_layout(const mem::MHATokenToKVPool& pool, const void* region_base) {
  const std::vector<mem::KvBufferInfo> infos = pool.get_contiguous_buf_infos();
  return kv_region_layout(infos, region_base);
}

std::vector<PageRun> merge_page_runs(std::span<const int32_t> src_pages,
                                     std::span<const int32_t> dst_pages) {
  KV_CHECK_EQ(src_pages.size(), dst_pages.size());
  std::vector<PageRun> runs;
  for (size_t i = 0; i < src_pages.size(); ++i) {
    if (!runs.empty()) {
      PageRun& last = runs.back();
      if (src_pages[i] == last.src_page + last.count &&
          dst_pages[i] == last.dst_page + last.count) {
        ++last.count;
        continue;
      }
    }
    runs.push_back({src_pages[i], dst_pages[i], 1});
  }
  return runs;
}

Result<std::vector<WriteOp>> merge_runs(std::span<const int32_t> src_pages,
                                        std::span<const int32_t> dst_pages,
                                        const KvRegionLayout& src, const KvRegionLayout& dst) {
  if (src_pages.size() != dst_pages.size()) {
    return invalid_argument("KV transfer: {} source pages for {} destination pages",
                            src_pages.size(), dst_pages.size());
  }
  if (src.buffer_offsets.size() != dst.buffer_offsets.size() || src.page_bytes != dst.page_bytes) {
    return invalid_argument(
        "KV transfer: layouts differ ({} buffers of {}-byte pages here, {} of {}-byte pages at "
        "the peer): a direct page copy needs equal layouts (use the staging path)",
        src.buffer_offsets.size(), src.page_bytes, dst.buffer_offsets.size(), dst.page_bytes);
  }
  if (src.page_bytes == 0) return invalid_argument("KV transfer: a layout with 0-byte pages");
  const auto pages_in = [](const KvRegionLayout& l) {
    return static_cast<int64_t>(l.buffer_bytes / l.page_bytes);
  };
  for (size_t i = 0; i < src_pages.size(); ++i) {
    if (src_pages[i] < 0 || src_pages[i] >= pages_in(src) || dst_pages[i] < 0 ||
        dst_pages[i] >= pages_in(dst)) {
      return invalid_argument(
          "KV transfer: page pair {} ({} -> {}) outside the pools ({} and {} pages)", i,
          src_pages[i], dst_pages[i], pages_in(src), pages_in(dst));
    }
  }
  const std::vector<PageRun> runs = merge_page_runs(src_pages, dst_pages);
  std::vector<WriteOp> ops;
  ops.reserve(runs.size() * src.buffer_offsets.size());
  for (size_t b = 0; b < src.buffer_offsets.size(); ++b) {
    for (const PageRun& r : runs) {
      ops.push_back({src.buffer_offsets[b] + static_cast<uint64_t>(r.src_page) * src.page_bytes,
                     dst.buffer_offsets[b] + static_cast<uint64_t>(r.dst_page) * dst.page_bytes,
                     static_cast<uint64_t>(r.count) * src.page_bytes});
    }
  }
  return ops;
}

}  // namespace kvserve::disagg

// From page ids on both sides to the WriteOps of one transfer: runs of pages consecutive on both
// sides merged, one write per run for every layer's K and every layer's V (the idea of SGLang's
// group_concurrent_contiguous; our own code).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/disagg/kv_transport.h"
#include "kvserve/mem/kv_pool.h"

namespace kvserve::disagg {

// Where one side's KV lives inside its registered region: the offset of each K/V buffer (every
// layer's K, then every layer's V: MHATokenToKVPool::get_contiguous_buf_infos' order) and one
// page's bytes in each (equal for all buffers of a pool).
struct KvRegionLayout {
  std::vector<uint64_t> buffer_offsets;
  uint64_t page_bytes = 0;
  uint64_t buffer_bytes = 0;  // one buffer's size (every page id must fit in it)
};

// The layout of `pool` when the registered region starts at `region_base` (the pool's first
// buffer when the whole pool is registered).
KvRegionLayout kv_region_layout(const mem::MHATokenToKVPool& pool, const void* region_base);
KvRegionLayout kv_region_layout(std::span<const mem::KvBufferInfo> buffers,
                                const void* region_base);

// A run of `count` pages consecutive on both sides.
struct PageRun {
  int64_t src_page = 0;
  int64_t dst_page = 0;
  int64_t count = 0;
  bool operator==(const PageRun&) const = default;
};

// src_pages[i] -> dst_pages[i], in order, merged where both sides continue by one.
std::vector<PageRun> merge_page_runs(std::span<const int32_t> src_pages,
                                     std::span<const int32_t> dst_pages);

// The writes that move pages src_pages[i] of `src` to dst_pages[i] of `dst`: one per run and
// buffer (buffer-major, runs in order). kInvalidArgument when the lists' lengths differ, the
// layouts disagree (buffer count, page bytes: that needs the staging path), or a page id is
// negative or outside a buffer.
Result<std::vector<WriteOp>> merge_runs(std::span<const int32_t> src_pages,
                                        std::span<const int32_t> dst_pages,
                                        const KvRegionLayout& src, const KvRegionLayout& dst);

}  // namespace kvserve::disagg

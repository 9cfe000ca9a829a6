#include "kvserve/mem/invariants.h"

#include <fmt/format.h>

#include <algorithm>

#include "kvserve/mem/common.h"
#include "kvserve/mem/page_table.h"

namespace kvserve::mem {
namespace {

constexpr int32_t kUnowned = -3;
constexpr int32_t kFree = -2;
constexpr int32_t kCache = -1;  // owners >= 0 are indices into `live`

std::string owner_name(int32_t owner) {
  switch (owner) {
    case kUnowned:
      return "nobody";
    case kFree:
      return "the free list";
    case kCache:
      return "the prefix cache";
    default:
      return fmt::format("live request #{}", owner);
  }
}

Status violation(std::string message) {
  return Status(StatusCode::kInternal, std::move(message));
}

}  // namespace

std::string MemoryReport::to_string() const {
  return fmt::format(
      "total {} = available {} + evictable {} + protected {} + request-owned {} ({}), rows {}",
      total, available, evictable, protected_, request_owned,
      available + evictable + protected_ + request_owned, rows_in_use);
}

Status check_memory_invariants(const KvMemory& mem, std::span<const KvReqState* const> live,
                               MemoryReport* report) {
  MemoryReport local;
  MemoryReport& r = report != nullptr ? *report : local;
  r = MemoryReport{};
  const BaseTokenToKVPoolAllocator& alloc = mem.allocator;
  const int32_t ps = alloc.page_size();
  const int64_t num_pages = alloc.num_pages();
  r.total = alloc.size();
  r.available = alloc.available_size();
  const CacheSizes sizes = mem.tree_cache.sizes();
  r.evictable = sizes.evictable;
  r.protected_ = sizes.protected_;

  if (alloc.in_free_group()) return violation("checked inside a free group");
  KV_RETURN_IF_ERROR(mem.tree_cache.check_consistency());

  std::vector<int32_t> owner(num_pages + 1, kUnowned);
  auto claim = [&](int64_t page, int32_t who, std::string_view what) -> Status {
    if (page < 1 || page > num_pages) {
      return violation(fmt::format("{} holds page {} outside 1..{}", what, page, num_pages));
    }
    if (owner[page] != kUnowned && owner[page] != who) {
      return violation(fmt::format("page {} is owned by {} and by {}", page,
                                   owner_name(owner[page]), owner_name(who)));
    }
    owner[page] = who;
    return Status::ok();
  };

  // 1. The free list.
  for (const int32_t page : alloc.free_pages()) {
    if (page >= 1 && page <= num_pages && owner[page] == kFree) {
      return violation(fmt::format("page {} is on the free list twice", page));
    }
    KV_RETURN_IF_ERROR(claim(page, kFree, "the free list"));
    if (!alloc.is_page_free(page)) {
      return violation(fmt::format("page {} is on the free list but marked allocated", page));
    }
  }

  // 2. The prefix cache: whole pages only.
  int64_t cached_tokens = 0;
  Status cache_status;
  mem.tree_cache.for_each_cached_run([&](const CachedRun& run) {
    cached_tokens += static_cast<int64_t>(run.slots.size());
    for (size_t i = 0; i < run.slots.size() && cache_status.is_ok(); i += ps) {
      const int64_t page = run.slots[i] / ps;
      if (page >= 1 && page <= num_pages && owner[page] == kCache) {
        cache_status = violation(fmt::format("page {} is in two prefix-cache nodes", page));
      } else {
        cache_status = claim(page, kCache, "the prefix cache");
      }
    }
  });
  KV_RETURN_IF_ERROR(cache_status);
  if (cached_tokens != r.evictable + r.protected_) {
    return violation(fmt::format("prefix cache holds {} tokens but reports {} + {}", cached_tokens,
                                 r.evictable, r.protected_));
  }

  // 3. Live requests: row[0, protected) is the cache's, row[protected, allocated) theirs.
  std::vector<int32_t> rows_seen;
  for (size_t i = 0; i < live.size(); ++i) {
    const KvReqState& q = *live[i];
    const auto who = static_cast<int32_t>(i);
    if (q.row == kNoRow) {
      if (q.kv_allocated_len != 0) {
        return violation(fmt::format("request #{} has {} slots but no row", i, q.kv_allocated_len));
      }
      continue;
    }
    if (!mem.req_to_token.is_allocated(q.row)) {
      return violation(fmt::format("request #{} uses row {} which is not allocated", i, q.row));
    }
    rows_seen.push_back(q.row);
    if (q.cache_protected_len % ps != 0 || q.cache_protected_len > q.kv_allocated_len ||
        q.kv_committed_len > q.kv_allocated_len) {
      return violation(fmt::format("request #{}: protected {} committed {} allocated {} (page {})",
                                   i, q.cache_protected_len, q.kv_committed_len, q.kv_allocated_len,
                                   ps));
    }
    if (!range_is_paged(mem.req_to_token, KvRange{q.row, 0, q.kv_allocated_len}, ps)) {
      return violation(fmt::format("request #{}: row {} breaks the paging invariant", i, q.row));
    }
    const auto slots = mem.req_to_token.row(q.row, 0, q.kv_allocated_len);
    for (int32_t p = 0; p < q.cache_protected_len; p += ps) {
      if (slots[p] / ps < 1 || slots[p] / ps > num_pages) {
        return violation(fmt::format("request #{}: protected position {}: page {} outside 1..{}", i,
                                     p, slots[p] / ps, num_pages));
      }
      if (owner[slots[p] / ps] != kCache) {
        return violation(fmt::format("request #{}: protected position {} (page {}) is owned by {}",
                                     i, p, slots[p] / ps, owner_name(owner[slots[p] / ps])));
      }
    }
    int64_t pages = 0;
    for (int32_t p = q.cache_protected_len; p < q.kv_allocated_len; p += ps) {
      KV_RETURN_IF_ERROR(claim(slots[p] / ps, who, fmt::format("request #{}", i)));
      ++pages;
    }
    const int64_t expected = ceil_align(q.kv_allocated_len, ps) - q.cache_protected_len;
    if (pages * ps != expected) {
      return violation(
          fmt::format("request #{} owns {} pages, expected {} slots", i, pages, expected));
    }
    r.request_owned += expected;
  }

  // 4. Every page has exactly one owner; page 0 none (it is never in a list above).
  for (int64_t page = 1; page <= num_pages; ++page) {
    if (owner[page] == kUnowned) return violation(fmt::format("page {} is owned by nobody", page));
  }
  if (r.available + r.evictable + r.protected_ + r.request_owned != r.total) {
    return violation("memory not conserved: " + r.to_string());
  }

  // 5. Rows: exactly the live requests' rows are allocated, each once (row 0 is never allocated).
  std::vector<int32_t> allocated = mem.req_to_token.allocated_rows();
  std::sort(rows_seen.begin(), rows_seen.end());
  r.rows_in_use = static_cast<int32_t>(allocated.size());
  if (std::adjacent_find(rows_seen.begin(), rows_seen.end()) != rows_seen.end()) {
    return violation("two live requests share a row");
  }
  if (rows_seen != allocated) {
    return violation(fmt::format("{} rows allocated but {} live requests hold one",
                                 allocated.size(), rows_seen.size()));
  }
  return Status::ok();
}

}  // namespace kvserve::mem

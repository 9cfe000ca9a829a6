// The memory invariant checker (DESIGN.md invariants 1, 2 and 7).
//
// Walks the allocator's free list, every prefix-cache node and every live request's row, and
// asserts that each page of the pool has exactly one owner and that the counters add up:
//   available + evictable + protected + sum(request-owned) == total.
// The engine runs it when idle; tests run it after every step. O(pages + cached tokens / page
// size + allocated tokens).
#pragma once

#include <span>
#include <string>

#include "kvserve/mem/allocation.h"

namespace kvserve::mem {

struct MemoryReport {
  int64_t total = 0;          // usable slots of the pool (page 0 excluded)
  int64_t available = 0;      // on the allocator's free list
  int64_t evictable = 0;      // cached, unlocked
  int64_t protected_ = 0;     // cached, locked by a request
  int64_t request_owned = 0;  // in requests' rows beyond their protected prefix (whole pages)
  int32_t rows_in_use = 0;
  std::string to_string() const;
};

// `live` holds every request that owns a row or a lock. Returns the first violation found
// (kInternal, with the page, row or node that breaks it) and fills `report` either way.
Status check_memory_invariants(const KvMemory& mem, std::span<const KvReqState* const> live,
                               MemoryReport* report = nullptr);

}  // namespace kvserve::mem

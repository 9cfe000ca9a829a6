// MemorySimulator: drives the whole memory system through SGLang's request lifecycle with random
// operations, and checks it after every step against an independent reference model.
//
// Operations: admit (match the prompt's prefix capped at len - 1, lock it, allocate, possibly a
// first chunk), continue a chunked prefill (cache_unfinished_req between chunks), decode steps
// over random subsets (retracting on out-of-memory), finish and abort (in free groups),
// explicit eviction, lookup-only matches (which split nodes), backup/alloc/restore rollbacks
// and flushes. Checks after every step:
//   * check_memory_invariants (conservation, single ownership, rows, paging);
//   * KV contents: every slot remembers the (token, position) written into it; each live
//     request's row and each cached node must read back exactly its own tokens;
//   * a reference prefix cache (a hash map of page-aligned prefixes with lock counts and access
//     times): match results, cached contents and lock counts must equal it, and every eviction
//     must take only unlocked pages, whole subtrees, and (LRU) the least recently used first.
// `kvserve self-check` and the randomised tests run it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvserve/core/status.h"
#include "kvserve/mem/radix_cache.h"

namespace kvserve::mem {

struct SimulatorConfig {
  int32_t page_size = 1;
  bool radix_cache = true;  // false: ChunkCache (--disable-radix-cache)
  EvictionPolicy eviction_policy = EvictionPolicy::kLru;
  uint64_t seed = 1;
  // Sizes; 0 derives them from the page size so that every page size sees memory pressure.
  int64_t pool_slots = 0;
  int32_t max_requests = 16;
};

struct SimulatorStats {
  int64_t steps = 0;
  int64_t admitted = 0;
  int64_t admit_oom = 0;
  int64_t chunks = 0;
  int64_t decode_batches = 0;
  int64_t decode_oom = 0;
  int64_t retracted = 0;
  int64_t finished = 0;
  int64_t explicit_evictions = 0;
  int64_t evicted_tokens = 0;
  int64_t lookups = 0;
  int64_t prefix_hit_tokens = 0;
  int64_t rollbacks = 0;
  int64_t flushes = 0;
  int64_t max_cached_tokens = 0;
  int32_t max_live = 0;
  std::string to_string() const;
};

class MemorySimulator {
 public:
  explicit MemorySimulator(const SimulatorConfig& config);
  ~MemorySimulator();
  MemorySimulator(const MemorySimulator&) = delete;
  MemorySimulator& operator=(const MemorySimulator&) = delete;

  // One random operation, then every check. The error names the step and the operation.
  Status step();
  // `steps` operations; stops at the first violation.
  Status run(int64_t steps);
  const SimulatorStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::mem

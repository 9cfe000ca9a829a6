// DeviceArena: a sub-allocator over one contiguous address range [base, base + size).
//
// A device platform that reserved its pool up front (Platform::reserve_device_pool) makes one
// cudaMalloc of the whole pool and hands out pieces of it through this arena, so that serving
// never calls cudaMalloc/cudaFree again (they synchronise the device and fragment the address
// space over a long run) and the KV cache can be sized from what the pool has left. The arena
// never touches the memory: it only does address arithmetic, so it is CUDA-free and unit-tested
// on the host (tests/unit/device_arena_test.cpp).
//
// Policy: best fit by size (ties: the lowest address), the remainder of a split block stays free
// at the higher address, and a freed block merges with free neighbours at once (address-ordered
// coalescing), so freeing everything always leaves one block of the whole range. Every block
// starts and ends on kAlignment (256) bytes: what cudaMalloc guarantees and what vectorised
// loads, cuBLASLt's alignment-keyed plans and TMA descriptors rely on. All operations are
// O(log n) in the number of blocks.
//
// Not thread-safe: the owner (the CUDA platform) serialises calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "kvserve/core/status.h"

namespace kvserve::platform {

struct ArenaStats {
  size_t size = 0;                // the whole range
  size_t bytes_in_use = 0;        // sum of the live blocks (after rounding up to the alignment)
  size_t free_bytes = 0;          // size - bytes_in_use
  size_t largest_free_block = 0;  // the largest request that can succeed now
  size_t peak_bytes_in_use = 0;   // the maximum of bytes_in_use since construction
  size_t blocks_in_use = 0;       // live allocations
  size_t free_blocks = 0;         // free extents (1 when nothing is fragmented)
};

class DeviceArena {
 public:
  static constexpr size_t kAlignment = 256;

  // `base` must be kAlignment-aligned (cudaMalloc's is); a size that is not a multiple of the
  // alignment is rounded down (the tail can never start an aligned block anyway).
  DeviceArena(uintptr_t base, size_t size);
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // An aligned block of at least `bytes` (0 counts as 1, as with cudaMalloc: every live block has
  // a distinct address). Running out is kOutOfMemory naming the request, the free bytes and the
  // largest free block, so fragmentation shows in the message.
  Result<uintptr_t> allocate(size_t bytes);
  // Returns a block `allocate` handed out; any other address is a bug (CHECK).
  void deallocate(uintptr_t address);

  uintptr_t base() const { return base_; }
  size_t size() const { return size_; }
  bool contains(uintptr_t address) const { return address >= base_ && address - base_ < size_; }
  // The rounded size of a live block (CHECKs that it is one).
  size_t block_size(uintptr_t address) const;
  ArenaStats stats() const;
  // "12.0 MiB in use in 3 blocks, 1.0 GiB free (largest 800.0 MiB), peak 20.0 MiB"
  std::string summary() const;

 private:
  void insert_free(uintptr_t address, size_t bytes);
  void erase_free(std::map<uintptr_t, size_t>::iterator it);

  uintptr_t base_;
  size_t size_;
  std::map<uintptr_t, size_t> free_by_address_;          // start -> length: coalescing
  std::set<std::pair<size_t, uintptr_t>> free_by_size_;  // (length, start): best fit
  std::unordered_map<uintptr_t, size_t> used_;           // start -> rounded length
  size_t bytes_in_use_ = 0;
  size_t peak_bytes_in_use_ = 0;
};

}  // namespace kvserve::platform

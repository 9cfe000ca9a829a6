// KV slot allocators: which slots of the KV pool are free (seed 000; sglang-notes §2).
//
// A slot is one token's K/V in every layer; a page is `page_size` consecutive slots
// [p * page_size, (p + 1) * page_size). Page 0 (slot 0 when page_size == 1) is reserved: padded
// batch entries write there, so it is never handed out. Both allocators keep a free list of
// pages (for page_size 1 a page is a slot) and a per-page free bit that catches double frees.
//
// TokenToKVPoolAllocator (page_size 1) hands out individual slots. PagedTokenToKVPoolAllocator
// (page_size > 1) hands out whole pages and grows a sequence in place: alloc_extend first fills
// the sequence's partial last page, so position t of a request always lives at
// page_table[t / page_size] * page_size + t % page_size.
//
// Running out of slots is an expected failure: allocation returns kOutOfMemory and leaves the
// allocator exactly as it was. Host metadata only: no device memory, no CUDA.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::mem {

// A snapshot of the free list, for rolling back speculative allocations.
struct AllocatorState {
  int64_t free_top = 0;
  uint64_t generation = 0;
};

class BaseTokenToKVPoolAllocator {
 public:
  // `size` usable slots (rounded down to whole pages) plus the reserved page 0.
  BaseTokenToKVPoolAllocator(int64_t size, int32_t page_size);
  virtual ~BaseTokenToKVPoolAllocator() = default;
  BaseTokenToKVPoolAllocator(const BaseTokenToKVPoolAllocator&) = delete;
  BaseTokenToKVPoolAllocator& operator=(const BaseTokenToKVPoolAllocator&) = delete;

  int32_t page_size() const { return page_size_; }
  int64_t num_pages() const { return num_pages_; }          // usable pages, page 0 excluded
  int64_t size() const { return num_pages_ * page_size_; }  // usable slots
  int64_t available_size() const { return free_top_ * page_size_; }

  // `n` new slots into `out` (n a multiple of page_size when page_size > 1).
  virtual Status alloc(int64_t n, std::vector<int32_t>& out) = 0;
  // Slots for positions [prefix_lens[i], seq_lens[i]) of each request, request-major, into `out`.
  // last_loc[i] is the slot of position prefix_lens[i] - 1, or kNoSlot when prefix_lens[i] == 0.
  virtual Status alloc_extend(std::span<const int32_t> prefix_lens,
                              std::span<const int32_t> seq_lens, std::span<const int32_t> last_loc,
                              std::vector<int32_t>& out) = 0;
  // One slot per request for position seq_lens[i] - 1; seq_lens are the lengths after this step
  // and last_loc[i] is the slot of position seq_lens[i] - 2.
  virtual Status alloc_decode(std::span<const int32_t> seq_lens, std::span<const int32_t> last_loc,
                              std::vector<int32_t>& out) = 0;

  // Free slots needed by alloc_extend / alloc_decode with these lengths (whole pages), so a
  // caller can evict from the prefix cache before it allocates.
  int64_t extend_slots_needed(std::span<const int32_t> prefix_lens,
                              std::span<const int32_t> seq_lens) const;
  int64_t decode_slots_needed(std::span<const int32_t> seq_lens) const;

  // Returns the pages holding `slots`; freeing any slot of a page frees the whole page. A page
  // that is already free, page 0, or a slot out of range is a bug (CheckError).
  void free(std::span<const int32_t> slots);
  // Frees between begin and end are buffered and applied at end as one free (one dedup).
  void free_group_begin();
  void free_group_end();
  bool in_free_group() const { return in_group_; }

  // O(1) snapshot and rollback of allocations. Only allocations may happen in between: a free
  // after backup_state() would be lost by the rollback, so restore_state() CHECKs there was none.
  AllocatorState backup_state() const { return {free_top_, generation_}; }
  void restore_state(const AllocatorState& state);

  // Every page free again.
  void clear();

  // Introspection for the invariant checker and tests.
  std::span<const int32_t> free_pages() const { return {free_.data(), size_t(free_top_)}; }
  bool is_page_free(int64_t page) const { return page_free_[page] != 0; }

 protected:
  // Pops `n` pages off the free list into out[0..n). Caller has checked availability.
  void pop_pages(int64_t n, int32_t* out);
  // CHECKs that `slot` may be read through a request's row (allocated, not in page 0).
  void check_allocated_slot(int32_t slot) const;
  // slot / page_size and pos % page_size, by shift and mask for power-of-two page sizes (the
  // common case; hot in alloc_decode), by division otherwise.
  int64_t page_of(int64_t slot) const {
    return page_shift_ >= 0 ? slot >> page_shift_ : slot / page_size_;
  }
  int64_t offset_in_page(int64_t pos) const {
    return page_shift_ >= 0 ? pos & (page_size_ - 1) : pos % page_size_;
  }

  const int32_t page_size_;
  const int64_t num_pages_;
  const int32_t page_shift_;  // log2(page_size) when it is a power of two, else -1

 private:
  void free_now(std::span<const int32_t> slots);

  // Free pages; the top of the stack is free_[free_top_ - 1]. Entries above the top are kept
  // (not overwritten by allocation) so restore_state() can roll the top back.
  std::vector<int32_t> free_;
  int64_t free_top_ = 0;
  std::vector<uint8_t> page_free_;   // [num_pages + 1], page 0 never free
  std::vector<uint32_t> seen_mark_;  // dedup of pages within one free()
  uint32_t seen_epoch_ = 0;
  uint64_t generation_ = 0;  // bumped by every free and clear
  bool in_group_ = false;
  std::vector<int32_t> group_slots_;
};

// page_size == 1: slots are handed out one by one.
class TokenToKVPoolAllocator final : public BaseTokenToKVPoolAllocator {
 public:
  explicit TokenToKVPoolAllocator(int64_t size) : BaseTokenToKVPoolAllocator(size, 1) {}

  Status alloc(int64_t n, std::vector<int32_t>& out) override;
  Status alloc_extend(std::span<const int32_t> prefix_lens, std::span<const int32_t> seq_lens,
                      std::span<const int32_t> last_loc, std::vector<int32_t>& out) override;
  Status alloc_decode(std::span<const int32_t> seq_lens, std::span<const int32_t> last_loc,
                      std::vector<int32_t>& out) override;
};

// page_size > 1: whole pages, sequences grown in place within their last page.
class PagedTokenToKVPoolAllocator final : public BaseTokenToKVPoolAllocator {
 public:
  PagedTokenToKVPoolAllocator(int64_t size, int32_t page_size);

  Status alloc(int64_t n, std::vector<int32_t>& out) override;
  Status alloc_extend(std::span<const int32_t> prefix_lens, std::span<const int32_t> seq_lens,
                      std::span<const int32_t> last_loc, std::vector<int32_t>& out) override;
  Status alloc_decode(std::span<const int32_t> seq_lens, std::span<const int32_t> last_loc,
                      std::vector<int32_t>& out) override;
};

}  // namespace kvserve::mem

namespace kvserve::mem {

// TokenToKVPoolAllocator for page_size 1, PagedTokenToKVPoolAllocator otherwise.
std::unique_ptr<BaseTokenToKVPoolAllocator> make_allocator(int64_t size, int32_t page_size);

}  // namespace kvserve::mem

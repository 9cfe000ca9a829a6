#include "kvserve/mem/allocator.h"

#include <bit>

#include "kvserve/mem/common.h"

namespace kvserve::mem {
namespace {

int32_t log2_if_power_of_two(int32_t n) {
  if (n <= 0 || (n & (n - 1)) != 0) return -1;
  return std::countr_zero(static_cast<uint32_t>(n));
}

}  // namespace

// --- BaseTokenToKVPoolAllocator --------------------------------------------------------------

BaseTokenToKVPoolAllocator::BaseTokenToKVPoolAllocator(int64_t size, int32_t page_size)
    : page_size_(page_size),
      num_pages_(size / std::max(page_size, 1)),
      page_shift_(log2_if_power_of_two(page_size)) {
  KV_CHECK_GE(page_size, 1);
  KV_CHECK_GE(num_pages_, 1, "a KV pool of {} slots holds no page of {}", size, page_size);
  // Slots are int32 everywhere (req_to_token is an int32 table).
  KV_CHECK_LE((num_pages_ + 1) * page_size, int64_t{INT32_MAX}, "KV pool too large for int32");
  free_.resize(num_pages_);
  page_free_.resize(num_pages_ + 1);
  seen_mark_.resize(num_pages_ + 1);
  clear();
}

void BaseTokenToKVPoolAllocator::clear() {
  KV_CHECK(!in_group_, "clear() inside a free group");
  // Stack order so that page 1 is handed out first, then 2, ...
  for (int64_t i = 0; i < num_pages_; ++i)
    free_[i] = static_cast<int32_t>(num_pages_ - i);
  free_top_ = num_pages_;
  std::fill(page_free_.begin(), page_free_.end(), uint8_t{1});
  page_free_[0] = 0;
  ++generation_;
}

void BaseTokenToKVPoolAllocator::pop_pages(int64_t n, int32_t* out) {
  KV_CHECK_LE(n, free_top_);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t page = free_[--free_top_];
    page_free_[page] = 0;
    out[i] = page;
  }
}

void BaseTokenToKVPoolAllocator::check_allocated_slot(int32_t slot) const {
  const int64_t page = page_of(slot);
  KV_CHECK(slot >= page_size_ && page <= num_pages_, "slot {} is outside the pool (page size {})",
           slot, page_size_);
  KV_CHECK(!page_free_[page], "slot {} is in free page {}", slot, page);
}

void BaseTokenToKVPoolAllocator::free(std::span<const int32_t> slots) {
  if (slots.empty()) return;
  if (in_group_) {
    group_slots_.insert(group_slots_.end(), slots.begin(), slots.end());
    return;
  }
  free_now(slots);
}

void BaseTokenToKVPoolAllocator::free_now(std::span<const int32_t> slots) {
  if (++seen_epoch_ == 0) {  // wrapped: forget every old mark
    std::fill(seen_mark_.begin(), seen_mark_.end(), 0u);
    seen_epoch_ = 1;
  }
  for (const int32_t slot : slots) {
    const int64_t page = page_of(slot);
    KV_CHECK(slot >= page_size_ && page <= num_pages_,
             "free of slot {}: outside the pool or in reserved page 0 (page size {})", slot,
             page_size_);
    if (seen_mark_[page] == seen_epoch_) continue;  // another slot of a page freed in this call
    seen_mark_[page] = seen_epoch_;
    KV_CHECK(!page_free_[page], "double free: page {} (slot {}) is already free", page, slot);
    page_free_[page] = 1;
    free_[free_top_++] = static_cast<int32_t>(page);
  }
  ++generation_;
}

void BaseTokenToKVPoolAllocator::free_group_begin() {
  KV_CHECK(!in_group_, "free groups do not nest");
  in_group_ = true;
  group_slots_.clear();
}

void BaseTokenToKVPoolAllocator::free_group_end() {
  KV_CHECK(in_group_, "free_group_end() without free_group_begin()");
  in_group_ = false;
  if (!group_slots_.empty()) free_now(group_slots_);
  group_slots_.clear();
}

void BaseTokenToKVPoolAllocator::restore_state(const AllocatorState& state) {
  KV_CHECK_EQ(state.generation, generation_,
              "restore_state() after a free or clear since backup_state(): those pages would leak");
  KV_CHECK_LE(free_top_, state.free_top);
  for (int64_t i = free_top_; i < state.free_top; ++i)
    page_free_[free_[i]] = 1;
  free_top_ = state.free_top;
}

int64_t BaseTokenToKVPoolAllocator::extend_slots_needed(std::span<const int32_t> prefix_lens,
                                                        std::span<const int32_t> seq_lens) const {
  KV_CHECK_EQ(prefix_lens.size(), seq_lens.size());
  int64_t pages = 0;
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    pages += ceil_div(seq_lens[i], page_size_) - ceil_div(prefix_lens[i], page_size_);
  }
  return pages * page_size_;
}

int64_t BaseTokenToKVPoolAllocator::decode_slots_needed(std::span<const int32_t> seq_lens) const {
  int64_t pages = 0;
  for (const int32_t s : seq_lens)
    pages += offset_in_page(s - 1) == 0;
  return pages * page_size_;
}

// --- TokenToKVPoolAllocator ------------------------------------------------------------------

Status TokenToKVPoolAllocator::alloc(int64_t n, std::vector<int32_t>& out) {
  KV_CHECK_GE(n, 0);
  if (n > available_size()) {
    return out_of_memory("need {} KV slots, {} available", n, available_size());
  }
  out.resize(n);
  pop_pages(n, out.data());
  return Status::ok();
}

Status TokenToKVPoolAllocator::alloc_extend(std::span<const int32_t> prefix_lens,
                                            std::span<const int32_t> seq_lens,
                                            std::span<const int32_t> last_loc,
                                            std::vector<int32_t>& out) {
  KV_CHECK(prefix_lens.size() == seq_lens.size() && last_loc.size() == seq_lens.size());
  int64_t total = 0;
  for (size_t i = 0; i < seq_lens.size(); ++i) {
    KV_CHECK(prefix_lens[i] >= 0 && prefix_lens[i] <= seq_lens[i], "request {}: prefix {} seq {}",
             i, prefix_lens[i], seq_lens[i]);
    total += seq_lens[i] - prefix_lens[i];
  }
  return alloc(total, out);
}

Status TokenToKVPoolAllocator::alloc_decode(std::span<const int32_t> seq_lens,
                                            std::span<const int32_t> last_loc,
                                            std::vector<int32_t>& out) {
  KV_CHECK_EQ(seq_lens.size(), last_loc.size());
  return alloc(static_cast<int64_t>(seq_lens.size()), out);
}

// --- PagedTokenToKVPoolAllocator -------------------------------------------------------------

PagedTokenToKVPoolAllocator::PagedTokenToKVPoolAllocator(int64_t size, int32_t page_size)
    : BaseTokenToKVPoolAllocator(size, page_size) {
  KV_CHECK_GT(page_size, 1, "use TokenToKVPoolAllocator for page size 1");
}

Status PagedTokenToKVPoolAllocator::alloc(int64_t n, std::vector<int32_t>& out) {
  KV_CHECK(n >= 0 && n % page_size_ == 0, "alloc({}) is not a whole number of pages of {}", n,
           page_size_);
  if (n > available_size()) {
    return out_of_memory("need {} KV slots, {} available", n, available_size());
  }
  const int64_t pages = n / page_size_;
  out.resize(n);
  // Pop the page ids into the tail of `out`, then expand each in place from the front.
  int32_t* page_ids = out.data() + (n - pages);
  pop_pages(pages, page_ids);
  for (int64_t p = 0; p < pages; ++p) {
    const int32_t base = page_ids[p] * page_size_;
    for (int32_t k = 0; k < page_size_; ++k)
      out[p * page_size_ + k] = base + k;
  }
  return Status::ok();
}

Status PagedTokenToKVPoolAllocator::alloc_extend(std::span<const int32_t> prefix_lens,
                                                 std::span<const int32_t> seq_lens,
                                                 std::span<const int32_t> last_loc,
                                                 std::vector<int32_t>& out) {
  const size_t bs = seq_lens.size();
  KV_CHECK(prefix_lens.size() == bs && last_loc.size() == bs);
  const int64_t ps = page_size_;
  int64_t total_tokens = 0;
  for (size_t i = 0; i < bs; ++i) {
    const int32_t pre = prefix_lens[i];
    KV_CHECK(pre >= 0 && pre <= seq_lens[i], "request {}: prefix {} seq {}", i, pre, seq_lens[i]);
    if (pre > 0) {
      // The prefix's last slot must sit where position pre - 1 belongs within its page.
      check_allocated_slot(last_loc[i]);
      KV_CHECK_EQ((last_loc[i] + 1) % ps, pre % ps, "request {}: last_loc {} for prefix {}", i,
                  last_loc[i], pre);
    }
    total_tokens += seq_lens[i] - pre;
  }
  const int64_t needed = extend_slots_needed(prefix_lens, seq_lens);
  if (needed > available_size()) {
    return out_of_memory("need {} KV slots ({} pages), {} available", needed, needed / ps,
                         available_size());
  }

  out.resize(total_tokens);
  int64_t o = 0;
  int32_t pages[1];
  for (size_t i = 0; i < bs; ++i) {
    const int64_t pre = prefix_lens[i];
    const int64_t seq = seq_lens[i];
    // Part 1: the rest of the prefix's partial last page, right after last_loc.
    const int64_t num1 = std::min(seq, ceil_align(pre, ps)) - pre;
    for (int64_t k = 0; k < num1; ++k)
      out[o++] = static_cast<int32_t>(last_loc[i] + 1 + k);
    // Parts 2 and 3: whole new pages, then a trailing partial page.
    for (int64_t pos = pre + num1; pos < seq; pos += ps) {
      pop_pages(1, pages);
      const int64_t n = std::min<int64_t>(ps, seq - pos);
      for (int64_t k = 0; k < n; ++k)
        out[o++] = static_cast<int32_t>(pages[0] * ps + k);
    }
  }
  KV_CHECK_EQ(o, total_tokens);
  return Status::ok();
}

Status PagedTokenToKVPoolAllocator::alloc_decode(std::span<const int32_t> seq_lens,
                                                 std::span<const int32_t> last_loc,
                                                 std::vector<int32_t>& out) {
  const size_t bs = seq_lens.size();
  KV_CHECK_EQ(last_loc.size(), bs);
  const int64_t needed = decode_slots_needed(seq_lens);
  if (needed > available_size()) {
    return out_of_memory("decode needs {} KV slots ({} pages), {} available", needed,
                         needed / page_size_, available_size());
  }
  out.resize(bs);
  int32_t page[1];
  for (size_t i = 0; i < bs; ++i) {
    const int32_t seq = seq_lens[i];
    KV_CHECK_GE(seq, 1);
    const int64_t offset = offset_in_page(seq - 1);
    if (offset == 0) {
      pop_pages(1, page);
      out[i] = page[0] * page_size_;
    } else {
      // Position seq - 1 continues the page of position seq - 2, right after last_loc.
      check_allocated_slot(last_loc[i]);
      KV_CHECK_EQ(offset_in_page(last_loc[i] + 1), offset, "request {}: last_loc {} for length {}",
                  i, last_loc[i], seq);
      out[i] = last_loc[i] + 1;
    }
  }
  return Status::ok();
}

std::unique_ptr<BaseTokenToKVPoolAllocator> make_allocator(int64_t size, int32_t page_size) {
  if (page_size == 1) return std::make_unique<TokenToKVPoolAllocator>(size);
  return std::make_unique<PagedTokenToKVPoolAllocator>(size, page_size);
}

}  // namespace kvserve::mem

// ReqToTokenPool: the request-to-token table (seed 000; sglang-notes §1.1).
//
// req_to_token[row][pos] is the KV slot holding position `pos` of the request living in `row`.
// The table is token-granular whatever the page size: pages only change how slots are handed out
// and how attention backends turn a row into a page table. Row 0 is the padding row: padded batch
// entries read it, so it is never handed out. Host metadata only, and authoritative: the scheduler
// and the prefix cache read rows here. Device platforms keep a mirror of the table in device memory
// (device_req_to_token.h) that forwards write and attention kernels read; take_written tells the
// mirror which positions the host rewrote outside a forward.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::mem {

class ReqToTokenPool {
 public:
  // `size` allocatable rows (plus padding row 0), each `max_context_len` positions.
  ReqToTokenPool(int32_t size, int32_t max_context_len);

  int32_t size() const { return size_; }
  int32_t max_context_len() const { return max_context_len_; }
  int32_t available_size() const { return static_cast<int32_t>(free_rows_.size()); }

  // `n` rows into `rows`, or kOutOfMemory with nothing allocated.
  Status alloc(int32_t n, std::vector<int32_t>& rows);
  Result<int32_t> alloc_one();
  // A row that is not allocated (or row 0) is a bug.
  void free(int32_t row);
  bool is_allocated(int32_t row) const { return row > 0 && row <= size_ && allocated_[row]; }

  // row[start, start + slots.size()) = slots.
  void write(int32_t row, int32_t start, std::span<const int32_t> slots);
  void write_one(int32_t row, int32_t pos, int32_t slot);
  std::span<const int32_t> row(int32_t row) const;
  std::span<const int32_t> row(int32_t row, int32_t start, int32_t len) const;
  int32_t at(int32_t row, int32_t pos) const;
  // The whole table, [size + 1, max_context_len], row-major.
  const int32_t* data() const { return table_.get(); }

  // Positions [begin, end) of a row written since the last take_written of that row (empty:
  // begin == end). A forward's mirror write takes its rows' ranges: an extend rewrites its whole
  // prefix anyway, a decode step also rewrites what the host changed below its new position
  // (cache_unfinished_req pointing a row at the tree's slots, for instance).
  struct WrittenRange {
    int32_t begin = 0;
    int32_t end = 0;
    bool empty() const { return begin >= end; }
  };
  WrittenRange take_written(int32_t row);

  // Every row free again (contents are left as they are: rows are rewritten before use).
  void clear();
  // The allocated rows, for the invariant checker.
  std::vector<int32_t> allocated_rows() const;

 private:
  struct FreeDeleter {
    void operator()(int32_t* p) const;
  };

  int32_t size_;
  int32_t max_context_len_;
  // calloc'ed: untouched rows cost no physical memory.
  std::unique_ptr<int32_t, FreeDeleter> table_;
  std::vector<int32_t> free_rows_;  // stack; row 1 is on top after clear()
  std::vector<uint8_t> allocated_;
  std::vector<WrittenRange> written_;  // [size + 1], for take_written
};

}  // namespace kvserve::mem

#include "kvserve/mem/req_to_token_pool.h"

#include <algorithm>
#include <cstdlib>
#include <new>
#include <utility>

namespace kvserve::mem {

void ReqToTokenPool::FreeDeleter::operator()(int32_t* p) const {
  std::free(p);
}

ReqToTokenPool::ReqToTokenPool(int32_t size, int32_t max_context_len)
    : size_(size), max_context_len_(max_context_len) {
  KV_CHECK_GE(size, 1);
  KV_CHECK_GE(max_context_len, 1);
  const size_t n = static_cast<size_t>(size + 1) * static_cast<size_t>(max_context_len);
  table_.reset(static_cast<int32_t*>(std::calloc(n, sizeof(int32_t))));
  if (!table_) throw std::bad_alloc();
  allocated_.resize(size + 1);
  written_.resize(size + 1);
  clear();
}

void ReqToTokenPool::clear() {
  free_rows_.resize(size_);
  for (int32_t i = 0; i < size_; ++i)
    free_rows_[i] = size_ - i;
  std::fill(allocated_.begin(), allocated_.end(), uint8_t{0});
}

Status ReqToTokenPool::alloc(int32_t n, std::vector<int32_t>& rows) {
  KV_CHECK_GE(n, 0);
  if (n > available_size()) {
    return out_of_memory("need {} request rows, {} free (max_running_requests {})", n,
                         available_size(), size_);
  }
  rows.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    rows[i] = free_rows_.back();
    free_rows_.pop_back();
    allocated_[rows[i]] = 1;
  }
  return Status::ok();
}

Result<int32_t> ReqToTokenPool::alloc_one() {
  if (free_rows_.empty()) {
    return out_of_memory("no free request row (max_running_requests {})", size_);
  }
  const int32_t row = free_rows_.back();
  free_rows_.pop_back();
  allocated_[row] = 1;
  return row;
}

void ReqToTokenPool::free(int32_t row) {
  KV_CHECK(row > 0 && row <= size_, "free of row {}: outside 1..{}", row, size_);
  KV_CHECK(allocated_[row], "double free of row {}", row);
  allocated_[row] = 0;
  free_rows_.push_back(row);
}

void ReqToTokenPool::write(int32_t row, int32_t start, std::span<const int32_t> slots) {
  KV_CHECK(is_allocated(row), "write to row {} which is not allocated", row);
  KV_CHECK(start >= 0 && start + static_cast<int64_t>(slots.size()) <= max_context_len_,
           "write [{}, {}) past max_context_len {}", start, start + slots.size(), max_context_len_);
  std::copy(slots.begin(), slots.end(),
            table_.get() + static_cast<size_t>(row) * max_context_len_ + start);
  if (slots.empty()) return;
  const auto end = static_cast<int32_t>(start + static_cast<int64_t>(slots.size()));
  WrittenRange& w = written_[row];
  w = w.empty() ? WrittenRange{start, end}
                : WrittenRange{std::min(w.begin, start), std::max(w.end, end)};
}

ReqToTokenPool::WrittenRange ReqToTokenPool::take_written(int32_t row) {
  KV_CHECK(row >= 0 && row <= size_, "row {} outside 0..{}", row, size_);
  return std::exchange(written_[row], WrittenRange{});
}

void ReqToTokenPool::write_one(int32_t row, int32_t pos, int32_t slot) {
  write(row, pos, std::span<const int32_t>(&slot, 1));
}

std::span<const int32_t> ReqToTokenPool::row(int32_t row) const {
  KV_CHECK(row >= 0 && row <= size_, "row {} outside 0..{}", row, size_);
  return {table_.get() + static_cast<size_t>(row) * max_context_len_,
          static_cast<size_t>(max_context_len_)};
}

std::span<const int32_t> ReqToTokenPool::row(int32_t r, int32_t start, int32_t len) const {
  KV_CHECK(start >= 0 && len >= 0 && start + len <= max_context_len_, "row slice [{}, {})", start,
           start + len);
  return row(r).subspan(start, len);
}

int32_t ReqToTokenPool::at(int32_t r, int32_t pos) const {
  KV_CHECK(pos >= 0 && pos < max_context_len_, "position {} outside the row", pos);
  return row(r)[pos];
}

std::vector<int32_t> ReqToTokenPool::allocated_rows() const {
  std::vector<int32_t> rows;
  for (int32_t r = 1; r <= size_; ++r) {
    if (allocated_[r]) rows.push_back(r);
  }
  return rows;
}

}  // namespace kvserve::mem

#include "kvserve/platform/device_arena.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <limits>

#include "kvserve/core/check.h"

namespace kvserve::platform {
namespace {

// "1234 bytes" below a KiB, else exact bytes and a readable size: the exact count keeps messages
// comparable with a request, the readable one makes a log line scannable.
std::string bytes_text(size_t bytes) {
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  constexpr double kMiB = 1024.0 * 1024.0;
  if (bytes < (size_t{1} << 30)) {
    return fmt::format("{} bytes ({:.1f} MiB)", bytes, static_cast<double>(bytes) / kMiB);
  }
  return fmt::format("{} bytes ({:.2f} GiB)", bytes, static_cast<double>(bytes) / (kMiB * 1024.0));
}

}  // namespace

DeviceArena::DeviceArena(uintptr_t base, size_t size)
    : base_(base), size_(size / kAlignment * kAlignment) {
  KV_CHECK(base % kAlignment == 0, "arena base {:#x} is not {}-byte aligned", base, kAlignment);
  KV_CHECK(size_ == 0 || base <= std::numeric_limits<uintptr_t>::max() - size_,
           "arena [{:#x}, +{}) wraps around the address space", base, size_);
  if (size_ > 0) insert_free(base_, size_);
}

void DeviceArena::insert_free(uintptr_t address, size_t bytes) {
  free_by_address_.emplace(address, bytes);
  free_by_size_.emplace(bytes, address);
}

void DeviceArena::erase_free(std::map<uintptr_t, size_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_address_.erase(it);
}

Result<uintptr_t> DeviceArena::allocate(size_t bytes) {
  const size_t request = std::max<size_t>(bytes, 1);
  // Rounded up to the alignment without overflowing: a request this large can never fit.
  const size_t rounded = request > std::numeric_limits<size_t>::max() - (kAlignment - 1)
                             ? 0
                             : (request + kAlignment - 1) / kAlignment * kAlignment;
  // The smallest free block that fits; among equal sizes the lowest address (the set's order).
  const auto fit = rounded == 0 ? free_by_size_.end() : free_by_size_.lower_bound({rounded, 0});
  if (fit == free_by_size_.end()) {
    const ArenaStats s = stats();
    return out_of_memory(
        "device pool: cannot allocate {}: {} free of {}, largest free block {} ({} free blocks, "
        "{} in use)",
        bytes_text(bytes), bytes_text(s.free_bytes), bytes_text(s.size),
        bytes_text(s.largest_free_block), s.free_blocks, s.blocks_in_use);
  }
  const auto [block_bytes, address] = *fit;
  erase_free(free_by_address_.find(address));
  // The remainder stays free above the block: both ends stay aligned because both sizes are
  // multiples of the alignment.
  if (block_bytes > rounded) insert_free(address + rounded, block_bytes - rounded);
  used_.emplace(address, rounded);
  bytes_in_use_ += rounded;
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  return address;
}

void DeviceArena::deallocate(uintptr_t address) {
  const auto it = used_.find(address);
  KV_CHECK(it != used_.end(),
           "device pool: {:#x} is not a live block of [{:#x}, +{}) (a double free, or a pointer "
           "the pool did not hand out)",
           address, base_, size_);
  const size_t block_bytes = it->second;
  used_.erase(it);
  bytes_in_use_ -= block_bytes;

  // Merge with the free block that ends where this one starts and with the one that starts where
  // it ends: free neighbours never stay apart, so free_blocks counts real fragments.
  uintptr_t start = address;
  size_t bytes = block_bytes;
  const auto next = free_by_address_.lower_bound(address);
  if (next != free_by_address_.end() && next->first == address + block_bytes) {
    bytes += next->second;
    erase_free(next);
  }
  const auto after = free_by_address_.lower_bound(address);
  if (after != free_by_address_.begin()) {
    const auto prev = std::prev(after);
    if (prev->first + prev->second == address) {
      start = prev->first;
      bytes += prev->second;
      erase_free(prev);
    }
  }
  insert_free(start, bytes);
}

size_t DeviceArena::block_size(uintptr_t address) const {
  const auto it = used_.find(address);
  KV_CHECK(it != used_.end(), "device pool: {:#x} is not a live block", address);
  return it->second;
}

ArenaStats DeviceArena::stats() const {
  ArenaStats s;
  s.size = size_;
  s.bytes_in_use = bytes_in_use_;
  s.free_bytes = size_ - bytes_in_use_;
  s.largest_free_block = free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
  s.peak_bytes_in_use = peak_bytes_in_use_;
  s.blocks_in_use = used_.size();
  s.free_blocks = free_by_address_.size();
  return s;
}

std::string DeviceArena::summary() const {
  const ArenaStats s = stats();
  constexpr double kMiB = 1024.0 * 1024.0;
  return fmt::format(
      "{:.1f} MiB in use in {} blocks, {:.1f} MiB free of {:.1f} MiB (largest free block "
      "{:.1f} MiB, {} free blocks), peak {:.1f} MiB",
      static_cast<double>(s.bytes_in_use) / kMiB, s.blocks_in_use,
      static_cast<double>(s.free_bytes) / kMiB, static_cast<double>(s.size) / kMiB,
      static_cast<double>(s.largest_free_block) / kMiB, s.free_blocks,
      static_cast<double>(s.peak_bytes_in_use) / kMiB);
}

}  // namespace kvserve::platform

// Small shared definitions of the memory system.
#pragma once

#include <cstdint>

namespace kvserve::mem {

// A request that holds no req_to_token row.
inline constexpr int32_t kNoRow = -1;
// last_loc of a request with no prefix.
inline constexpr int32_t kNoSlot = -1;

constexpr int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
constexpr int64_t ceil_align(int64_t a, int64_t b) {
  return ceil_div(a, b) * b;
}
constexpr int64_t floor_align(int64_t a, int64_t b) {
  return a / b * b;
}

}  // namespace kvserve::mem

// Packed q|k|v rows (Whisper's encoder keeps each token's q, k and v side by side in one row) split
// into dense copies: what the strided-rows tests of the prefill kernel and of its float64
// reference compare against.
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve::test_support {

struct DenseQkv {
  std::vector<uint16_t> q, k, v;
};

// `packed` holds `rows` rows of q_width + 2 * kv_width elements: q, then k, then v.
inline DenseQkv split_packed_rows(const std::vector<uint16_t>& packed, int64_t rows,
                                  int64_t q_width, int64_t kv_width) {
  DenseQkv out;
  const int64_t row = q_width + 2 * kv_width;
  for (int64_t t = 0; t < rows; ++t) {
    const auto r = packed.begin() + t * row;
    out.q.insert(out.q.end(), r, r + q_width);
    out.k.insert(out.k.end(), r + q_width, r + q_width + kv_width);
    out.v.insert(out.v.end(), r + q_width + kv_width, r + row);
  }
  return out;
}

}  // namespace kvserve::test_support

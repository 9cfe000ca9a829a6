#include "support/logits_agreement.h"

#include <algorithm>
#include <cmath>

namespace kvserve::test_support {

LogitsAgreement logits_agreement(const std::vector<float>& ref, const std::vector<float>& got,
                                 int64_t vocab) {
  LogitsAgreement a;
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
    a.max_abs = std::max(a.max_abs, std::abs(d));
  }
  a.rel_l2 = std::sqrt(num / std::max(den, 1e-30));
  for (size_t r = 0; r < ref.size() / vocab; ++r) {
    const float* c = ref.data() + r * vocab;
    const float* g = got.data() + r * vocab;
    double mean = 0, sq = 0;
    int64_t top = 0, second = -1;
    for (int64_t i = 0; i < vocab; ++i) {
      mean += c[i];
      sq += double(c[i]) * c[i];
      if (c[i] > c[top]) top = i;
    }
    for (int64_t i = 0; i < vocab; ++i) {
      if (i != top && (second < 0 || c[i] > c[second])) second = i;
    }
    mean /= vocab;
    const double sd = std::sqrt(std::max(sq / vocab - mean * mean, 0.0));
    if (c[top] - c[second] > 0.05 * sd) {
      ++a.confident;
      a.confident_agree += (std::max_element(g, g + vocab) - g) == top;
    }
  }
  return a;
}

std::vector<int32_t> argmax_rows(const std::vector<float>& logits, int64_t vocab) {
  std::vector<int32_t> out;
  for (size_t r = 0; r < logits.size() / vocab; ++r) {
    const float* row = logits.data() + r * vocab;
    out.push_back(static_cast<int32_t>(std::max_element(row, row + vocab) - row));
  }
  return out;
}

}  // namespace kvserve::test_support

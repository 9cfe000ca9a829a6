// How close two runs' logits are: relative L2 over every row, the largest elementwise difference,
// and top-1 agreement on the rows where the reference is confident. Used by the GPU suites that
// compare CUDA with the CPU (model_test) and graph replays with eager forwards (cuda_graph_test).
#pragma once

#include <cstdint>
#include <vector>

namespace kvserve::test_support {

struct LogitsAgreement {
  double rel_l2 = 0;   // ||got - ref|| / ||ref|| over all rows
  double max_abs = 0;  // largest elementwise difference
  int confident = 0;   // rows whose reference top-1 leads its top-2 by more than 0.05 x logit std
  int confident_agree = 0;  // of those, rows where `got` has the same top-1
};

// `ref` and `got`: [rows, vocab] row-major.
LogitsAgreement logits_agreement(const std::vector<float>& ref, const std::vector<float>& got,
                                 int64_t vocab);

// Each row's argmax (the first on ties), [rows].
std::vector<int32_t> argmax_rows(const std::vector<float>& logits, int64_t vocab);

}  // namespace kvserve::test_support

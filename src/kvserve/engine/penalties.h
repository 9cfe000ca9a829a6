// A request's penalty set for sampling (ops::PenaltyEntry, platform/ops/sampling_params.h): the
// unique tokens of its prompt and output, each with its output count and an in-prompt flag.
//
// Kept incrementally: built once from the prompt (O(prompt)), then one O(1) update per generated
// token, so a decode step costs a copy of the request's compact entries into the batch's CSR,
// not a recount of prompt and output. Requests without penalties never build one.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "kvserve/platform/ops/sampling_params.h"

namespace kvserve::engine {

class PenaltyCounts {
 public:
  PenaltyCounts(std::span<const int32_t> prompt, std::span<const int32_t> output);
  void add_output(int32_t token);
  // Unique by token; in first-seen order.
  std::span<const ops::PenaltyEntry> entries() const { return entries_; }

 private:
  ops::PenaltyEntry& entry(int32_t token);

  std::unordered_map<int32_t, int32_t> index_;  // token -> position in entries_
  std::vector<ops::PenaltyEntry> entries_;
};

// Several rows' entries in CSR form (ops::SampleRowsParams' penalty_offsets / penalty_entries).
struct PenaltyCsr {
  std::vector<int32_t> offsets{0};  // [rows + 1]
  std::vector<ops::PenaltyEntry> entries;

  void clear() {
    offsets.assign(1, 0);
    entries.clear();
  }
  // The next row's entries (empty: a row without penalties).
  void add_row(std::span<const ops::PenaltyEntry> row);
  int64_t rows() const { return static_cast<int64_t>(offsets.size()) - 1; }
};

}  // namespace kvserve::engine

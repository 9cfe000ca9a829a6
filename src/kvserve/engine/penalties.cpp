#include "kvserve/engine/penalties.h"

#include "kvserve/core/check.h"

namespace kvserve::engine {

PenaltyCounts::PenaltyCounts(std::span<const int32_t> prompt, std::span<const int32_t> output) {
  for (const int32_t t : prompt)
    entry(t).in_prompt = 1;
  for (const int32_t t : output)
    add_output(t);
}

ops::PenaltyEntry& PenaltyCounts::entry(int32_t token) {
  const auto [it, inserted] = index_.try_emplace(token, static_cast<int32_t>(entries_.size()));
  if (inserted) entries_.push_back({.token = token, .output_count = 0, .in_prompt = 0});
  return entries_[static_cast<size_t>(it->second)];
}

void PenaltyCounts::add_output(int32_t token) {
  ++entry(token).output_count;
}

void PenaltyCsr::add_row(std::span<const ops::PenaltyEntry> row) {
  entries.insert(entries.end(), row.begin(), row.end());
  KV_CHECK(entries.size() < (size_t{1} << 31), "penalty entries over int32: {}", entries.size());
  offsets.push_back(static_cast<int32_t>(entries.size()));
}

}  // namespace kvserve::engine

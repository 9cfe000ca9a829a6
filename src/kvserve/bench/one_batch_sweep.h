// The sweep both one-batch benchmarks run (bench-one-batch on decoder-only and Whisper
// checkpoints), as SGLang's bench_one_batch does: the lists are checked, one warm-up run of the
// first (batch, input) with at most 32 output tokens, then every (batch, input, output) in
// order; a combination that does not fit is skipped with a "skipping (b, i, o) due to ..." line,
// and run k (1-based over all combinations) uses seed + k.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::bench {

struct SweepLists {
  std::vector<int32_t> batch_sizes;
  std::vector<int32_t> input_lens;
  int32_t min_input_len = 1;  // Whisper's decoder prompt may be 0 (the default start prompt)
  std::vector<int32_t> output_lens;
};

// At least one value per list, each within its minimum; the messages name the flag.
Status check_sweep_lists(const SweepLists& lists);

template <typename R>
Result<std::vector<R>> run_sweep(
    const SweepLists& lists, bool warmup, uint64_t seed,
    const std::function<std::optional<std::string>(int32_t, int32_t, int32_t)>& misfit,
    const std::function<Result<R>(int32_t, int32_t, int32_t, uint64_t)>& run_once,
    const std::function<void(std::string_view)>& log) {
  KV_RETURN_IF_ERROR(check_sweep_lists(lists));
  auto fits = [&](int32_t b, int32_t i, int32_t out) {
    if (auto why = misfit(b, i, out); why.has_value()) {
      log(fmt::format("skipping ({}, {}, {}) due to {}", b, i, out, *why));
      return false;
    }
    return true;
  };
  if (warmup) {
    log("Warmup ...");
    const int32_t b = lists.batch_sizes[0], i = lists.input_lens[0];
    const int32_t out = std::min(32, lists.output_lens[0]);
    if (fits(b, i, out)) KV_RETURN_IF_ERROR(run_once(b, i, out, seed).status());
  }
  log("Benchmark ...");
  std::vector<R> results;
  uint64_t run = 0;
  for (const int32_t b : lists.batch_sizes) {
    for (const int32_t i : lists.input_lens) {
      for (const int32_t out : lists.output_lens) {
        ++run;
        if (!fits(b, i, out)) continue;
        KV_ASSIGN_OR_RETURN(R r, run_once(b, i, out, seed + run));
        results.push_back(std::move(r));
      }
    }
  }
  return results;
}

}  // namespace kvserve::bench

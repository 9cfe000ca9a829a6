// Orders the waiting queue before each prefill (--schedule-policy; sglang-notes §5.4):
//   fcfs        arrival order (default)
//   lpm         longest cached prefix first (falls back to fcfs above 128 waiting requests)
//   lof         longest output (max_new_tokens) first
//   random      shuffled
//   dfs-weight  depth-first over the prefix tree, heavier subtrees (more waiting requests) first
// Cache-aware policies degrade to fcfs without a radix cache.
#pragma once

#include <deque>
#include <random>
#include <string_view>

#include "kvserve/engine/req.h"

namespace kvserve::engine {

enum class SchedulePolicy { kFcfs, kLpm, kLof, kRandom, kDfsWeight };

Result<SchedulePolicy> parse_schedule_policy(std::string_view name);
std::string_view schedule_policy_name(SchedulePolicy p);

// Reorders `waiting` in place. `cache` is matched (lookups only, no locks) for lpm/dfs-weight.
void apply_schedule_policy(SchedulePolicy policy, std::deque<Req*>& waiting,
                           mem::PrefixCache& cache, std::mt19937_64& rng);

}  // namespace kvserve::engine

#include "kvserve/engine/schedule_policy.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace kvserve::engine {

Result<SchedulePolicy> parse_schedule_policy(std::string_view name) {
  if (name == "fcfs") return SchedulePolicy::kFcfs;
  if (name == "lpm") return SchedulePolicy::kLpm;
  if (name == "lof") return SchedulePolicy::kLof;
  if (name == "random") return SchedulePolicy::kRandom;
  if (name == "dfs-weight") return SchedulePolicy::kDfsWeight;
  return invalid_argument(
      "--schedule-policy: unknown policy '{}' (expected fcfs, lpm, lof, random or dfs-weight)",
      name);
}

std::string_view schedule_policy_name(SchedulePolicy p) {
  switch (p) {
    case SchedulePolicy::kFcfs:
      return "fcfs";
    case SchedulePolicy::kLpm:
      return "lpm";
    case SchedulePolicy::kLof:
      return "lof";
    case SchedulePolicy::kRandom:
      return "random";
    case SchedulePolicy::kDfsWeight:
      return "dfs-weight";
  }
  return "fcfs";
}

namespace {

constexpr size_t kLpmMaxQueue = 128;  // SGLang's fallback threshold

// The prefix each request would match now and the node it ends at (no lock taken).
struct Match {
  size_t len = 0;
  const mem::CacheNode* node = nullptr;
};

Match match(mem::PrefixCache& cache, const Req& r) {
  const std::vector<int32_t> ids = r.all_ids();
  const std::span<const int32_t> key(ids.data(), ids.empty() ? 0 : ids.size() - 1);
  mem::MatchResult m = cache.match_prefix(key);
  return {m.indices.size(), m.last_node};
}

}  // namespace

void apply_schedule_policy(SchedulePolicy policy, std::deque<Req*>& waiting,
                           mem::PrefixCache& cache, std::mt19937_64& rng) {
  if ((policy == SchedulePolicy::kLpm || policy == SchedulePolicy::kDfsWeight) &&
      !cache.enabled()) {
    policy = SchedulePolicy::kFcfs;
  }
  switch (policy) {
    case SchedulePolicy::kFcfs:
      return;
    case SchedulePolicy::kRandom:
      std::shuffle(waiting.begin(), waiting.end(), rng);
      return;
    case SchedulePolicy::kLof:
      std::stable_sort(waiting.begin(), waiting.end(), [](const Req* a, const Req* b) {
        return a->sampling.max_new_tokens > b->sampling.max_new_tokens;
      });
      return;
    case SchedulePolicy::kLpm: {
      if (waiting.size() > kLpmMaxQueue) return;
      std::unordered_map<const Req*, size_t> len;
      for (const Req* r : waiting)
        len[r] = match(cache, *r).len;
      std::stable_sort(waiting.begin(), waiting.end(),
                       [&](const Req* a, const Req* b) { return len[a] > len[b]; });
      return;
    }
    case SchedulePolicy::kDfsWeight: {
      // weight(node) = waiting requests whose match ends in the node's subtree. Visit the tree
      // depth-first from the root, heavier children first, and emit a node's own requests after
      // its children (SGLang's order).
      std::map<const mem::CacheNode*, std::vector<Req*>> own;
      std::map<const mem::CacheNode*, int64_t> weight;
      std::map<const mem::CacheNode*, std::vector<const mem::CacheNode*>> children;
      const mem::CacheNode* root = nullptr;
      for (Req* r : waiting) {
        const mem::CacheNode* n = match(cache, *r).node;
        own[n].push_back(r);
        for (const mem::CacheNode* c = n; c != nullptr; c = cache.parent_of(c)) {
          const mem::CacheNode* parent = cache.parent_of(c);
          if (weight[c]++ == 0 && parent != nullptr) children[parent].push_back(c);
          if (parent == nullptr) root = c;
        }
      }
      waiting.clear();
      std::vector<std::pair<const mem::CacheNode*, bool>> stack{{root, false}};
      while (!stack.empty()) {
        auto [n, expanded] = stack.back();
        stack.pop_back();
        if (expanded) {
          for (Req* r : own[n])
            waiting.push_back(r);
          continue;
        }
        stack.push_back({n, true});
        auto& kids = children[n];
        std::stable_sort(kids.begin(), kids.end(),
                         [&](const auto* a, const auto* b) { return weight[a] < weight[b]; });
        for (const mem::CacheNode* k : kids)
          stack.push_back({k, false});  // heaviest on top
      }
      return;
    }
  }
}

}  // namespace kvserve::engine

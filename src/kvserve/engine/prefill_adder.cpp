#include "kvserve/engine/prefill_adder.h"

#include <algorithm>

#include "kvserve/mem/common.h"

namespace kvserve::engine {

int64_t remaining_output_budget(const Req& r) {
  return std::min<int64_t>(std::max(r.sampling.max_new_tokens - r.output_len(), 0),
                           kClipMaxNewTokens);
}

PrefillAdder::PrefillAdder(int32_t page_size, mem::PrefixCache& cache,
                           const mem::BaseTokenToKVPoolAllocator& allocator,
                           double running_reservation, int64_t max_prefill_tokens,
                           std::optional<int64_t> chunk_size)
    : page_size_(page_size),
      cache_(cache),
      allocator_(allocator),
      offset_(running_reservation),
      rem_input_(max_prefill_tokens),
      rem_chunk_(chunk_size) {}

int64_t PrefillAdder::rem_total() const {
  return allocator_.available_size() + cache_.evictable_size() - static_cast<int64_t>(offset_);
}

int64_t PrefillAdder::ceil_page(int64_t n) const {
  return mem::ceil_align(n, page_size_);
}

AddResult PrefillAdder::budget_state() const {
  if (rem_total() <= 0) return AddResult::kNoToken;
  if (rem_input_ <= 0 || (rem_chunk_ && *rem_chunk_ <= 0)) return AddResult::kOther;
  return AddResult::kContinue;
}

void PrefillAdder::take(Req& r, int64_t extend, bool reserve_output) {
  can_run_.push_back(&r);
  offset_ +=
      static_cast<double>(ceil_page(extend) + (reserve_output ? remaining_output_budget(r) : 0));
  rem_input_ -= extend;
  if (rem_chunk_) *rem_chunk_ -= extend;
}

AddResult PrefillAdder::add_chunked_req(Req& r) {
  const auto prefix = static_cast<int64_t>(r.kv.prefix_indices.size());
  const int64_t remaining = static_cast<int64_t>(r.all_ids().size()) - prefix;
  int64_t limit = std::min<int64_t>(rem_total(), rem_chunk_.value_or(remaining));
  int64_t extend = std::min(remaining, limit);
  if (extend < remaining) extend = mem::floor_align(prefix + extend, page_size_) - prefix;
  if (extend <= 0) return AddResult::kOther;  // no room this round; the request waits
  const std::vector<int32_t> all = r.all_ids();
  r.fill_ids.assign(all.begin(), all.begin() + prefix + extend);
  r.extend_input_len = static_cast<int32_t>(extend);
  r.chunked = extend < remaining;
  if (r.chunked) new_chunked_ = &r;
  take(r, extend, !r.chunked);
  return budget_state();
}

AddResult PrefillAdder::add_one_req(Req& r) {
  const int64_t extend = r.extend_input_len;
  const int64_t total = extend + remaining_output_budget(r);
  if (total >= rem_total()) return AddResult::kNoToken;
  if (ceil_page(extend) >= rem_input_ && !can_run_.empty()) return AddResult::kOther;

  // Lock the prefix first: it leaves the evictable pool, so re-check the total.
  cache_.inc_lock_ref(r.kv.last_node);
  if (total >= rem_total()) {
    cache_.dec_lock_ref(r.kv.last_node);
    return AddResult::kNoToken;
  }
  if (!rem_chunk_ || extend <= *rem_chunk_) {
    r.chunked = false;
    take(r, extend, true);
    return budget_state();
  }
  // Chunk it: whole pages of what the chunk budget allows.
  const auto prefix = static_cast<int64_t>(r.kv.prefix_indices.size());
  const int64_t trunc = mem::floor_align(prefix + *rem_chunk_, page_size_) - prefix;
  if (trunc <= 0) {
    cache_.dec_lock_ref(r.kv.last_node);
    return AddResult::kOther;
  }
  r.fill_ids.resize(prefix + trunc);
  r.extend_input_len = static_cast<int32_t>(trunc);
  r.chunked = true;
  new_chunked_ = &r;
  take(r, trunc, false);
  return budget_state();
}

}  // namespace kvserve::engine

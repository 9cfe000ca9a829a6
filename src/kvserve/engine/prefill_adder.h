// PrefillAdder: which waiting requests the next prefill batch takes (sglang-notes §5.3).
//
// Budgets, in tokens:
//   total:  available + evictable - (reservations of running decodes, scaled by new_token_ratio,
//           + what this batch admitted: its input pages and, unless chunked, its output budget)
//   input:  --max-prefill-tokens per batch (never rejects the first request)
//   chunk:  --chunked-prefill-size per batch; a request that does not fit is truncated to whole
//           pages and becomes the (single) chunked request.
// A request's matched prefix is locked when it is added, so eviction cannot take it.
#pragma once

#include <optional>
#include <vector>

#include "kvserve/engine/req.h"
#include "kvserve/mem/allocator.h"

namespace kvserve::engine {

enum class AddResult { kContinue, kNoToken, kOther };

// Output tokens a request still reserves (capped like SGLang's CLIP_MAX_NEW_TOKENS_ESTIMATION).
inline constexpr int64_t kClipMaxNewTokens = 4096;
int64_t remaining_output_budget(const Req& r);

class PrefillAdder {
 public:
  PrefillAdder(int32_t page_size, mem::PrefixCache& cache,
               const mem::BaseTokenToKVPoolAllocator& allocator, double running_reservation,
               int64_t max_prefill_tokens, std::optional<int64_t> chunk_size);

  // Continues the chunked request (its prefix_indices hold every computed token).
  AddResult add_chunked_req(Req& r);
  // A waiting request whose fill_ids / prefix / extend_input_len are set for this round.
  AddResult add_one_req(Req& r);

  const std::vector<Req*>& can_run() const { return can_run_; }
  Req* new_chunked_req() const { return new_chunked_; }

 private:
  int64_t rem_total() const;
  AddResult budget_state() const;
  int64_t ceil_page(int64_t n) const;
  void take(Req& r, int64_t extend, bool reserve_output);

  const int32_t page_size_;
  mem::PrefixCache& cache_;
  const mem::BaseTokenToKVPoolAllocator& allocator_;
  double offset_;  // tokens promised beyond what is allocated now
  int64_t rem_input_;
  std::optional<int64_t> rem_chunk_;
  std::vector<Req*> can_run_;
  Req* new_chunked_ = nullptr;
};

}  // namespace kvserve::engine

#include "kvserve/disagg/staging_extents.h"

#include "kvserve/core/check.h"

namespace kvserve::disagg {

int64_t StagingExtents::allocate(int64_t tokens) {
  KV_CHECK(tokens > 0 && tokens <= capacity_, "staging extent of {} tokens in {}", tokens,
           capacity_);
  int64_t begin = 0;
  for (const auto& [at, len] : taken_) {
    if (at - begin >= tokens) break;
    begin = at + len;
  }
  if (capacity_ - begin < tokens) return -1;
  taken_.emplace(begin, tokens);
  used_ += tokens;
  return begin;
}

void StagingExtents::free(int64_t begin) {
  const auto it = taken_.find(begin);
  KV_CHECK(it != taken_.end(), "freeing staging extent {} that is not taken", begin);
  used_ -= it->second;
  taken_.erase(it);
}

}  // namespace kvserve::disagg

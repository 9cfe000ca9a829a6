// StagingExtents: the decode side's staging region cut into per-request extents of whole tokens
// (first fit, lowest offset first). A request holds its extent from its destination pages' message
// until no write of its prefill can still land (the same moment its KV pages may be freed).
#pragma once

#include <cstdint>
#include <map>

namespace kvserve::disagg {

class StagingExtents {
 public:
  explicit StagingExtents(int64_t capacity_tokens) : capacity_(capacity_tokens) {}

  // The first token of a free extent of `tokens` tokens (now taken), or -1 when no such extent
  // is free now. tokens must be in [1, capacity()].
  int64_t allocate(int64_t tokens);
  // Gives back the extent that starts at `begin` (one allocate returned it).
  void free(int64_t begin);

  int64_t capacity() const { return capacity_; }
  int64_t used() const { return used_; }

 private:
  int64_t capacity_;
  int64_t used_ = 0;
  std::map<int64_t, int64_t> taken_;  // begin -> tokens
};

}  // namespace kvserve::disagg

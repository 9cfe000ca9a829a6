#include "kvserve/mem/chunk_cache.h"

namespace kvserve::mem {

void ChunkCache::cache_finished_req(KvReqState& req, std::span<const int32_t> /*token_ids*/,
                                    bool /*insert*/) {
  KV_CHECK_NE(req.row, kNoRow, "cache_finished_req of a request without a row");
  KV_CHECK_EQ(req.cache_protected_len, 0, "ChunkCache never protects a prefix");
  allocator_.free(req_to_token_.row(req.row, 0, req.kv_allocated_len));
  req_to_token_.free(req.row);
  req = KvReqState{};
}

void ChunkCache::cache_unfinished_req(KvReqState& req, std::span<const int32_t> fill_ids) {
  KV_CHECK_NE(req.row, kNoRow, "cache_unfinished_req of a request without a row");
  const auto len = static_cast<int32_t>(fill_ids.size());
  KV_CHECK_LE(len, req.kv_committed_len, "fill_ids longer than the committed KV");
  const auto slots = req_to_token_.row(req.row, 0, len);
  req.prefix_indices.assign(slots.begin(), slots.end());
}

}  // namespace kvserve::mem

#include "kvserve/mem/allocation.h"

namespace kvserve::mem {

void evict_from_tree_cache(const KvMemory& mem, int64_t num_slots) {
  const int64_t short_by = num_slots - mem.allocator.available_size();
  if (short_by > 0) mem.tree_cache.evict(short_by);
}

Status alloc_for_extend(const KvMemory& mem, std::span<KvReqState* const> reqs,
                        std::span<const int32_t> seq_lens, std::vector<int32_t>& out_cache_loc) {
  const size_t bs = reqs.size();
  KV_CHECK_EQ(seq_lens.size(), bs);
  std::vector<int32_t> prefix_lens(bs);
  std::vector<int32_t> last_loc(bs);
  int32_t rows_needed = 0;
  for (size_t i = 0; i < bs; ++i) {
    const KvReqState& r = *reqs[i];
    prefix_lens[i] = static_cast<int32_t>(r.prefix_indices.size());
    KV_CHECK_LE(prefix_lens[i], seq_lens[i], "request {}: prefix longer than the sequence", i);
    KV_CHECK_LE(seq_lens[i], mem.req_to_token.max_context_len(), "request {}", i);
    last_loc[i] = r.prefix_indices.empty() ? kNoSlot : r.prefix_indices.back();
    rows_needed += r.row == kNoRow;
  }

  std::vector<int32_t> new_rows;
  KV_RETURN_IF_ERROR(mem.req_to_token.alloc(rows_needed, new_rows));
  evict_from_tree_cache(mem, mem.allocator.extend_slots_needed(prefix_lens, seq_lens));
  if (Status s = mem.allocator.alloc_extend(prefix_lens, seq_lens, last_loc, out_cache_loc);
      !s.is_ok()) {
    for (const int32_t row : new_rows)
      mem.req_to_token.free(row);
    return s;
  }

  std::vector<int32_t> rows(bs);
  std::vector<std::span<const int32_t>> prefixes(bs);
  size_t next_new_row = 0;
  for (size_t i = 0; i < bs; ++i) {
    KvReqState& r = *reqs[i];
    if (r.row == kNoRow) r.row = new_rows[next_new_row++];
    rows[i] = r.row;
    prefixes[i] = r.prefix_indices;
  }
  write_cache_indices(mem.req_to_token, rows, prefixes, seq_lens, out_cache_loc);
  for (size_t i = 0; i < bs; ++i) {
    reqs[i]->kv_allocated_len = seq_lens[i];
    reqs[i]->kv_committed_len = seq_lens[i];
  }
  return Status::ok();
}

Status alloc_for_decode(const KvMemory& mem, std::span<KvReqState* const> reqs,
                        std::vector<int32_t>& out_cache_loc) {
  const size_t bs = reqs.size();
  std::vector<int32_t> seq_lens(bs);
  std::vector<int32_t> last_loc(bs);
  for (size_t i = 0; i < bs; ++i) {
    const KvReqState& r = *reqs[i];
    KV_CHECK(r.row != kNoRow && r.kv_allocated_len >= 1, "request {}: decode without a prefill", i);
    KV_CHECK_LT(r.kv_allocated_len, mem.req_to_token.max_context_len(), "request {}", i);
    seq_lens[i] = r.kv_allocated_len + 1;
    last_loc[i] = mem.req_to_token.at(r.row, r.kv_allocated_len - 1);
  }
  evict_from_tree_cache(mem, mem.allocator.decode_slots_needed(seq_lens));
  KV_RETURN_IF_ERROR(mem.allocator.alloc_decode(seq_lens, last_loc, out_cache_loc));
  for (size_t i = 0; i < bs; ++i) {
    KvReqState& r = *reqs[i];
    mem.req_to_token.write_one(r.row, r.kv_allocated_len, out_cache_loc[i]);
    ++r.kv_allocated_len;
    ++r.kv_committed_len;
  }
  return Status::ok();
}

void write_cache_indices(ReqToTokenPool& req_to_token, std::span<const int32_t> rows,
                         std::span<const std::span<const int32_t>> prefixes,
                         std::span<const int32_t> seq_lens,
                         std::span<const int32_t> out_cache_loc) {
  KV_CHECK(prefixes.size() == rows.size() && seq_lens.size() == rows.size());
  size_t pt = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const auto prefix_len = static_cast<int32_t>(prefixes[i].size());
    const size_t extend_len = static_cast<size_t>(seq_lens[i] - prefix_len);
    KV_CHECK_LE(pt + extend_len, out_cache_loc.size(), "out_cache_loc too short");
    req_to_token.write(rows[i], 0, prefixes[i]);
    req_to_token.write(rows[i], prefix_len, out_cache_loc.subspan(pt, extend_len));
    pt += extend_len;
  }
  KV_CHECK_EQ(pt, out_cache_loc.size(), "out_cache_loc has slots no request took");
}

void release_kv_cache(const KvMemory& mem, KvReqState& req, std::span<const int32_t> token_ids,
                      bool insert) {
  mem.tree_cache.cache_finished_req(req, token_ids, insert);
}

}  // namespace kvserve::mem

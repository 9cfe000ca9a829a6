#include "kvserve/mem/forward_batch.h"

#include <algorithm>

namespace kvserve::mem {

int64_t batch_ints_size(const ForwardBatch& batch) {
  return 2 * int64_t{batch.num_tokens()} + static_cast<int64_t>(batch.logits_indices.size());
}

void pack_batch_ints(const ForwardBatch& batch, int32_t* host) {
  KV_CHECK_EQ(batch.positions.size(), batch.input_ids.size(), "one position per token");
  const int64_t n = batch.num_tokens();
  std::copy(batch.input_ids.begin(), batch.input_ids.end(), host);
  std::copy(batch.positions.begin(), batch.positions.end(), host + n);
  std::copy(batch.logits_indices.begin(), batch.logits_indices.end(), host + 2 * n);
}

DeviceBatchInts batch_ints_at(const ForwardBatch& batch, const int32_t* device) {
  const int64_t n = batch.num_tokens();
  return {.input_ids = device, .positions = device + n, .logits_indices = device + 2 * n};
}

DeviceBatchInts upload_batch_ints(platform::Platform& platform, const ForwardBatch& batch,
                                  std::vector<int32_t>& host, int32_t* device) {
  host.resize(static_cast<size_t>(batch_ints_size(batch)));
  pack_batch_ints(batch, host.data());
  platform.copy(device, host.data(), host.size() * sizeof(int32_t),
                platform::CopyKind::kHostToDevice);
  return batch_ints_at(batch, device);
}

ForwardBatch make_forward_batch(ForwardMode mode, const std::vector<ForwardRequest>& requests,
                                std::vector<int32_t> out_cache_loc,
                                mem::ReqToTokenPool& req_to_token) {
  ForwardBatch b;
  b.mode = mode;
  b.req_to_token = &req_to_token;
  const bool any_kv_start = std::any_of(requests.begin(), requests.end(),
                                        [](const ForwardRequest& r) { return r.kv_start != 0; });
  ForwardBatch::RowRewrites& rw = b.row_rewrites;
  rw.indptr.push_back(0);
  int32_t start = 0;
  for (const ForwardRequest& r : requests) {
    if (any_kv_start) b.self_kv_start.push_back(r.kv_start);
    // The mirror's copy of the host row below the first new position (row coordinates).
    const int32_t first_new = r.kv_start + r.prefix_len;
    const ReqToTokenPool::WrittenRange written = req_to_token.take_written(r.row);
    int32_t begin = 0;
    int32_t end = first_new;
    if (mode == ForwardMode::kDecode) {
      begin = written.begin;
      end = std::max(begin, written.empty() ? begin : std::min(written.end, first_new));
    }
    const auto part = req_to_token.row(r.row, begin, end - begin);
    rw.start.push_back(begin);
    rw.slots.insert(rw.slots.end(), part.begin(), part.end());
    rw.indptr.push_back(static_cast<int32_t>(rw.slots.size()));
    const auto n = static_cast<int32_t>(r.new_token_ids.size());
    KV_CHECK_GE(n, 1, "a request computes at least one token");
    KV_CHECK(mode == ForwardMode::kExtend || n == 1, "decode computes one token per request");
    b.req_pool_indices.push_back(r.row);
    b.prefix_lens.push_back(r.prefix_len);
    b.extend_lens.push_back(n);
    b.seq_lens.push_back(r.prefix_len + n);
    b.extend_start_loc.push_back(start);
    for (int32_t i = 0; i < n; ++i) {
      b.input_ids.push_back(r.new_token_ids[i]);
      b.positions.push_back(r.prefix_len + i);
    }
    start += n;
    b.logits_indices.push_back(start - 1);
  }
  KV_CHECK_EQ(out_cache_loc.size(), b.input_ids.size(), "one slot per new token");
  b.out_cache_loc = std::move(out_cache_loc);
  return b;
}

void pad_row_rewrites(ForwardBatch::RowRewrites& rewrites, int32_t count) {
  if (rewrites.indptr.empty()) rewrites.indptr.push_back(0);
  rewrites.start.insert(rewrites.start.end(), static_cast<size_t>(count), 0);
  rewrites.indptr.insert(rewrites.indptr.end(), static_cast<size_t>(count), rewrites.indptr.back());
}

}  // namespace kvserve::mem

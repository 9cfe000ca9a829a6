#include "kvserve/mem/batch_lifecycle.h"

namespace kvserve::mem {
namespace {

int32_t decoder_start(const BatchEntry& e, const std::optional<EncoderSplit>& encoder) {
  if (!encoder) {
    KV_CHECK_EQ(e.encoder_len, 0, "an encoder region without an EncoderSplit");
    return 0;
  }
  return encoder_reserved_len(e.encoder_len, encoder->page_size, encoder->layout);
}

}  // namespace

Result<ForwardBatch> prepare_extend(const KvMemory& mem, std::span<const BatchEntry> entries,
                                    const std::optional<EncoderSplit>& encoder) {
  std::vector<KvReqState*> kvs;
  std::vector<int32_t> seq_lens;
  std::vector<int32_t> starts;
  for (const BatchEntry& e : entries) {
    const int32_t start = decoder_start(e, encoder);
    KV_CHECK(start == 0 || e.kv->prefix_indices.empty(),
             "encoder-decoder rows reuse no prefix (the encoder region is computed with them)");
    kvs.push_back(e.kv);
    starts.push_back(start);
    seq_lens.push_back(start + static_cast<int32_t>(e.kv->prefix_indices.size()) +
                       static_cast<int32_t>(e.new_tokens.size()));
  }
  std::vector<int32_t> loc;
  KV_RETURN_IF_ERROR(alloc_for_extend(mem, kvs, seq_lens, loc));
  std::vector<int32_t> encoder_loc;
  if (encoder) {
    std::vector<EncDecRow> rows;
    for (size_t i = 0; i < entries.size(); ++i) {
      rows.push_back({entries[i].kv->row, entries[i].encoder_len,
                      static_cast<int32_t>(entries[i].new_tokens.size())});
    }
    std::vector<int32_t> decoder_loc;
    split_encoder_decoder_loc(loc, rows, encoder->page_size, encoder->layout, encoder_loc,
                              decoder_loc);
    loc = std::move(decoder_loc);
  }
  std::vector<ForwardRequest> fwd;
  for (size_t i = 0; i < entries.size(); ++i) {
    const BatchEntry& e = entries[i];
    fwd.push_back(
        {e.kv->row, static_cast<int32_t>(e.kv->prefix_indices.size()), e.new_tokens, starts[i]});
  }
  ForwardBatch batch =
      make_forward_batch(ForwardMode::kExtend, fwd, std::move(loc), mem.req_to_token);
  if (encoder) {
    for (const BatchEntry& e : entries)
      batch.encoder_lens.push_back(e.encoder_len);
    batch.encoder_out_cache_loc = std::move(encoder_loc);
  }
  return batch;
}

Result<ForwardBatch> prepare_decode(const KvMemory& mem, std::span<const BatchEntry> entries,
                                    const std::optional<EncoderSplit>& encoder) {
  std::vector<KvReqState*> kvs;
  for (const BatchEntry& e : entries) {
    KV_CHECK_EQ(e.new_tokens.size(), size_t{1}, "a decode step computes one token per request");
    kvs.push_back(e.kv);
  }
  std::vector<int32_t> loc;
  KV_RETURN_IF_ERROR(alloc_for_decode(mem, kvs, loc));
  std::vector<ForwardRequest> fwd;
  for (const BatchEntry& e : entries) {
    const int32_t start = decoder_start(e, encoder);
    // The new slot's position, in decoder coordinates.
    fwd.push_back({e.kv->row, e.kv->kv_allocated_len - 1 - start, e.new_tokens, start});
  }
  ForwardBatch batch =
      make_forward_batch(ForwardMode::kDecode, fwd, std::move(loc), mem.req_to_token);
  if (encoder) {
    for (const BatchEntry& e : entries)
      batch.encoder_lens.push_back(e.encoder_len);
  }
  return batch;
}

}  // namespace kvserve::mem

// ForwardBatch: everything one forward pass reads (SGLang's ForwardBatch).
//
// Requests are concatenated token-major: request b's tokens are
// [extend_start_loc[b], extend_start_loc[b] + extend_lens[b]) of input_ids / positions /
// out_cache_loc. In EXTEND mode a request computes positions [prefix_lens[b], seq_lens[b]); in
// DECODE mode exactly one token at position seq_lens[b] - 1. KV for every position of a request
// lives at req_to_token[req_pool_indices[b]][position].
//
// Data flows one way: the scheduler's side (allocation, on its thread) builds the batch, taking
// from its host tables everything downstream needs (new slots, the row ranges a device mirror
// must copy); the runner points it at its device buffers (kv_pool, the mirror) once, just before
// the forward; the model and the attention backend only read it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/platform/platform.h"

namespace kvserve::mem {

enum class ForwardMode { kExtend, kDecode };

struct ForwardBatch {
  ForwardMode mode = ForwardMode::kExtend;

  // Per request.
  std::vector<int32_t> req_pool_indices;  // req_to_token rows
  std::vector<int32_t> seq_lens;          // positions with KV after this forward
  std::vector<int32_t> prefix_lens;       // positions already cached before it
  std::vector<int32_t> extend_lens;       // seq_lens - prefix_lens (1 in decode)
  std::vector<int32_t> extend_start_loc;  // exclusive prefix sum of extend_lens

  // Per token.
  std::vector<int32_t> input_ids;
  std::vector<int32_t> positions;
  std::vector<int32_t> out_cache_loc;  // where each token's K/V are stored

  // Rows of the token arrays whose logits are wanted (by default each request's last token).
  std::vector<int32_t> logits_indices;

  // Encoder-decoder requests (empty for decoder-only models). A row holds
  // [encoder region | decoder region]: self-attention of request b reads row positions
  // self_kv_start[b] + [0, seq_lens[b]); cross-attention reads [0, encoder_lens[b]).
  std::vector<int32_t> self_kv_start;  // empty means 0 for every request
  std::vector<int32_t> encoder_lens;
  // Slots for encoder K/V computed in this forward (request-major), empty when they are cached.
  std::vector<int32_t> encoder_out_cache_loc;
  // The encoder's inputs for those slots (host memory borrowed from the requests for this
  // forward; Whisper: log-mel features), one per request whose encoder K/V this forward stores,
  // in the order of encoder_out_cache_loc: the runner runs the encoder on them first (the encoder
  // is part of the prefill). Empty for a decode step or a decoder-only model.
  std::vector<std::span<const float>> encoder_inputs;

  // The host row ranges a device mirror of req_to_token copies before this forward's new slots
  // (device_req_to_token.h), request-major: request b's range starts at row position start[b]
  // and holds slots[indptr[b], indptr[b + 1]). An extend's range is its whole row below its first
  // new position (so the mirror never depends on history); a decode step's is what the host
  // rewrote below it since the row's last forward (ReqToTokenPool::take_written: the prefix
  // cache pointing a row at the tree's slots, for instance), usually nothing. Taken once, by
  // make_forward_batch, on the scheduler's thread.
  struct RowRewrites {
    std::vector<int32_t> start;   // [batch]
    std::vector<int32_t> indptr;  // [batch + 1]
    std::vector<int32_t> slots;
  };
  RowRewrites row_rewrites;

  // The scheduler's table (set by make_forward_batch); read-only downstream.
  const mem::ReqToTokenPool* req_to_token = nullptr;
  // The runner's device buffers, set by the runner just before the forward: the KV pool and, on
  // device platforms, the mirror of *req_to_token that device attention backends write this
  // forward's rows into and build their page / slot lists from (device_req_to_token.h).
  mem::MHATokenToKVPool* kv_pool = nullptr;
  mem::DeviceReqToToken* req_to_token_device = nullptr;

  int32_t batch_size() const { return static_cast<int32_t>(seq_lens.size()); }
  int32_t num_tokens() const { return static_cast<int32_t>(input_ids.size()); }
  bool is_decode() const { return mode == ForwardMode::kDecode; }
  int32_t kv_start(int32_t b) const { return self_kv_start.empty() ? 0 : self_kv_start[b]; }
  int32_t encoder_len(int32_t b) const { return encoder_lens.empty() ? 0 : encoder_lens[b]; }
};

// One request's part of a batch: its row, what is cached and the tokens to compute.
struct ForwardRequest {
  int32_t row = 0;
  int32_t prefix_len = 0;              // positions already in the KV cache
  std::vector<int32_t> new_token_ids;  // tokens at positions [prefix_len, prefix_len + n)
  // Encoder-decoder rows: where the decoder region starts in the row (ForwardBatch::self_kv_start).
  int32_t kv_start = 0;
};

// The batch's per-token integers on the device: what the model's embedding, rope and logits
// gather read. One packed block, input_ids [n] | positions [n] | logits_indices [rows].
struct DeviceBatchInts {
  const int32_t* input_ids = nullptr;
  const int32_t* positions = nullptr;
  const int32_t* logits_indices = nullptr;
};

// How many int32 the packed block of `batch` takes: 2 * num_tokens + logits rows.
int64_t batch_ints_size(const ForwardBatch& batch);
// Packs input_ids | positions | logits_indices into host[0, batch_ints_size).
void pack_batch_ints(const ForwardBatch& batch, int32_t* host);
// Where the three arrays of `batch` are in a device copy of its packed block at `device`.
DeviceBatchInts batch_ints_at(const ForwardBatch& batch, const int32_t* device);
// The batch's integers reach the device in one copy: packs them into `host` (resized) and copies
// them to `device` (room for batch_ints_size ints), queued on the platform's current stream.
DeviceBatchInts upload_batch_ints(platform::Platform& platform, const ForwardBatch& batch,
                                  std::vector<int32_t>& host, int32_t* device);

// Fills every derived field from the requests and their freshly allocated slots
// (`out_cache_loc`, request-major), and takes each row's rewrites from `req_to_token`
// (row_rewrites). Decode computes exactly one token per request. The runner's pointers (kv_pool,
// req_to_token_device) stay null: the runner sets them.
ForwardBatch make_forward_batch(ForwardMode mode, const std::vector<ForwardRequest>& requests,
                                std::vector<int32_t> out_cache_loc,
                                mem::ReqToTokenPool& req_to_token);

// Appends an empty rewrite range for `count` padding requests (decode graphs pad batches).
void pad_row_rewrites(ForwardBatch::RowRewrites& rewrites, int32_t count);

}  // namespace kvserve::mem

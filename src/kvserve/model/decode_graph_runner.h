// DecodeGraphRunner: decode forwards replayed from captured graphs (SGLang's CudaGraphRunner,
// sglang-notes §5.6 and §6.1), through the platform's device-agnostic graph API.
//
// At startup, once the KV pool exists, it captures one forward per batch-size bucket
// (decode_graph_batch_sizes: 1, 2, 4, 8, 16, 24, 32, ... up to --cuda-graph-max-bs), largest
// first. A capture records CausalLM::forward_static on the model runner's stream: the model's
// static workspace, the attention backend's plan (staged into this runner's fixed buffer), the
// device work it does from the plan (cuda-paged: the new slots into the req_to_token mirror and the
// page lists built from it, AttentionBackend::launch_decode_graph_metadata) and its split
// workspace, the logits and their argmax for every row; every address is fixed for the runner's
// life and the split decisions are fixed per bucket.
//
// A decode batch of bs requests (bs <= the largest bucket) is padded to the smallest bucket >= bs
// (pad_decode_batch: pad entries read row 0 with seq_len 1, position 0 and token 0, and write slot
// 0; row 0 and slot 0 are never handed out). Its integers (input ids, positions, logits rows, then
// the backend's plan: store slots, rows, lengths, O(batch) in all) are packed into one pinned host
// staging buffer and sent with one copy, the bucket's graph is replayed, and the real rows' argmax
// (or logits) come back. Pad rows' outputs are ignored. Everything else runs eagerly: extends,
// larger batches,
// --disable-cuda-graph, the CPU, and backends without decode graphs (cuda-ragged).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/model/causal_lm.h"
#include "kvserve/platform/platform.h"

namespace kvserve::model {

// --cuda-graph-max-bs when not given (SGLang's default below its large-GPU tiers).
inline constexpr int32_t kDefaultCudaGraphMaxBs = 160;

// The captured batch sizes: 1, 2, 4, 8, then every 8 up to 256, every 16 up to 512, every 32
// beyond (SGLang's list, without its 12), cut at max_bs; max_bs itself when the list skips it.
std::vector<int32_t> decode_graph_batch_sizes(int32_t max_bs);
// The smallest of `sizes` (ascending) that holds `bs` requests; 0 when none does.
int32_t decode_graph_bucket(const std::vector<int32_t>& sizes, int32_t bs);
// `batch` (decode, one token and one logits row per request, in order) padded to `bucket`
// requests: each pad entry is row 0 with seq_len 1 (prefix 0), token 0 at position 0, stored at
// slot 0, with its own logits row.
mem::ForwardBatch pad_decode_batch(const mem::ForwardBatch& batch, int32_t bucket);

// Returns pinned host memory to its platform.
struct PinnedHostDeleter {
  platform::Platform* platform = nullptr;
  size_t bytes = 0;
  void operator()(int32_t* p) const { platform->deallocate_host(p, bytes); }
};

class DecodeGraphRunner {
 public:
  // Captures every bucket up to min(max_bs, the request rows of the mirror). kUnimplemented when
  // the platform has no graphs or the backend no decode graphs; a failed capture is kInternal.
  static Result<std::unique_ptr<DecodeGraphRunner>> create(
      platform::Platform& platform, platform::StreamHandle stream, CausalLM& model,
      attention::AttentionBackend& backend, mem::DeviceReqToToken* req_to_token_device,
      mem::MHATokenToKVPool& kv_pool, int32_t max_bs);
  ~DecodeGraphRunner();
  DecodeGraphRunner(const DecodeGraphRunner&) = delete;
  DecodeGraphRunner& operator=(const DecodeGraphRunner&) = delete;

  // Whether `batch` can replay a graph: decode without encoder fields, 1..max_bs() requests, one
  // logits row per request in order.
  bool can_run(const mem::ForwardBatch& batch) const;
  // Replays the graph of the batch's bucket; `logits` ([bs, vocab], f32) and `tokens` (each row's
  // argmax, lowest id on ties), when not null, receive the real rows. Host-synchronous.
  // kOutOfMemory when the backend's eager prologue (the host's row rewrites) cannot grow its
  // buffer: nothing is replayed.
  Status replay(const mem::ForwardBatch& batch, std::vector<float>* logits,
                std::vector<int32_t>* tokens);
  // The same replay, queued on the runner's stream and not waited for: the logits stay at
  // CausalLM::static_logits() for work queued after it (the device sampler).
  Status replay_queued(const mem::ForwardBatch& batch);

  const std::vector<int32_t>& batch_sizes() const { return sizes_; }
  int32_t max_bs() const { return sizes_.empty() ? 0 : sizes_.back(); }
  int64_t replays() const { return replays_; }  // forwards served by a graph (tests, logs)
  double capture_seconds() const { return capture_seconds_; }
  size_t memory_bytes() const { return memory_bytes_; }
  // "captured 24 decode graphs (bs 1..160) in 2.31 s, 412.5 MiB"
  std::string summary() const;

 private:
  DecodeGraphRunner(platform::Platform& platform, platform::StreamHandle stream, CausalLM& model,
                    attention::AttentionBackend& backend);
  Status capture_all(mem::DeviceReqToToken* req_to_token_device, mem::MHATokenToKVPool& kv_pool,
                     int32_t max_bs);
  // Packs the padded batch's integers and the backend's plan into the staging buffer and queues
  // their one copy to the device buffer.
  Status stage(const mem::ForwardBatch& padded);

  platform::Platform& platform_;
  platform::StreamHandle stream_;
  CausalLM& model_;
  attention::AttentionBackend& backend_;
  std::vector<int32_t> sizes_;           // ascending
  std::vector<platform::Graph> graphs_;  // one per size
  int64_t capacity_ = 0;                 // int32 in the staging and device buffers
  Buffer device_ints_;                   // the model's integers, then the backend's plan
  std::unique_ptr<int32_t, PinnedHostDeleter> staging_;  // pinned host twin of device_ints_
  int64_t replays_ = 0;
  double capture_seconds_ = 0;
  size_t memory_bytes_ = 0;
};

}  // namespace kvserve::model

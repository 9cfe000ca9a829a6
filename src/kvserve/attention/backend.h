// Attention backends: how a layer's queries read the paged KV pool (sglang-notes §6).
//
// A backend is created once per model runner and selected by name (--attention-backend).
// init_forward_metadata runs once per forward and builds what every layer reads (page tables,
// CSR indices, cu_seqlens, split decisions); forward_extend / forward_decode run per layer. The
// layer's new K/V are in the pool before the layer attends, stored on one path the backend fixes
// for its lifetime (kv_store()): by the backend itself at the start of forward_*, or by the
// caller before it, through the slots the backend exposes on the device (store_slots(); CausalLM
// fuses the store into split_qkv_rope). Then every query attends over its request's row:
//   extend: the token at position p of request b attends to positions [0, p] (causal);
//   decode: the single token attends to [0, seq_len);
//   cross-attention (encoder-decoder): every token attends to all encoder positions.
// Empty KV (encoder_len 0) yields zeros and touches no memory.
//
// Errors: a backend grows some device buffers on demand (page lists, split workspaces, gathered
// K/V). Running out of device memory there is an expected failure: init_forward_metadata and the
// layer calls return it as a Status (kOutOfMemory), the forward stops, and the scheduler fails
// the batch's requests while the server keeps serving. What a model or a config could ask that a
// backend cannot do is refused at load by its capability table (capabilities.h); the kernels'
// own checks stay CHECKs, unreachable from a config.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/attention/capabilities.h"
#include "kvserve/core/check.h"
#include "kvserve/core/status.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/platform/platform.h"

namespace kvserve::attention {

struct AttentionLayer {
  int32_t layer_id = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scaling = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)
  // Sliding window (Mistral, Qwen2, Gemma): a query at position p sees the KV positions
  // [p - window_left, p]; -1: the whole causal context. config.json's sliding_window w (transformers:
  // key position > query position - w) is window_left w - 1, SGLang's and FlashInfer's convention.
  int32_t window_left = -1;
  // Gemma 2's attention soft-capping: score = logit_softcap * tanh(score / logit_softcap), after the
  // scaling and before the softmax; 0: none.
  float logit_softcap = 0.0f;
  bool is_cross_attention = false;
};

// This forward's activations for one layer, contiguous, token-major. For cross-attention, k and
// v are the encoder's [encoder tokens, num_kv_heads, head_dim] when they are computed in this
// forward (stored at batch.encoder_out_cache_loc); when the encoder is already cached
// (encoder_out_cache_loc empty) nothing is stored and k / v are not read.
struct AttentionIO {
  const void* q = nullptr;  // [num_tokens, num_heads, head_dim]
  const void* k = nullptr;  // [num_tokens, num_kv_heads, head_dim] (new tokens)
  const void* v = nullptr;  // [num_tokens, num_kv_heads, head_dim]
  void* out = nullptr;      // [num_tokens, num_heads, head_dim]
  DType dtype = DType::kF32;
  // The caller wrote k and v (self-attention): a backend may read a fresh prefill's K/V (no
  // request with cached positions) from these rows instead of the pool they were stored into.
  // False where k / v are not written (a KV store fused into the rope kernel writes only the
  // cache) or not laid out as above.
  bool new_kv_rows = false;
};

// What a backend sizes its decode-graph state for (AttentionBackend::init_decode_graph_state).
struct DecodeGraphShape {
  int32_t max_bs = 0;      // the largest captured batch
  int32_t max_kv_len = 0;  // positions one request can have (row width, at most the pool)
  int32_t page_size = 1;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
};

// Who stores a layer's new K/V (self-attention at batch.out_cache_loc; cross-attention computed
// in this forward at batch.encoder_out_cache_loc) into the pool; fixed per backend.
enum class KvStore {
  kBackend,  // forward_* stores io.k / io.v before attending (the CPU backends: host slots)
  kCaller,   // the caller stores them before forward_*, through store_slots() (store_kv below, or
             // fused into its own kernel); forward_* does not read io.k / io.v
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string_view name() const = 0;
  // The store path, the same for every forward of this backend.
  virtual KvStore kv_store() const { return KvStore::kBackend; }

  virtual Status init_forward_metadata(const mem::ForwardBatch& batch) = 0;

  // Decode graphs (SGLang's init_cuda_graph_state / init_forward_metadata_capture_cuda_graph /
  // ..._replay_cuda_graph, sglang-notes §6.1). A backend that has them plans a decode batch
  // already padded to a captured size (pad entries: row 0, seq_len 1, slot 0) into a caller's
  // fixed buffer, at offsets that depend only on the batch size, with split decisions fixed per
  // batch size; so one capture per size replays any batch of that size once the caller has copied
  // the plan to the device. The plan of a batch is the one init_forward_metadata makes for it:
  // eager and graph forwards of the same padded batch run the same kernels on the same metadata.
  virtual bool supports_decode_graphs() const { return false; }
  // Allocates once what graph forwards use besides the plan (a split-KV workspace for the worst
  // batch size) and returns how many int32 the plan of a batch of shape.max_bs takes at most.
  virtual Result<int64_t> init_decode_graph_state(const DecodeGraphShape& /*shape*/) {
    return make_status(StatusCode::kUnimplemented, "attention backend {} has no decode graphs",
                       name());
  }
  // Builds the plan of `batch` (decode, no encoder) into host[0, n) and returns n <= capacity
  // (or kOutOfMemory when a buffer of the eager prologue cannot grow);
  // until the next init_forward_metadata*, forward_decode reads it at `device`, which must hold
  // those n integers by the time its kernels run. Host work, except device work that must precede
  // the replay and is not part of the graph (queued on the current stream: cuda-paged writes the
  // rows the host rewrote outside a forward into the req_to_token mirror).
  virtual Result<int64_t> init_forward_metadata_decode_graph(const mem::ForwardBatch& /*batch*/,
                                                             int32_t* /*host*/,
                                                             int64_t /*capacity*/,
                                                             const int32_t* /*device*/) {
    KV_CHECK(false, "attention backend {} has no decode graphs", name());
    return int64_t{0};
  }
  // The device work of the staged plan (what a decode graph captures before the first layer:
  // cuda-paged writes each request's new slot into the req_to_token mirror and builds the page
  // lists from it), reading only the staged integers. CausalLM::forward_static calls it.
  virtual void launch_decode_graph_metadata() {}
  // KvStore::kCaller: where this forward's store slots are in the platform's memory, valid after
  // init_forward_metadata* until the next one (a decode graph's at its fixed staging address):
  // batch.out_cache_loc, or with `cross` batch.encoder_out_cache_loc. Null for kBackend.
  virtual const int32_t* store_slots(bool /*cross*/) const { return nullptr; }
  // kOutOfMemory when a device buffer the forward needs cannot grow (nothing usable is written).
  virtual Status forward_extend(const AttentionIO& io, const AttentionLayer& layer,
                                const mem::ForwardBatch& batch) = 0;
  virtual Status forward_decode(const AttentionIO& io, const AttentionLayer& layer,
                                const mem::ForwardBatch& batch) = 0;

  Status forward(const AttentionIO& io, const AttentionLayer& layer,
                 const mem::ForwardBatch& batch) {
    return batch.is_decode() ? forward_decode(io, layer, batch) : forward_extend(io, layer, batch);
  }
};

// The caller's side of KvStore::kCaller: stores the layer's io.k / io.v at the backend's
// store_slots (nothing for KvStore::kBackend, whose forward_* stores them, or when the layer has
// no new K/V). Callers that do not fuse the store call this before backend.forward.
void store_kv(const AttentionBackend& backend, const AttentionIO& io, const AttentionLayer& layer,
              const mem::ForwardBatch& batch);

// The backend of `kind` (capabilities.h: the table of names, devices and what each supports) on
// `platform`; kUnimplemented for a backend of another device. Whether it can serve a model is
// check_attention_support's question, asked by the runners at load.
Result<std::unique_ptr<AttentionBackend>> create_attention_backend(AttentionBackendKind kind,
                                                                   platform::Platform& platform);
// The same by name (tests, tools); kInvalidArgument for an unknown one, listing the valid ones.
Result<std::unique_ptr<AttentionBackend>> create_attention_backend(std::string_view name,
                                                                   platform::Platform& platform);

// KvStore::kBackend on the CPU: stores the layer's new K/V at the batch's host slots (what the
// CPU backends do first).
void save_kv_to_pool(const AttentionIO& io, const AttentionLayer& layer,
                     const mem::ForwardBatch& batch);

}  // namespace kvserve::attention

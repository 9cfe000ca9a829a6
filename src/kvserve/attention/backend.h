// Attention backends: how a layer's queries read the paged KV pool (sglang-notes §6).
//
// A backend is created once per model runner and selected by name (--attention-backend).
// init_forward_metadata runs once per forward and builds what every layer reads (page tables,
// CSR indices, cu_seqlens); forward_extend / forward_decode run per layer. Every backend stores
// the layer's new K/V into the pool at out_cache_loc first, then attends over the request's row:
//   extend: the token at position p of request b attends to positions [0, p] (causal);
//   decode: the single token attends to [0, seq_len);
//   cross-attention (encoder-decoder): every token attends to all encoder positions.
// Empty KV (encoder_len 0) yields zeros and touches no memory.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/model/forward_batch.h"
#include "kvserve/platform/platform.h"

namespace kvserve::attention {

struct AttentionLayer {
  int32_t layer_id = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float scaling = 1.0f;  // softmax scale, usually 1/sqrt(head_dim)
  bool is_cross_attention = false;
};

// This forward's activations for one layer, contiguous, token-major. For cross-attention, k and
// v are the encoder's [encoder tokens, num_kv_heads, head_dim] when they are computed in this
// forward (stored at batch.encoder_out_cache_loc), or null when they are already cached.
struct AttentionIO {
  const void* q = nullptr;  // [num_tokens, num_heads, head_dim]
  const void* k = nullptr;  // [num_tokens, num_kv_heads, head_dim] (new tokens)
  const void* v = nullptr;  // [num_tokens, num_kv_heads, head_dim]
  void* out = nullptr;      // [num_tokens, num_heads, head_dim]
  DType dtype = DType::kF32;
};

class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  virtual std::string_view name() const = 0;

  virtual void init_forward_metadata(const model::ForwardBatch& batch) = 0;
  virtual void forward_extend(const AttentionIO& io, const AttentionLayer& layer,
                              const model::ForwardBatch& batch, bool save_kv = true) = 0;
  virtual void forward_decode(const AttentionIO& io, const AttentionLayer& layer,
                              const model::ForwardBatch& batch, bool save_kv = true) = 0;

  void forward(const AttentionIO& io, const AttentionLayer& layer, const model::ForwardBatch& batch,
               bool save_kv = true) {
    if (batch.is_decode()) {
      forward_decode(io, layer, batch, save_kv);
    } else {
      forward_extend(io, layer, batch, save_kv);
    }
  }
};

// The backends this build has for `device`, e.g. {"cpu", "native"} on the CPU.
std::vector<std::string> attention_backend_names(Device device);
// The default for a device (SGLang picks per hardware): "cpu" on the CPU.
std::string default_attention_backend(Device device);
// kInvalidArgument for an unknown name (listing the valid ones), kUnimplemented for a backend
// that does not run on this platform.
Result<std::unique_ptr<AttentionBackend>> create_attention_backend(std::string_view name,
                                                                   platform::Platform& platform);

// Stores the layer's new K/V (what every backend does first).
void save_kv_to_pool(const AttentionIO& io, const AttentionLayer& layer,
                     const model::ForwardBatch& batch);

}  // namespace kvserve::attention

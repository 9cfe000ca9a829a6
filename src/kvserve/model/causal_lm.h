// Decoder-only causal language models of the Llama family: LlamaForCausalLM, Qwen2ForCausalLM
// (q/k/v bias) and MistralForCausalLM. Weights are loaded from a Hugging Face checkpoint into the
// platform's compute dtype (f32 on the CPU), with q/k/v and gate/up merged into one GEMM each
// as SGLang does. Each attention layer stores its K/V into the pool and reads it back through
// the attention backend.
#pragma once

#include <functional>

#include <memory>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/model/config.h"
#include "kvserve/model/forward_batch.h"
#include "kvserve/model/weights.h"

namespace kvserve::model {

class CausalLM {
 public:
  // kNotFound for a missing tensor, kInvalidArgument for a shape mismatch (naming the tensor,
  // its file, and the expected and actual shapes), kOutOfMemory when the platform cannot hold it.
  // `on_layer(done, total)` is called after the embeddings and after each layer (total = layers
  // + 1), for a progress bar.
  static Result<std::unique_ptr<CausalLM>> load(
      const ModelConfig& config, const WeightStore& weights, platform::Platform& platform,
      const std::function<void(int64_t done, int64_t total)>& on_layer = {});
  ~CausalLM();

  const ModelConfig& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }

  // One forward pass. `logits` becomes [batch.logits_indices.size(), vocab_size], f32, host.
  void forward(const ForwardBatch& batch, attention::AttentionBackend& backend,
               std::vector<float>& logits);

 private:
  struct Layer;
  struct Workspace;
  CausalLM(const ModelConfig& config, platform::Platform& platform);

  ModelConfig config_;
  platform::Platform& platform_;
  Tensor embed_tokens_;  // [vocab, hidden]
  Tensor lm_head_;       // [vocab, hidden]; empty when tied to embed_tokens_
  Tensor final_norm_;    // [hidden]
  std::vector<Layer> layers_;
  std::vector<float> inv_freq_;
  std::unique_ptr<Workspace> ws_;
  size_t weight_bytes_ = 0;
};

}  // namespace kvserve::model

// Decoder-only causal language models of the Llama family: LlamaForCausalLM, Qwen2ForCausalLM
// (q/k/v bias), MistralForCausalLM, Qwen3ForCausalLM (q/k norms), Gemma2ForCausalLM and
// Gemma3ForCausalLM (decoder_family.h says how each differs). Weights are loaded from a Hugging
// Face checkpoint into the platform's compute dtype (f32 on the CPU, bf16 on CUDA), with q/k/v and
// gate/up merged into one GEMM each as SGLang does. Each attention layer stores its K/V into the
// pool and reads it back through the attention backend.
#pragma once

#include <functional>

#include <memory>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/checkpoint/config.h"
#include "kvserve/checkpoint/weights.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/model/decoder_family.h"
#include "kvserve/model/rope.h"
#include "kvserve/model/tensor_parallel.h"

namespace kvserve::model {

class CausalLM {
 public:
  // `max_seq_len`: the longest sequence a forward may hold (the rope table of a length-dependent
  // scaling has a row per length past the original context). kNotFound for a missing tensor,
  // kInvalidArgument for a shape mismatch (naming the tensor, its file, and the expected and actual
  // shapes), kOutOfMemory when the platform cannot hold it. `on_layer(done, total)` is called after
  // the embeddings and after each layer (total = layers
  // + 1), for a progress bar. With `tp` of more than one rank, this rank's shard
  // (tensor_parallel.h) is read from the checkpoint, slice by slice (never a whole tensor), and
  // every forward takes part in the group's collectives on the platform's current stream (the
  // ranks run the same forwards in the same order); logits are whole on every rank.
  static Result<std::unique_ptr<CausalLM>> load(
      const checkpoint::ModelConfig& config, const checkpoint::WeightStore& weights,
      platform::Platform& platform, int64_t max_seq_len,
      const std::function<void(int64_t done, int64_t total)>& on_layer = {},
      const TensorParallel& tp = {});
  ~CausalLM();

  const checkpoint::ModelConfig& config() const { return config_; }
  // This rank's part of the model (the whole model with one rank).
  const TpShard& shard() const { return shard_; }
  const DecoderFamily& family() const { return family_; }
  // Whether the rotary frequencies follow each request's length (dynamic, longrope: model/rope.h);
  // such a model has no static forward (decode graphs).
  bool rope_depends_on_length() const { return rope_length_dependent_; }
  size_t weight_bytes() const { return weight_bytes_; }

  // The compute dtype: f32 on the CPU, bf16 on CUDA (weights, activations; f32 accumulation).
  DType dtype() const { return dtype_; }
  static DType compute_dtype(DeviceKind device) {
    return device == DeviceKind::kCpu ? DType::kF32 : DType::kBF16;
  }

  // One forward pass. `logits` becomes [batch.logits_indices.size(), vocab_size], f32, host.
  // kOutOfMemory when a device buffer (the activation workspace, the backend's) cannot grow for
  // this batch: the forward stops, its outputs are garbage, the model stays usable.
  Status forward(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                 std::vector<float>& logits);
  // The same forward, then the argmax of each logits row (lowest id on ties), computed on the
  // device so only the ids cross to the host: greedy decoding and bench-one-batch.
  Status forward_greedy(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                        std::vector<int32_t>& tokens);

  // Device platforms: the same forward, queued only; the logits ([rows, vocab], f32) stay in the
  // eager workspace, at the returned address, until the next forward (a sampler may rewrite them).
  Result<float*> forward_on_device(const mem::ForwardBatch& batch,
                                   attention::AttentionBackend& backend);

  // Decode graphs (model/decode_graph_runner.h), device platforms only. A second activation
  // workspace for forwards of up to `max_tokens` tokens (and as many logits rows), allocated once:
  // captured graphs keep its addresses.
  Status reserve_static_workspace(int64_t max_tokens);
  // The forward of `batch` in the static workspace, its integers already on the device at
  // `device_ints` (mem::pack_batch_ints' layout): it queues device work only (no host copy, no
  // allocation, no synchronization), so it can be captured. The logits ([rows, vocab], f32) and
  // each row's argmax stay on the device, at static_logits() and static_argmax().
  void forward_static(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                      const int32_t* device_ints);
  const float* static_logits() const;
  float* static_logits();  // the sampler penalizes rows in place after a replay
  const int32_t* static_argmax() const;

 private:
  struct Layer;
  struct Workspace;
  CausalLM(const checkpoint::ModelConfig& config, platform::Platform& platform);
  // Grows the eager workspace for `batch` and uploads its integers (one copy); kOutOfMemory when
  // it cannot grow.
  Result<mem::DeviceBatchInts> upload_eager(const mem::ForwardBatch& batch);
  // Runs the model in `w` on the integers at `in`; logits go to `host_logits` on the CPU, to the
  // workspace on devices. A backend's failed growth stops it (work already queued stays queued).
  Status run(const mem::ForwardBatch& batch, attention::AttentionBackend& backend, Workspace& w,
             const mem::DeviceBatchInts& in, float* host_logits);

  // A collective of the forward; its failure (a dead rank) fails the forward.
  Status all_reduce(const Tensor& t, int64_t count);

  checkpoint::ModelConfig config_;
  checkpoint::ModelConfig local_;  // this rank's heads, KV heads, intermediate (shard_config)
  TpShard shard_;
  dist::Communicator* comm_ = nullptr;  // null: one rank
  platform::Platform& platform_;
  Tensor embed_tokens_;  // [vocab, hidden]
  Tensor lm_head_;       // [vocab, hidden]; empty when tied to embed_tokens_
  Tensor final_norm_;    // [hidden]
  std::vector<Layer> layers_;
  DType dtype_;
  DecoderFamily family_;
  std::vector<RopeTable> ropes_;        // one per family_.ropes
  std::vector<Tensor> inv_freq_;        // f32 [ropes_[i].rows, head_dim / 2] on the platform
  bool rope_length_dependent_ = false;  // then ropes_ holds that one table
  Tensor rope_rows_;  // i32 [tokens]: each token's inv_freq row, when rope_length_dependent_
  std::vector<int32_t> host_rope_rows_;
  std::unique_ptr<Workspace> ws_;
  std::unique_ptr<Workspace> static_ws_;  // decode graphs; null until reserved
  size_t weight_bytes_ = 0;
};

}  // namespace kvserve::model

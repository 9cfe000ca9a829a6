// WhisperForConditionalGeneration on the project's KV pool and attention backends. Weights are
// loaded into the platform's compute dtype (f32 on the CPU, bf16 on CUDA; f32 accumulation in
// every GEMM, norm and softmax) and activations stay on the device; only the features go in and
// the f32 logits come out.
//
// encode(): log-mel features [num_mel_bins, 2 * max_source_positions] -> conv1 + GELU, conv2
// (stride 2) + GELU, + sinusoidal positions, pre-LN encoder layers with non-causal
// self-attention over all positions (ops::varlen_attention with one sequence; not cached), final
// LayerNorm -> [max_source_positions, d_model].
//
// forward(): the decoder over a mem::ForwardBatch whose rows are [encoder region | decoder region]
// (mem/encoder_layout.h). Decoder layer i keeps its self-attention K/V (decoder region, from
// batch.self_kv_start) and its cross-attention K/V (encoder region) in pool layer i. The cross K/V
// of an encoder output are computed once, in the forward that passes that output (stored at
// batch.encoder_out_cache_loc through AttentionIO.k/v); later forwards read them from the pool.
// A request with encoder_len 0 skips cross-attention, as transformers' decoder does without
// encoder states (the backend reads nothing for it). Logits = proj_out, tied to embed_tokens.
// With scale_embedding the decoder reads a second, pre-scaled copy of embed_tokens (the same f32
// product the scaling would compute per token).
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kvserve/attention/backend.h"
#include "kvserve/checkpoint/weights.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/mem/forward_batch.h"

namespace kvserve::model {

class WhisperModel {
 public:
  // kNotFound for a missing tensor, kInvalidArgument for a shape mismatch (naming the tensor,
  // its file, the expected and actual shapes), kOutOfMemory when the platform cannot hold it.
  static Result<std::unique_ptr<WhisperModel>> load(const checkpoint::WhisperConfig& config,
                                                    const checkpoint::WeightStore& weights,
                                                    platform::Platform& platform);
  ~WhisperModel();

  const checkpoint::WhisperConfig& config() const { return config_; }
  size_t weight_bytes() const { return weight_bytes_; }
  // The compute dtype: f32 on the CPU, bf16 on CUDA (weights, activations, encoder outputs).
  DType dtype() const { return dtype_; }
  platform::Platform& platform() { return platform_; }

  // One request's features, row-major [num_mel_bins, input_frames()] (transformers'
  // input_features[0]), host memory. `out` is device memory for [max_source_positions, d_model]
  // elements of dtype(). kInvalidArgument when the size is not num_mel_bins * input_frames().
  Status encode(std::span<const float> features, void* out);
  // The same, with the output converted to f32 on the host (tests, tools).
  Status encode(std::span<const float> features, std::vector<float>& out);

  // One decoder forward; `logits` becomes [batch.logits_indices.size(), vocab_size], f32, host.
  // `encoder_hidden` (device memory, dtype()) holds the encoder outputs whose cross K/V this
  // forward stores, request-major in the order of batch.encoder_out_cache_loc
  // ([encoder_out_cache_loc.size(), d_model]); null when every request's encoder K/V is already
  // cached (or it has none). kOutOfMemory when a device buffer cannot grow for this batch.
  Status forward(const mem::ForwardBatch& batch, attention::AttentionBackend& backend,
                 std::vector<float>& logits, const void* encoder_hidden = nullptr);

 private:
  struct Norm;
  struct Linear;
  struct Attention;
  struct Ffn;
  struct EncoderLayer;
  struct DecoderLayer;
  struct Workspace;
  WhisperModel(const checkpoint::WhisperConfig& config, platform::Platform& platform);

  // out[rows, cols] = a[rows, k] . w.w[cols, k]^T (+ w.b when it has one)
  void linear(const void* a, const Linear& w, void* out, int64_t rows, int64_t cols, int64_t k,
              int64_t lda);
  void layer_norm(const void* x, void* residual, const Norm& norm, void* out, int64_t rows);
  // The feed-forward sublayer of `rows` tokens: residual += delta, then
  // delta = fc2(gelu(fc1(layer_norm(residual)))); `normed` [rows, d] and `hidden` [rows, dim]
  // are scratch.
  void feed_forward(const Ffn& ffn, void* delta, void* residual, void* normed, void* hidden,
                    int64_t rows, int64_t dim);
  void reserve_encoder();  // the encoder's activations (fixed size), once
  // Whether the encoder's self-attention runs the tensor-core prefill kernel (CUDA, bf16, head_dim
  // 64 or 128) rather than varlen attention.
  bool encoder_attention_on_tensor_cores() const;

  checkpoint::WhisperConfig config_;
  platform::Platform& platform_;
  Tensor conv1_w_, conv1_b_, conv2_w_, conv2_b_;
  Tensor encoder_positions_;  // [max_source_positions, d_model]
  std::vector<EncoderLayer> encoder_layers_;
  std::unique_ptr<Norm> encoder_norm_;
  Tensor embed_tokens_;       // [vocab, d_model], also proj_out
  Tensor embed_scaled_;       // embed_tokens * sqrt(d_model) with scale_embedding, else empty
  Tensor decoder_positions_;  // [max_target_positions, d_model]
  std::vector<DecoderLayer> decoder_layers_;
  std::unique_ptr<Norm> decoder_norm_;
  DType dtype_;
  std::unique_ptr<Workspace> ws_;
  size_t weight_bytes_ = 0;
};

}  // namespace kvserve::model

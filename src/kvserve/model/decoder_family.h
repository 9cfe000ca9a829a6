// What a decoder-only family computes beyond Llama's layer, decided once from the config:
// Llama / Qwen2 / Mistral (pre-norm, SiLU, 1/sqrt(head_dim)), Qwen3 (+ per-head q/k RMSNorm),
// Gemma 2 (sandwich norms, (1 + w) RMSNorm, scaled embeddings, tanh-GELU, query_pre_attn_scalar,
// attention and final soft-capping, alternating sliding layers) and Gemma 3 (Gemma 2's layer with
// q/k norms and a second rope base for its sliding layers). CausalLM reads this description; it
// does not branch on the architecture.
#pragma once

#include <cstdint>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/core/dtype.h"
#include "kvserve/platform/ops/layer_ops_params.h"

namespace kvserve::model {

// One rotary table: a base and whether the config's rope_scaling applies to it.
struct RopeSpec {
  double theta = 10000.0;
  bool scaled = true;
  bool operator==(const RopeSpec&) const = default;
};

struct DecoderFamily {
  bool qkv_bias = false;            // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;             // self_attn.q_norm / k_norm per head, before rope
  bool sandwich_norms = false;      // post-attention, pre- and post-feedforward norms (Gemma)
  float norm_weight_offset = 0.0f;  // RMSNorm multiplies by (weight + offset)
  float embedding_scale = 1.0f;     // already rounded to the compute dtype
  ops::GatedActivation activation = ops::GatedActivation::kSilu;
  float attention_scaling = 1.0f;    // the softmax scale
  float attn_logit_softcap = 0.0f;   // 0: none
  float final_logit_softcap = 0.0f;  // 0: none
  std::vector<int32_t> window_left;  // per layer; -1: the whole causal context
  std::vector<RopeSpec> ropes;       // the distinct rotary tables
  std::vector<int32_t> layer_rope;   // per layer: its index into `ropes`
};

// The description of `config`'s family for activations of `compute_dtype`.
DecoderFamily describe_decoder_family(const checkpoint::ModelConfig& config, DType compute_dtype);

}  // namespace kvserve::model

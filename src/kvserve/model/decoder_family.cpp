#include "kvserve/model/decoder_family.h"

#include <algorithm>
#include <cmath>

#include "kvserve/core/check.h"

namespace kvserve::model {
namespace {

// A value as the compute dtype holds it (transformers casts Gemma's normalizer to the dtype of
// the embeddings before multiplying).
float round_to(double value, DType dtype) {
  const auto f = static_cast<float>(value);
  if (dtype == DType::kF32) return f;
  uint16_t h = 0;
  float back = 0.0f;
  convert_elements(&f, DType::kF32, &h, dtype, 1);
  convert_elements(&h, dtype, &back, DType::kF32, 1);
  return back;
}

}  // namespace

DecoderFamily describe_decoder_family(const checkpoint::ModelConfig& c, DType compute_dtype) {
  KV_CHECK(dtype_size(compute_dtype) <= 4, "compute dtype {}", dtype_name(compute_dtype));
  // A config built in code may leave layer_types empty: every layer is then full attention.
  KV_CHECK(
      c.layer_types.empty() || c.layer_types.size() == static_cast<size_t>(c.num_hidden_layers),
      "{} layer_types for {} layers", c.layer_types.size(), c.num_hidden_layers);
  DecoderFamily d;
  d.qkv_bias = c.attention_bias;
  d.qk_norm = c.qk_norm;
  d.sandwich_norms = c.sandwich_norms;
  d.norm_weight_offset = static_cast<float>(c.norm_weight_offset);
  d.embedding_scale = round_to(c.embedding_scale, compute_dtype);
  if (c.hidden_act == "silu") {
    d.activation = ops::GatedActivation::kSilu;
  } else {
    KV_CHECK(c.hidden_act == "gelu_pytorch_tanh", "activation {} passed the config check",
             c.hidden_act);
    d.activation = ops::GatedActivation::kGeluTanh;
  }
  // transformers: query_pre_attn_scalar ** -0.5 (Gemma), head_dim ** -0.5 otherwise.
  d.attention_scaling = static_cast<float>(
      1.0 / std::sqrt(c.query_pre_attn_scalar.value_or(static_cast<double>(c.head_dim))));
  d.attn_logit_softcap = static_cast<float>(c.attn_logit_softcapping.value_or(0.0));
  d.final_logit_softcap = static_cast<float>(c.final_logit_softcapping.value_or(0.0));
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    // The layer's window as served (ModelConfig::layer_window_left: sliding_window - 1, or -1
    // where the window covers the served context or the layer does not slide).
    const bool slides = !c.layer_types.empty() && c.layer_slides(i);
    d.window_left.push_back(c.layer_window_left.empty() ? -1 : c.layer_window_left.at(i));
    const RopeSpec spec{
        .theta = slides && c.sliding_rope_theta ? *c.sliding_rope_theta : c.rope_theta,
        .scaled = !(slides && c.sliding_rope_theta)};
    auto it = std::find(d.ropes.begin(), d.ropes.end(), spec);
    if (it == d.ropes.end()) it = d.ropes.insert(d.ropes.end(), spec);
    d.layer_rope.push_back(static_cast<int32_t>(it - d.ropes.begin()));
  }
  return d;
}

}  // namespace kvserve::model

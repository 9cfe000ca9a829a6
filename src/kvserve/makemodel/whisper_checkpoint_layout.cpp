#include "kvserve/makemodel/whisper_checkpoint_layout.h"

#include <fmt/format.h>

#include <cmath>
#include <string>

#include "kvserve/core/check.h"

namespace kvserve::makemodel {

std::vector<CheckpointTensor> whisper_checkpoint_tensors(const checkpoint::WhisperConfig& c,
                                                         DType dtype) {
  std::vector<CheckpointTensor> out;
  const auto add = [&](std::string name, std::vector<int64_t> shape, TensorInit init) {
    out.push_back({checkpoint::TensorSpec{std::move(name), dtype, std::move(shape)}, init});
  };
  const int64_t d = c.d_model;
  const auto linear = [&](const std::string& p, int64_t out_f, int64_t in_f, bool bias) {
    add(p + ".weight", {out_f, in_f}, TensorInit::kNormal);
    if (bias) add(p + ".bias", {out_f}, TensorInit::kNormal);
  };
  const auto layer_norm = [&](const std::string& p) {
    add(p + ".weight", {d}, TensorInit::kOnes);
    add(p + ".bias", {d}, TensorInit::kNormal);
  };
  // WhisperAttention registers k_proj (no bias), v_proj, q_proj, out_proj in this order.
  const auto attention = [&](const std::string& p) {
    linear(p + ".k_proj", d, d, false);
    linear(p + ".v_proj", d, d, true);
    linear(p + ".q_proj", d, d, true);
    linear(p + ".out_proj", d, d, true);
  };

  add("model.encoder.conv1.weight", {d, c.num_mel_bins, 3}, TensorInit::kNormal);
  add("model.encoder.conv1.bias", {d}, TensorInit::kNormal);
  add("model.encoder.conv2.weight", {d, d, 3}, TensorInit::kNormal);
  add("model.encoder.conv2.bias", {d}, TensorInit::kNormal);
  add("model.encoder.embed_positions.weight", {c.max_source_positions, d}, TensorInit::kSinusoidal);
  for (int32_t i = 0; i < c.encoder_layers; ++i) {
    const std::string p = fmt::format("model.encoder.layers.{}.", i);
    attention(p + "self_attn");
    layer_norm(p + "self_attn_layer_norm");
    linear(p + "fc1", c.encoder_ffn_dim, d, true);
    linear(p + "fc2", d, c.encoder_ffn_dim, true);
    layer_norm(p + "final_layer_norm");
  }
  layer_norm("model.encoder.layer_norm");

  add("model.decoder.embed_tokens.weight", {c.vocab_size, d}, TensorInit::kNormal);
  add("model.decoder.embed_positions.weight", {c.max_target_positions, d}, TensorInit::kNormal);
  for (int32_t i = 0; i < c.decoder_layers; ++i) {
    const std::string p = fmt::format("model.decoder.layers.{}.", i);
    attention(p + "self_attn");
    layer_norm(p + "self_attn_layer_norm");
    attention(p + "encoder_attn");
    layer_norm(p + "encoder_attn_layer_norm");
    linear(p + "fc1", c.decoder_ffn_dim, d, true);
    linear(p + "fc2", d, c.decoder_ffn_dim, true);
    layer_norm(p + "final_layer_norm");
  }
  layer_norm("model.decoder.layer_norm");
  return out;
}

float whisper_sinusoid(int64_t position, int64_t channel, int64_t channels) {
  KV_CHECK(channels % 2 == 0 && channels >= 4, "sinusoids need an even channel count >= 4, got {}",
           channels);
  KV_CHECK(channel >= 0 && channel < channels, "channel {} of {}", channel, channels);
  const int64_t half = channels / 2;
  const int64_t i = channel % half;
  // torch: exp(-increment * arange(half)) and arange(length) * inv_timescales, both in f32.
  const auto increment = static_cast<float>(-std::log(10000.0) / static_cast<double>(half - 1));
  const float inv_timescale = std::exp(increment * static_cast<float>(i));
  const float scaled = static_cast<float>(position) * inv_timescale;
  const double angle = static_cast<double>(scaled);
  return static_cast<float>(channel < half ? std::sin(angle) : std::cos(angle));
}

}  // namespace kvserve::makemodel

#include "kvserve/model/rope.h"

#include <cmath>
#include <numbers>

#include "kvserve/core/check.h"

namespace kvserve::model {

std::vector<float> rope_inv_freq(double theta, int32_t rotary_dim,
                                 const checkpoint::RopeScaling& scaling) {
  KV_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim {}", rotary_dim);
  std::vector<float> inv(rotary_dim / 2);
  const auto base = static_cast<float>(theta);
  for (int32_t i = 0; i < rotary_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
    inv[i] = 1.0f / std::pow(base, exponent);
  }
  if (scaling.rope_type == "default") return inv;
  KV_CHECK(scaling.rope_type == "llama3", "rope_type {} reached rope_inv_freq", scaling.rope_type);
  const auto factor = static_cast<float>(scaling.factor);
  const auto low = static_cast<float>(scaling.low_freq_factor);
  const auto high = static_cast<float>(scaling.high_freq_factor);
  const auto old_context = static_cast<float>(scaling.original_max_position_embeddings);
  const float low_freq_wavelen = old_context / low;
  const float high_freq_wavelen = old_context / high;
  for (float& f : inv) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_context / wavelen - low) / (high - low);
      f = (1.0f - smooth) * scaled / factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
  return inv;
}

}  // namespace kvserve::model

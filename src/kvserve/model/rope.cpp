#include "kvserve/model/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kvserve/core/check.h"

namespace kvserve::model {

namespace {

// The f32 exponents 2i / dim (torch.arange(0, dim, 2).float() / dim).
std::vector<float> exponents(int32_t rotary_dim) {
  std::vector<float> e(rotary_dim / 2);
  for (int32_t i = 0; i < rotary_dim / 2; ++i)
    e[i] = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
  return e;
}

// 1 / base^(2i / dim), all in f32 (base already rounded to f32 as torch rounds a scalar base).
std::vector<float> default_inv_freq(float base, int32_t rotary_dim) {
  std::vector<float> inv = exponents(rotary_dim);
  for (float& f : inv)
    f = 1.0f / std::pow(base, f);
  return inv;
}

void apply_llama3(const checkpoint::RopeScaling& scaling, std::vector<float>& inv) {
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
}

// transformers' find_correction_dim (double, Python's math).
double yarn_correction_dim(double rotations, int32_t dim, double base, int64_t original) {
  return (dim * std::log(static_cast<double>(original) / (rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

std::vector<float> yarn_inv_freq(double theta, int32_t dim, const checkpoint::RopeScaling& s) {
  const std::vector<float> e = exponents(dim);
  const auto base = static_cast<float>(theta);
  const auto factor = static_cast<float>(s.factor);
  double low = yarn_correction_dim(s.beta_fast, dim, theta, s.original_max_position_embeddings);
  double high = yarn_correction_dim(s.beta_slow, dim, theta, s.original_max_position_embeddings);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // transformers: "prevent singularity"
  const auto low_f = static_cast<float>(low);
  const auto span = static_cast<float>(high - low);
  std::vector<float> inv(e.size());
  for (size_t i = 0; i < e.size(); ++i) {
    const float pos_freq = std::pow(base, e[i]);
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    const float a = interpolation * (1.0f - extrapolation_factor);
    const float b = extrapolation * extrapolation_factor;
    inv[i] = a + b;
  }
  return inv;
}

// dynamic past max_position_embeddings: transformers computes the grown base from the length
// tensor, so in f32.
std::vector<float> dynamic_inv_freq(double theta, int32_t dim, double factor, int64_t max_pos,
                                    int64_t seq_len) {
  const float scaled = static_cast<float>(factor) * static_cast<float>(seq_len);
  const float ratio = scaled / static_cast<float>(max_pos) - static_cast<float>(factor - 1.0);
  const float growth =
      std::pow(ratio, static_cast<float>(static_cast<double>(dim) / static_cast<double>(dim - 2)));
  const float base = static_cast<float>(theta) * growth;
  return default_inv_freq(base, dim);
}

std::vector<float> longrope_inv_freq(double theta, int32_t dim, const std::vector<double>& ext) {
  const std::vector<float> e = exponents(dim);
  KV_CHECK_EQ(ext.size(), e.size(), "longrope factors");
  const auto base = static_cast<float>(theta);
  std::vector<float> inv(e.size());
  for (size_t i = 0; i < e.size(); ++i)
    inv[i] = 1.0f / (static_cast<float>(ext[i]) * std::pow(base, e[i]));
  return inv;
}

}  // namespace

std::vector<float> rope_inv_freq(const checkpoint::ModelConfig& c, int32_t rotary_dim,
                                 int64_t seq_len) {
  KV_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim {}", rotary_dim);
  const checkpoint::RopeScaling& s = c.rope_scaling;
  const std::string& type = s.rope_type;
  if (type == "yarn") return yarn_inv_freq(c.rope_theta, rotary_dim, s);
  if (type == "longrope") {
    const bool long_seq = seq_len > s.original_max_position_embeddings;
    return longrope_inv_freq(c.rope_theta, rotary_dim, long_seq ? s.long_factor : s.short_factor);
  }
  if (type == "dynamic" && seq_len > c.max_position_embeddings) {
    return dynamic_inv_freq(c.rope_theta, rotary_dim, s.factor, c.max_position_embeddings, seq_len);
  }
  std::vector<float> inv = default_inv_freq(static_cast<float>(c.rope_theta), rotary_dim);
  if (type == "default" || type == "dynamic") return inv;
  if (type == "linear") {
    const auto factor = static_cast<float>(s.factor);
    for (float& f : inv)
      f /= factor;
    return inv;
  }
  KV_CHECK(type == "llama3", "rope_type {} reached rope_inv_freq", type);
  apply_llama3(s, inv);
  return inv;
}

float rope_attention_factor(const checkpoint::ModelConfig& c) {
  const std::string& type = c.rope_scaling.rope_type;
  if (type != "yarn" && type != "longrope") return 1.0f;
  return static_cast<float>(c.rope_scaling.attention_factor);
}

bool rope_depends_on_length(const checkpoint::RopeScaling& s) {
  return s.rope_type == "dynamic" || s.rope_type == "longrope";
}

int32_t RopeTable::row_for(int64_t seq_len) const {
  KV_CHECK_GE(seq_len, 1, "rope row of an empty sequence");
  if (!length_dependent || seq_len <= threshold) return 0;
  if (!dynamic) return 1;
  const int64_t row = seq_len - threshold;
  KV_CHECK_LT(row, rows, "a sequence of {} positions past the rope table ({} rows)", seq_len, rows);
  return static_cast<int32_t>(row);
}

RopeTable make_rope_table(const checkpoint::ModelConfig& c, int32_t rotary_dim,
                          int64_t context_len) {
  RopeTable t;
  t.half = rotary_dim / 2;
  t.attention_factor = rope_attention_factor(c);
  t.length_dependent = rope_depends_on_length(c.rope_scaling);
  t.dynamic = c.rope_scaling.rope_type == "dynamic";
  t.inv_freq = rope_inv_freq(c, rotary_dim, 0);
  if (!t.length_dependent) return t;
  if (t.dynamic) {
    t.threshold = c.max_position_embeddings;
    t.rows = static_cast<int32_t>(std::max<int64_t>(1, context_len - t.threshold + 1));
    for (int32_t r = 1; r < t.rows; ++r) {
      const std::vector<float> row = rope_inv_freq(c, rotary_dim, t.threshold + r);
      t.inv_freq.insert(t.inv_freq.end(), row.begin(), row.end());
    }
  } else {
    t.threshold = c.rope_scaling.original_max_position_embeddings;
    t.rows = 2;
    const std::vector<float> row = rope_inv_freq(c, rotary_dim, t.threshold + 1);
    t.inv_freq.insert(t.inv_freq.end(), row.begin(), row.end());
  }
  return t;
}

}  // namespace kvserve::model

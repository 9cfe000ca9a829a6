// Rotary embedding frequencies (Hugging Face's rope init functions, transformers 5), computed in
// f32 as transformers does so positions rotate identically. docs/rope-scaling.md has the types.
#pragma once

#include <cstdint>
#include <vector>

#include "kvserve/checkpoint/config.h"

namespace kvserve::model {

// The inverse frequencies ([rotary_dim / 2]) transformers uses in a forward whose sequence holds
// `seq_len` positions after it (max(position_ids) + 1; 0: at load, transformers' init):
//   default   1 / theta^(2i / dim)
//   linear    default / factor
//   dynamic   default while seq_len <= max_position_embeddings, else the NTK base
//             theta * (factor * seq_len / max_pos - (factor - 1))^(dim / (dim - 2)), in f32
//   yarn      interpolation (/ factor) and extrapolation blended by the beta_fast / beta_slow ramp
//   longrope  1 / (ext * theta^(2i / dim)), ext = short_factor while seq_len <=
//             original_max_position_embeddings, long_factor past it
//   llama3    low frequencies / factor, the medium band interpolated
std::vector<float> rope_inv_freq(const checkpoint::ModelConfig& config, int32_t rotary_dim,
                                 int64_t seq_len = 0);

// The multiplier transformers applies to cos and sin (attention_scaling): yarn's and longrope's
// attention_factor, 1 for the other types; rounded to f32 as torch multiplies the f32 cos by it.
float rope_attention_factor(const checkpoint::ModelConfig& config);

// dynamic and longrope: the frequencies follow the request's current length, so a forward's
// result depends on how its prompt was split and on who computed a cached prefix (docs).
bool rope_depends_on_length(const checkpoint::RopeScaling& scaling);

// Every frequency row a model serving `context_len` positions can use, for the kernels: row r of
// inv_freq is rope_inv_freq(config, rotary_dim, seq_len) for the lengths row_for maps to r.
struct RopeTable {
  int32_t half = 0;             // rotary_dim / 2
  int32_t rows = 1;             // default, linear, yarn, llama3: 1; longrope: 2; dynamic: more
  std::vector<float> inv_freq;  // [rows, half]
  float attention_factor = 1.0f;
  bool length_dependent = false;  // rope_depends_on_length
  // dynamic: the rows past the first are lengths max_position_embeddings + r; longrope: row 1
  // past original_max_position_embeddings.
  int64_t threshold = 0;
  bool dynamic = false;

  // The row of a request holding `seq_len` positions after this forward (1 <= seq_len <=
  // context_len).
  int32_t row_for(int64_t seq_len) const;
};

RopeTable make_rope_table(const checkpoint::ModelConfig& config, int32_t rotary_dim,
                          int64_t context_len);

}  // namespace kvserve::model

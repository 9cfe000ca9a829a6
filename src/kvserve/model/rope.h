// Rotary embedding frequencies (Hugging Face's rope init functions), computed in f32 as
// transformers does so positions rotate identically.
#pragma once

#include <vector>

#include "kvserve/checkpoint/config.h"

namespace kvserve::model {

// inv_freq[i] = 1 / theta^(2i / dim) for i < dim / 2, then the rope_scaling of the config
// ("default" leaves it, "llama3" scales low frequencies by 1/factor and interpolates the
// medium band between low_freq_factor and high_freq_factor).
std::vector<float> rope_inv_freq(double theta, int32_t rotary_dim,
                                 const checkpoint::RopeScaling& scaling);

}  // namespace kvserve::model

// The tensors of a Hugging Face WhisperForConditionalGeneration checkpoint (names, shapes, in
// state-dict order) and the encoder's sinusoidal position table.
#pragma once

#include <cstdint>
#include <vector>

#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/makemodel/checkpoint_layout.h"

namespace kvserve::makemodel {

// model.encoder.{conv1,conv2,embed_positions,layers.N.*,layer_norm}, then
// model.decoder.{embed_tokens,embed_positions,layers.N.*,layer_norm}. Linear weights are
// [out, in], conv weights [out, in, 3]; k_proj has no bias; proj_out is tied (not stored).
// Layer-norm weights are ones, the encoder positions sinusoidal, everything else normal.
std::vector<CheckpointTensor> whisper_checkpoint_tensors(const checkpoint::WhisperConfig& config,
                                                         DType dtype);

// Element [position, channel] of transformers' `sinusoids(length, channels)` (the encoder's
// embed_positions init): sin(position * inv_timescale[i]) for channel i < channels / 2, cos for
// the rest, with inv_timescale[i] = exp(-i * log(10000) / (channels / 2 - 1)), computed in f32
// steps as torch does.
float whisper_sinusoid(int64_t position, int64_t channel, int64_t channels);

}  // namespace kvserve::makemodel

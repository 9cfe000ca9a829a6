// make-model's Whisper presets and the text files of a Whisper checkpoint: config.json,
// generation_config.json and preprocessor_config.json as transformers writes them for
// WhisperForConditionalGeneration (the tokenizer files are whisper_tokenizer.h's).
#pragma once

#include <string>

#include "kvserve/core/dtype.h"
#include "kvserve/makemodel/presets.h"

namespace kvserve::makemodel {

// openai/whisper-tiny's exact shapes: d_model 384, 4 + 4 layers, 6 heads, ffn 1536, 80 mel bins,
// vocab 51865, 1500 source and 448 target positions.
Preset whisper_tiny_shape_preset();
// openai/whisper-large-v2's shapes: d_model 1280, 32 + 32 layers, 20 heads (head_dim 64), ffn
// 5120, 80 mel bins, the same vocabulary and positions as tiny (large-v3 differs: 128 mels and
// one more token).
Preset whisper_large_v2_shape_preset();
// A small model for tests: d_model 64, 2 + 2 layers, 4 heads, ffn 256, 80 mel bins, 1500 source
// positions (the encoder still takes 3000 frames), 64 target positions, Whisper's vocabulary.
Preset whisper_test_preset();

std::string whisper_config_json_text(const checkpoint::WhisperConfig& c, DType dtype);
// suppress_tokens, begin_suppress_tokens, forced_decoder_ids, lang_to_id, task_to_id, ... of
// openai/whisper-tiny (max_length = max_target_positions).
std::string whisper_generation_config_json_text(const checkpoint::WhisperConfig& c);
// WhisperFeatureExtractor: 16 kHz, n_fft 400, hop 160, 30 s chunks (num_mel_bins features).
std::string whisper_preprocessor_config_json_text(const checkpoint::WhisperConfig& c);

}  // namespace kvserve::makemodel

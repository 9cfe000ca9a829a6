// Whisper (WhisperForConditionalGeneration) configuration: config.json (model_type "whisper")
// and the Whisper fields of generation_config.json.
//
// Absent fields take transformers' WhisperConfig defaults (openai/whisper-tiny's shapes), as
// transformers does when it loads the file. Errors name the file and the field
// ("config.json: d_model (100) is not a multiple of encoder_attention_heads (6)") and are Status
// values: kInvalidArgument for a wrong value, kUnimplemented for an activation other than gelu.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

struct WhisperConfig {
  std::string architecture_name = "WhisperForConditionalGeneration";
  int32_t vocab_size = 51865;
  int32_t num_mel_bins = 80;
  int32_t d_model = 384;
  int32_t encoder_layers = 4;
  int32_t encoder_attention_heads = 6;
  int32_t encoder_ffn_dim = 1536;
  int32_t decoder_layers = 4;
  int32_t decoder_attention_heads = 6;
  int32_t decoder_ffn_dim = 1536;
  int32_t max_source_positions = 1500;  // encoder output length (after the stride-2 conv)
  int32_t max_target_positions = 448;   // decoder positions (learned embedding rows)
  bool scale_embedding = false;         // decoder token embeddings * sqrt(d_model)
  std::string activation_function = "gelu";
  double layer_norm_eps = 1e-5;     // nn.LayerNorm's default; WhisperConfig has no field for it
  bool tie_word_embeddings = true;  // proj_out shares model.decoder.embed_tokens
  DType torch_dtype = DType::kF32;
  std::optional<int32_t> pad_token_id;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> decoder_start_token_id;

  int32_t encoder_head_dim() const { return d_model / encoder_attention_heads; }
  int32_t decoder_head_dim() const { return d_model / decoder_attention_heads; }
  // Mel frames the encoder takes: conv1 (stride 1) then conv2 (stride 2) halve them once.
  int32_t input_frames() const { return 2 * max_source_positions; }
};

Result<WhisperConfig> load_whisper_config(const std::filesystem::path& dir);
// Parses a config.json text (`source` names it in errors).
Result<WhisperConfig> parse_whisper_config(const std::string& json_text, const std::string& source);

// The Whisper part of generation_config.json (WhisperGenerationMixin reads these).
struct WhisperGenerationConfig {
  std::vector<int32_t> suppress_tokens;        // -inf at every step
  std::vector<int32_t> begin_suppress_tokens;  // -inf at the first generated token only
  // (position, token) pairs; a null token (language left to detection) is nullopt.
  std::vector<std::pair<int32_t, std::optional<int32_t>>> forced_decoder_ids;
  std::vector<std::pair<std::string, int32_t>> lang_to_id;  // "<|en|>" -> 50259, by name
  std::vector<std::pair<std::string, int32_t>> task_to_id;  // "transcribe" -> 50359
  std::optional<int32_t> no_timestamps_token_id;
  std::optional<int32_t> decoder_start_token_id;
  std::optional<int32_t> pad_token_id;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> max_length;  // prompt + generated tokens
  bool is_multilingual = false;
  bool return_timestamps = false;

  // The id of "<|xx|>" or of "xx"; nullopt when the language is unknown.
  std::optional<int32_t> language_id(std::string_view language) const;
  std::optional<int32_t> task_id(std::string_view task) const;
};

// A missing file is kNotFound (Whisper cannot be prompted without it).
Result<WhisperGenerationConfig> load_whisper_generation_config(const std::filesystem::path& dir);
Result<WhisperGenerationConfig> parse_whisper_generation_config(const std::string& json_text,
                                                                const std::string& source);

}  // namespace kvserve::checkpoint

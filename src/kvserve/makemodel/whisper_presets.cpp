#include "kvserve/makemodel/whisper_presets.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kvserve/makemodel/whisper_tokenizer.h"

namespace kvserve::makemodel {
namespace {

using nlohmann::json;

checkpoint::WhisperConfig whisper_base_config() {
  checkpoint::WhisperConfig c;
  c.vocab_size = kWhisperVocabSize;
  c.num_mel_bins = 80;
  c.max_source_positions = 1500;
  c.scale_embedding = false;
  c.activation_function = "gelu";
  c.pad_token_id = kWhisperEndOfText;
  c.bos_token_id = kWhisperEndOfText;
  c.eos_token_ids = {kWhisperEndOfText};
  c.decoder_start_token_id = kWhisperStartOfTranscript;
  return c;
}

Preset whisper_preset(std::string name, std::string description, checkpoint::WhisperConfig c) {
  Preset p;
  p.name = std::move(name);
  p.description = std::move(description);
  p.family = ModelFamily::kWhisper;
  p.whisper = std::move(c);
  p.model_max_length = 1024;
  return p;
}

}  // namespace

Preset whisper_tiny_shape_preset() {
  checkpoint::WhisperConfig c = whisper_base_config();
  c.d_model = 384;
  c.encoder_layers = 4;
  c.encoder_attention_heads = 6;
  c.encoder_ffn_dim = 1536;
  c.decoder_layers = 4;
  c.decoder_attention_heads = 6;
  c.decoder_ffn_dim = 1536;
  c.max_target_positions = 448;
  return whisper_preset("whisper-tiny-shape",
                        "openai/whisper-tiny's shapes: 4+4 layers, d_model 384, 6 heads, 80 mels",
                        c);
}

Preset whisper_large_v2_shape_preset() {
  checkpoint::WhisperConfig c = whisper_base_config();
  c.d_model = 1280;
  c.encoder_layers = 32;
  c.encoder_attention_heads = 20;
  c.encoder_ffn_dim = 5120;
  c.decoder_layers = 32;
  c.decoder_attention_heads = 20;
  c.decoder_ffn_dim = 5120;
  c.max_target_positions = 448;
  return whisper_preset(
      "whisper-large-v2-shape",
      "openai/whisper-large-v2's shapes: 32+32 layers, d_model 1280, 20 heads, 80 mels (1.54 B)",
      c);
}

Preset whisper_test_preset() {
  checkpoint::WhisperConfig c = whisper_base_config();
  c.d_model = 64;
  c.encoder_layers = 2;
  c.encoder_attention_heads = 4;
  c.encoder_ffn_dim = 256;
  c.decoder_layers = 2;
  c.decoder_attention_heads = 4;
  c.decoder_ffn_dim = 256;
  c.max_target_positions = 64;
  return whisper_preset("whisper-test",
                        "Whisper, 2+2 layers, d_model 64, 64 target positions, for tests", c);
}

std::string whisper_config_json_text(const checkpoint::WhisperConfig& c, DType dtype) {
  json j;  // std::map: keys sorted, as transformers' to_json_string(sort_keys=True)
  j["activation_dropout"] = 0.0;
  j["activation_function"] = c.activation_function;
  j["apply_spec_augment"] = false;
  j["architectures"] = {c.architecture_name};
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  j["classifier_proj_size"] = 256;
  j["d_model"] = c.d_model;
  j["decoder_attention_heads"] = c.decoder_attention_heads;
  j["decoder_ffn_dim"] = c.decoder_ffn_dim;
  j["decoder_layerdrop"] = 0.0;
  j["decoder_layers"] = c.decoder_layers;
  j["decoder_start_token_id"] =
      c.decoder_start_token_id ? json(*c.decoder_start_token_id) : json(nullptr);
  j["dropout"] = 0.0;
  j["encoder_attention_heads"] = c.encoder_attention_heads;
  j["encoder_ffn_dim"] = c.encoder_ffn_dim;
  j["encoder_layerdrop"] = 0.0;
  j["encoder_layers"] = c.encoder_layers;
  j["eos_token_id"] =
      c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["init_std"] = 0.02;
  j["is_encoder_decoder"] = true;
  j["max_source_positions"] = c.max_source_positions;
  j["max_target_positions"] = c.max_target_positions;
  j["model_type"] = "whisper";
  j["num_hidden_layers"] = c.encoder_layers;
  j["num_mel_bins"] = c.num_mel_bins;
  j["pad_token_id"] = c.pad_token_id ? json(*c.pad_token_id) : json(nullptr);
  j["scale_embedding"] = c.scale_embedding;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["use_cache"] = true;
  j["use_weighted_layer_sum"] = false;
  j["vocab_size"] = c.vocab_size;
  return j.dump(2) + "\n";
}

std::string whisper_generation_config_json_text(const checkpoint::WhisperConfig& c) {
  json lang_to_id = json::object();
  const auto& codes = whisper_language_codes();
  for (size_t i = 0; i < codes.size(); ++i)
    lang_to_id[fmt::format("<|{}|>", codes[i])] = kWhisperFirstLanguage + static_cast<int32_t>(i);
  json j;
  j["begin_suppress_tokens"] = {220, kWhisperEndOfText};
  j["bos_token_id"] = kWhisperEndOfText;
  j["decoder_start_token_id"] = kWhisperStartOfTranscript;
  j["eos_token_id"] = kWhisperEndOfText;
  j["forced_decoder_ids"] =
      json::array({json::array({1, nullptr}), json::array({2, kWhisperTranscribe})});
  j["is_multilingual"] = true;
  j["lang_to_id"] = std::move(lang_to_id);
  j["max_initial_timestamp_index"] = 50;
  j["max_length"] = c.max_target_positions;
  j["no_timestamps_token_id"] = kWhisperNoTimestamps;
  j["pad_token_id"] = kWhisperEndOfText;
  j["prev_sot_token_id"] = kWhisperStartOfPrev;
  j["return_timestamps"] = false;
  j["suppress_tokens"] = whisper_suppress_tokens();
  j["task_to_id"] = {{"transcribe", kWhisperTranscribe}, {"translate", kWhisperTranslate}};
  return j.dump(2) + "\n";
}

std::string whisper_preprocessor_config_json_text(const checkpoint::WhisperConfig& c) {
  json j;
  j["chunk_length"] = 30;
  j["feature_extractor_type"] = "WhisperFeatureExtractor";
  j["feature_size"] = c.num_mel_bins;
  j["hop_length"] = 160;
  j["n_fft"] = 400;
  j["n_samples"] = 480000;
  j["nb_max_frames"] = c.input_frames();
  j["padding_side"] = "right";
  j["padding_value"] = 0.0;
  j["processor_class"] = "WhisperProcessor";
  j["return_attention_mask"] = false;
  j["sampling_rate"] = 16000;
  return j.dump(2) + "\n";
}

}  // namespace kvserve::makemodel

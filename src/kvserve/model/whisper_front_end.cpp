#include "kvserve/model/whisper_front_end.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvserve/audio/audio_file.h"
#include "kvserve/audio/log_mel_config.h"
#include "kvserve/audio/resample.h"

namespace kvserve::model {

Result<std::vector<int32_t>> whisper_prompt(const checkpoint::WhisperConfig& c,
                                            const checkpoint::WhisperGenerationConfig& g,
                                            std::string_view language, std::string_view task) {
  const std::optional<int32_t> start =
      g.decoder_start_token_id ? g.decoder_start_token_id : c.decoder_start_token_id;
  if (!start) return invalid_argument("Whisper: no decoder_start_token_id in the configs");
  std::vector<int32_t> prompt = {*start};
  if (g.is_multilingual) {
    const std::optional<int32_t> lang = g.language_id(std::string(language));
    if (!lang) {
      return invalid_argument("Whisper: unknown language '{}' (not in lang_to_id)", language);
    }
    const std::optional<int32_t> task_id = g.task_id(std::string(task));
    if (!task_id) {
      return invalid_argument("Whisper: unknown task '{}' (not in task_to_id)", task);
    }
    prompt.push_back(*lang);
    prompt.push_back(*task_id);
  }
  if (!g.return_timestamps && g.no_timestamps_token_id) {
    prompt.push_back(*g.no_timestamps_token_id);
  }
  return prompt;
}

Result<std::unique_ptr<WhisperFrontEnd>> WhisperFrontEnd::load(
    const std::filesystem::path& dir, const checkpoint::WhisperConfig& config,
    const checkpoint::WhisperGenerationConfig& generation) {
  std::unique_ptr<WhisperFrontEnd> t(new WhisperFrontEnd());
  t->config_ = config;
  t->generation_ = generation;
  KV_ASSIGN_OR_RETURN(t->tokenizer_, tokenizer::Tokenizer::from_directory(dir));

  // The feature extractor: preprocessor_config.json, or Whisper's defaults without one.
  const checkpoint::WhisperConfig& c = t->config_;
  audio::LogMelConfig mel_config;
  mel_config.feature_size = c.num_mel_bins;
  const std::filesystem::path pre = dir / "preprocessor_config.json";
  std::error_code ec;
  if (std::filesystem::exists(pre, ec)) {
    KV_ASSIGN_OR_RETURN(mel_config, audio::parse_preprocessor_config(pre));
  }
  if (mel_config.feature_size != c.num_mel_bins) {
    return invalid_argument("{}: feature_size {} differs from config.json's num_mel_bins {}",
                            pre.string(), mel_config.feature_size, c.num_mel_bins);
  }
  if (mel_config.num_frames() != c.input_frames()) {
    return invalid_argument("{}: {} frames per window, but the encoder takes {}", pre.string(),
                            mel_config.num_frames(), c.input_frames());
  }
  KV_ASSIGN_OR_RETURN(auto mel, audio::LogMelExtractor::create(mel_config));
  t->mel_.emplace(std::move(mel));
  return t;
}

Status WhisperFrontEnd::check_language_and_task(const std::string& language,
                                                const std::string& task,
                                                std::string_view language_flag,
                                                std::string_view task_flag) const {
  const checkpoint::WhisperGenerationConfig& g = generation_;
  if (g.is_multilingual) {
    if (!g.language_id(language)) {
      return invalid_argument("{}: unknown language '{}' (not in the model's lang_to_id)",
                              language_flag, language);
    }
    if (!g.task_id(task)) {
      return invalid_argument("{}: the model has no task '{}' in task_to_id", task_flag, task);
    }
  } else {
    if (language != "en" && language != "<|en|>") {
      return invalid_argument("{} {}: this model is English-only", language_flag, language);
    }
    if (task != "transcribe") {
      return invalid_argument("{} {}: this model is English-only", task_flag, task);
    }
  }
  return whisper_prompt(config_, g, language, task).status();
}

Result<std::vector<int32_t>> WhisperFrontEnd::prompt(std::string_view language,
                                                     std::string_view task) const {
  return whisper_prompt(config_, generation_, language, task);
}

Result<PreparedAudio> WhisperFrontEnd::finish(Result<audio::AudioClip> clip,
                                              std::string_view name) const {
  const audio::LogMelConfig& mc = mel_->config();
  if (!clip.is_ok()) {
    // audio_file.h's message for a clip over the limit; say why there is a limit.
    if (clip.status().message().find("longer than the limit") != std::string::npos) {
      return invalid_argument("{} (long-form transcription, in {} s chunks, is not supported yet)",
                              clip.status().message(), mc.chunk_length);
    }
    return clip.status();
  }
  PreparedAudio out;
  out.seconds = clip->seconds();
  auto resampled = audio::resample_clip(std::move(clip).value(), mc.sampling_rate);
  if (!resampled.is_ok()) {
    return invalid_argument("{}: {}", name, resampled.status().message());
  }
  out.features = mel_->compute(resampled->samples);
  return out;
}

Result<PreparedAudio> WhisperFrontEnd::prepare_file(const std::filesystem::path& path) const {
  return finish(audio::decode_audio_file(path, max_seconds()), path.string());
}

Result<PreparedAudio> WhisperFrontEnd::prepare_bytes(std::span<const uint8_t> bytes,
                                                     std::string_view name) const {
  return finish(audio::decode_audio_bytes(bytes, max_seconds(), name), name);
}

std::string WhisperFrontEnd::text(const std::vector<int32_t>& tokens) const {
  const std::string s = tokenizer_->decode(tokens, /*skip_special_tokens=*/true);
  const auto first = s.find_first_not_of(" \t\r\n");
  if (first == std::string::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r\n") - first + 1);
}

std::string whisper_language_code(std::string_view language) {
  if (language.starts_with("<|") && language.ends_with("|>")) {
    language = language.substr(2, language.size() - 4);
  }
  return std::string(language);
}

}  // namespace kvserve::model

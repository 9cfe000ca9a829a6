// WhisperFrontEnd: the per-request work around a Whisper model, shared by `kvserve transcribe`
// and the transcription server (both decode through the engine): audio (a file or the bytes of an
// upload) -> decode (at most one window: long-form chunking is not supported yet) -> the
// extractor's rate -> log-mel features; language and task -> the decoder prompt (forced ids);
// generated tokens -> text. Reads only immutable state: safe on any thread
// (LogMelExtractor::compute and Tokenizer::decode are safe concurrently).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/audio/audio_file.h"
#include "kvserve/audio/log_mel.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/core/status.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::model {

// One clip ready for the model.
struct PreparedAudio {
  double seconds = 0.0;         // the decoded duration, at the file's own rate
  std::vector<float> features;  // [num_mel_bins, input_frames()] row-major
};

// The decoder prompt, as transformers' WhisperForConditionalGeneration.generate builds it for
// short-form audio: <|startoftranscript|> [<|lang|> <|task|> if multilingual]
// [<|notimestamps|> unless return_timestamps]. kInvalidArgument for an unknown language or task,
// or configs without a decoder start token.
Result<std::vector<int32_t>> whisper_prompt(const checkpoint::WhisperConfig& config,
                                            const checkpoint::WhisperGenerationConfig& generation,
                                            std::string_view language = "en",
                                            std::string_view task = "transcribe");

class WhisperFrontEnd {
 public:
  // The tokenizer, and the feature extractor from preprocessor_config.json (Whisper's defaults
  // without one), checked against `config` (the checkpoint's config.json).
  static Result<std::unique_ptr<WhisperFrontEnd>> load(
      const std::filesystem::path& dir, const checkpoint::WhisperConfig& config,
      const checkpoint::WhisperGenerationConfig& generation);

  const checkpoint::WhisperConfig& config() const { return config_; }
  const checkpoint::WhisperGenerationConfig& generation_config() const { return generation_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const audio::LogMelExtractor& mel() const { return *mel_; }
  // Seconds of audio one request may hold (the extractor's chunk_length).
  double max_seconds() const { return mel_->config().chunk_length; }

  // kInvalidArgument naming `language_flag` / `task_flag` for a language or task the model does
  // not know (an English-only model knows only "en" and "transcribe").
  Status check_language_and_task(const std::string& language, const std::string& task,
                                 std::string_view language_flag = "--language",
                                 std::string_view task_flag = "--task") const;
  // whisper_prompt with this model's configs.
  Result<std::vector<int32_t>> prompt(std::string_view language = "en",
                                      std::string_view task = "transcribe") const;

  // Decode, resample and log-mel; errors name the file (`name` for bytes). A clip over
  // max_seconds() is kInvalidArgument saying that long-form transcription is not supported.
  Result<PreparedAudio> prepare_file(const std::filesystem::path& path) const;
  Result<PreparedAudio> prepare_bytes(std::span<const uint8_t> bytes,
                                      std::string_view name = "uploaded file") const;

  // The tokenizer's decode of `tokens` with the special tokens skipped, trimmed.
  std::string text(const std::vector<int32_t>& tokens) const;

 private:
  WhisperFrontEnd() = default;
  Result<PreparedAudio> finish(Result<audio::AudioClip> clip, std::string_view name) const;

  checkpoint::WhisperConfig config_;
  checkpoint::WhisperGenerationConfig generation_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::optional<audio::LogMelExtractor> mel_;
};

// "en" for "<|en|>"; other strings as they are.
std::string whisper_language_code(std::string_view language);

}  // namespace kvserve::model

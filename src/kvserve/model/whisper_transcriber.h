// The per-file speech-to-text pipeline shared by `kvserve transcribe` and the transcription
// server: a Whisper checkpoint loaded with its tokenizer and feature extractor; audio (a file or
// the bytes of an upload) -> decode (at most one window: long-form chunking is not supported yet)
// -> the extractor's rate -> log-mel features; generated tokens -> text.
//
// `prepare_*`, `check_language_and_task` and `text` only read state and may run on any thread
// (LogMelExtractor::compute and Tokenizer::decode are safe concurrently); the runner is for one
// thread at a time (the server gives it to its worker thread).
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
#include "kvserve/core/status.h"
#include "kvserve/model/whisper_generate.h"
#include "kvserve/model/whisper_runner.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::model {

// One clip ready for the model.
struct PreparedAudio {
  double seconds = 0.0;         // the decoded duration, at the file's own rate
  std::vector<float> features;  // [num_mel_bins, input_frames()] row-major
};

// True when <dir>/config.json reads and its model_type is "whisper".
bool is_whisper_checkpoint(const std::filesystem::path& dir);

class WhisperTranscriber {
 public:
  // The runner, the tokenizer, and the feature extractor from preprocessor_config.json (Whisper's
  // defaults without one), checked against config.json.
  static Result<std::unique_ptr<WhisperTranscriber>> load(const std::filesystem::path& dir,
                                                          const WhisperRunnerOptions& options);

  WhisperRunner& runner() { return *runner_; }
  const WhisperRunner& runner() const { return *runner_; }
  const tokenizer::Tokenizer& tokenizer() const { return *tokenizer_; }
  const audio::LogMelExtractor& mel() const { return *mel_; }
  // Seconds of audio one request may hold (the extractor's chunk_length).
  double max_seconds() const { return mel_->config().chunk_length; }

  // kInvalidArgument naming `language_flag` / `task_flag` for a language or task the model does
  // not know (an English-only model knows only "en" and "transcribe").
  Status check_language_and_task(const std::string& language, const std::string& task,
                                 std::string_view language_flag = "--language",
                                 std::string_view task_flag = "--task") const;

  // Decode, resample and log-mel; errors name the file (`name` for bytes). A clip over
  // max_seconds() is kInvalidArgument saying that long-form transcription is not supported.
  Result<PreparedAudio> prepare_file(const std::filesystem::path& path) const;
  Result<PreparedAudio> prepare_bytes(std::span<const uint8_t> bytes,
                                      std::string_view name = "uploaded file") const;

  // The tokenizer's decode of `tokens` with the special tokens skipped, trimmed.
  std::string text(const std::vector<int32_t>& tokens) const;

 private:
  WhisperTranscriber() = default;
  Result<PreparedAudio> finish(Result<audio::AudioClip> clip, std::string_view name) const;

  std::unique_ptr<WhisperRunner> runner_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::optional<audio::LogMelExtractor> mel_;
};

// "en" for "<|en|>"; other strings as they are.
std::string whisper_language_code(std::string_view language);

}  // namespace kvserve::model

// The feature-extractor settings of a Whisper-style checkpoint (preprocessor_config.json).
#pragma once

#include <cstdint>
#include <filesystem>

#include "kvserve/core/status.h"

namespace kvserve::audio {

// Defaults are Whisper's (openai/whisper-*; large-v3 has feature_size 128).
struct LogMelConfig {
  int32_t feature_size = 80;      // mel bins
  int32_t sampling_rate = 16000;  // Hz; the audio is resampled to this first
  int32_t hop_length = 160;       // samples between STFT frames
  int32_t n_fft = 400;            // FFT size = frame length = Hann window length
  int32_t chunk_length = 30;      // seconds per window
  int64_t n_samples = 480000;     // chunk_length * sampling_rate: audio is padded/cut to this

  // Frames in the output: the STFT's 1 + n_samples / hop_length frames, less the last one.
  int64_t num_frames() const;
  // Frequency bins of the one-sided spectrum.
  int32_t num_frequency_bins() const { return n_fft / 2 + 1; }
};

// kInvalidArgument naming the first field out of range (`source` prefixes the message).
Status validate(const LogMelConfig& config, std::string_view source);

// Reads feature_size, sampling_rate, hop_length, n_fft, chunk_length and n_samples (each optional,
// defaults above; n_samples, when present, must equal chunk_length * sampling_rate, as transformers
// recomputes it). padding_value and dither other than 0 are kUnimplemented. Errors name the file
// and the field.
Result<LogMelConfig> parse_preprocessor_config(const std::filesystem::path& path);

}  // namespace kvserve::audio

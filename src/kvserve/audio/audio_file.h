// Decoding audio files (a path, or the bytes of an HTTP upload) into mono float32 samples.
//
// libsndfile reads the container: WAV (PCM, float, A-law/mu-law...), FLAC and OGG Vorbis/Opus,
// plus whatever else the system libsndfile decodes (MP3 from 1.1 on). Channels are mixed to mono
// by averaging; integer PCM is scaled to [-1, 1). Every failure is a Status that names the file
// ("uploaded file" for bytes): not audio or an unsupported encoding (kInvalidArgument), no frames
// (kInvalidArgument), longer than the caller's limit (kInvalidArgument), a missing file
// (kNotFound) or one the system refuses to read (kIoError). Garbage bytes are an error, never a
// crash; decoding stops as soon as the limit is passed, so a lying header cannot make it allocate
// more than the limit allows.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::audio {

// Mono audio at its file's rate.
struct AudioClip {
  std::vector<float> samples;
  int sample_rate = 0;

  double seconds() const {
    return sample_rate > 0 ? static_cast<double>(samples.size()) / sample_rate : 0.0;
  }
};

// Sample rates outside [kMinSampleRate, kMaxSampleRate] are rejected as unsupported (libsamplerate
// resamples by ratios within [1/256, 256]).
inline constexpr int kMinSampleRate = 1000;
inline constexpr int kMaxSampleRate = 768000;

// `max_seconds` (> 0) bounds the decoded duration.
Result<AudioClip> decode_audio_file(const std::filesystem::path& path, double max_seconds);

// The bytes of a whole file in memory (an HTTP upload). `name` is used in error messages.
Result<AudioClip> decode_audio_bytes(std::span<const uint8_t> bytes, double max_seconds,
                                     std::string_view name = "uploaded file");

}  // namespace kvserve::audio

// Sample-rate conversion to the rate a model's feature extractor expects (16 kHz for Whisper).
//
// libsamplerate's SRC_SINC_MEDIUM_QUALITY: a 90% passband (flat to 7.2 kHz at a 16 kHz output) and
// at least 97 dB SNR by libsamplerate's documentation. Whisper's reference pipelines resample with
// soxr "HQ" (librosa's default, a ~91% passband) or ffmpeg; the medium sinc converter matches that
// bandwidth, stays far below 16-bit quantisation noise, and runs about 3x faster than
// SRC_SINC_BEST_QUALITY (97% passband), which would only differ above 7.2 kHz, where Whisper's top
// mel bands see little speech energy. 30 s at 44.1 kHz to 16 kHz, one core of the 2-core build
// machine under load: best 4.6 s, medium 1.6 s, fastest 0.56 s (80% passband: loses 6.4-8 kHz).
#pragma once

#include <span>
#include <vector>

#include "kvserve/audio/audio_file.h"
#include "kvserve/core/status.h"

namespace kvserve::audio {

inline constexpr int kWhisperSampleRate = 16000;

// Converts mono samples from `from_rate` to `to_rate` (each within [kMinSampleRate,
// kMaxSampleRate], else kInvalidArgument). The output has about n * to_rate / from_rate samples;
// equal rates return a copy.
Result<std::vector<float>> resample(std::span<const float> samples, int from_rate, int to_rate);

// `clip` at `to_rate` (16 kHz by default); the identity, without copying, when already there.
Result<AudioClip> resample_clip(AudioClip clip, int to_rate = kWhisperSampleRate);

}  // namespace kvserve::audio

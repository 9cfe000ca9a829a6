// Whisper's log-mel spectrogram, numerically as transformers' WhisperFeatureExtractor computes it
// on its numpy path (`_np_extract_fbank_features` over `audio_utils.spectrogram`):
//
//   audio (float32) padded with zeros or cut to n_samples
//   -> reflect-pad n_fft / 2 on both sides (center=True)
//   -> frames of n_fft every hop_length samples, in float64, times a periodic Hann window
//   -> one-sided DFT; each bin rounded to complex64 as numpy stores it; power |X|^2 in float64
//   -> slaney mel filter bank (0 to 8000 Hz, slaney norm), floor 1e-10, log10, then float32
//   -> drop the last frame; clamp to (max - 8); (x + 4) / 4
//
// Output: [feature_size, num_frames] float32, row-major (3000 frames for Whisper). The DFT is FFTW
// (double precision, one plan per extractor, created under a process-wide lock because FFTW's
// planner is not thread-safe); `compute` only executes the plan and is safe to call concurrently.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "kvserve/audio/log_mel_config.h"
#include "kvserve/core/status.h"

namespace kvserve::audio {

// transformers' mel_filter_bank(num_frequency_bins, num_mel_filters, min_frequency,
// max_frequency, sampling_rate, norm="slaney", mel_scale="slaney"), transposed:
// [num_mel_filters, num_frequency_bins] row-major, float64.
std::vector<double> slaney_mel_filter_bank(int num_frequency_bins, int num_mel_filters,
                                           double min_frequency, double max_frequency,
                                           int sampling_rate);

// transformers' window_function(n, "hann"): the periodic Hann window, np.hanning(n + 1)[:-1].
std::vector<double> periodic_hann_window(int n);

class LogMelExtractor {
 public:
  static Result<LogMelExtractor> create(const LogMelConfig& config);

  // `audio` is mono at config().sampling_rate; longer audio is cut, shorter padded with zeros.
  // Returns [feature_size, num_frames] row-major.
  std::vector<float> compute(std::span<const float> audio) const;

  const LogMelConfig& config() const { return config_; }
  // [feature_size, num_frequency_bins], the bank applied (Whisper: max_frequency 8000 Hz).
  const std::vector<double>& mel_filters() const { return filters_; }

 private:
  struct Plan;  // the FFTW plan, destroyed under the planner lock

  LogMelExtractor() = default;

  LogMelConfig config_;
  std::vector<double> window_;
  std::vector<double> filters_;
  // Per mel filter, the [first, last) frequency bins with a nonzero weight.
  std::vector<std::pair<int, int>> filter_support_;
  std::shared_ptr<const Plan> plan_;
};

}  // namespace kvserve::audio

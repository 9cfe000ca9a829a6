// Log-mel features with FFTW; see log_mel.h for the pipeline and the numpy steps it reproduces.
#include "kvserve/audio/log_mel.h"

#include <fftw3.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <numbers>

namespace kvserve::audio {
namespace {

// WhisperFeatureExtractor builds its bank with max_frequency=8000.0 whatever the sampling rate.
constexpr double kWhisperMaxFrequency = 8000.0;
constexpr double kMelFloor = 1e-10;

// FFTW's planner (plan creation and destruction) is not thread-safe; fftw_execute_* is.
std::mutex& fftw_planner_mutex() {
  static std::mutex m;
  return m;
}

// The slaney mel scale of transformers' hertz_to_mel / mel_to_hertz (librosa's htk=False):
// linear below 1 kHz (3 mels per 200 Hz), logarithmic above (27 mels per factor 6.4).
constexpr double kMinLogHertz = 1000.0;
constexpr double kMinLogMel = 15.0;

double hertz_to_mel_slaney(double hz) {
  if (hz >= kMinLogHertz) return kMinLogMel + std::log(hz / kMinLogHertz) * (27.0 / std::log(6.4));
  return 3.0 * hz / 200.0;
}

double mel_to_hertz_slaney(double mel) {
  if (mel >= kMinLogMel) return kMinLogHertz * std::exp(std::log(6.4) / 27.0 * (mel - kMinLogMel));
  return 200.0 * mel / 3.0;
}

// np.linspace(start, stop, num): start + i * step, the last element exactly `stop`.
std::vector<double> linspace(double start, double stop, int num) {
  std::vector<double> v(static_cast<size_t>(num));
  const double step = num > 1 ? (stop - start) / (num - 1) : 0.0;
  for (int i = 0; i < num; ++i)
    v[static_cast<size_t>(i)] = i * step + start;
  if (num > 1) v.back() = stop;
  return v;
}

}  // namespace

std::vector<double> slaney_mel_filter_bank(int num_frequency_bins, int num_mel_filters,
                                           double min_frequency, double max_frequency,
                                           int sampling_rate) {
  KV_CHECK_GE(num_frequency_bins, 2);
  KV_CHECK_GE(num_mel_filters, 1);
  KV_CHECK_LE(min_frequency, max_frequency);
  const std::vector<double> mels = linspace(
      hertz_to_mel_slaney(min_frequency), hertz_to_mel_slaney(max_frequency), num_mel_filters + 2);
  std::vector<double> edges(mels.size());  // filter corners in Hz
  for (size_t i = 0; i < mels.size(); ++i)
    edges[i] = mel_to_hertz_slaney(mels[i]);
  // np.linspace(0, sampling_rate // 2, num_frequency_bins): integer Nyquist.
  const std::vector<double> bin_hz = linspace(0.0, sampling_rate / 2, num_frequency_bins);

  std::vector<double> bank(static_cast<size_t>(num_mel_filters) * num_frequency_bins);
  for (int m = 0; m < num_mel_filters; ++m) {
    const double lower = edges[m], center = edges[m + 1], upper = edges[m + 2];
    const double enorm = 2.0 / (upper - lower);
    for (int k = 0; k < num_frequency_bins; ++k) {
      // transformers: slopes = filter_freqs - fft_freqs; down = -slopes[m] / diff[m];
      // up = slopes[m + 2] / diff[m + 1]; max(0, min(down, up)).
      const double down = -(lower - bin_hz[k]) / (center - lower);
      const double up = (upper - bin_hz[k]) / (upper - center);
      bank[static_cast<size_t>(m) * num_frequency_bins + k] =
          std::max(0.0, std::min(down, up)) * enorm;
    }
  }
  return bank;
}

std::vector<double> periodic_hann_window(int n) {
  KV_CHECK_GE(n, 1);
  // np.hanning(M) = 0.5 + 0.5 * cos(pi * k / (M - 1)) for k = 1 - M, 3 - M, ..., M - 1; M = n + 1.
  std::vector<double> w(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    w[static_cast<size_t>(j)] = 0.5 + 0.5 * std::cos(std::numbers::pi * (2 * j - n) / n);
  }
  return w;
}

struct LogMelExtractor::Plan {
  fftw_plan plan = nullptr;
  ~Plan() {
    const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    fftw_destroy_plan(plan);
  }
};

namespace {

// fftw_malloc'd buffers have the alignment the plan was made for.
struct FftwBuffer {
  explicit FftwBuffer(size_t bytes) : p(fftw_malloc(bytes)) { KV_CHECK(p != nullptr); }
  ~FftwBuffer() { fftw_free(p); }
  FftwBuffer(const FftwBuffer&) = delete;
  FftwBuffer& operator=(const FftwBuffer&) = delete;
  void* p;
};

}  // namespace

Result<LogMelExtractor> LogMelExtractor::create(const LogMelConfig& config) {
  KV_RETURN_IF_ERROR(validate(config, "log-mel config"));
  LogMelExtractor e;
  e.config_ = config;
  e.window_ = periodic_hann_window(config.n_fft);
  const int bins = config.num_frequency_bins();
  e.filters_ = slaney_mel_filter_bank(bins, config.feature_size, 0.0, kWhisperMaxFrequency,
                                      config.sampling_rate);
  e.filter_support_.resize(static_cast<size_t>(config.feature_size));
  for (int m = 0; m < config.feature_size; ++m) {
    const double* row = e.filters_.data() + static_cast<size_t>(m) * bins;
    int first = 0, last = bins;
    while (first < bins && row[first] == 0.0)
      ++first;
    while (last > first && row[last - 1] == 0.0)
      --last;
    e.filter_support_[static_cast<size_t>(m)] = {first, last};
  }

  FftwBuffer in(sizeof(double) * static_cast<size_t>(config.n_fft));
  FftwBuffer out(sizeof(fftw_complex) * static_cast<size_t>(bins));
  auto plan = std::make_shared<Plan>();
  {
    const std::lock_guard<std::mutex> lock(fftw_planner_mutex());
    // FFTW_ESTIMATE: deterministic, and leaves the arrays alone while planning.
    plan->plan = fftw_plan_dft_r2c_1d(config.n_fft, static_cast<double*>(in.p),
                                      static_cast<fftw_complex*>(out.p), FFTW_ESTIMATE);
  }
  if (plan->plan == nullptr) {
    return make_status(StatusCode::kInternal, "FFTW could not plan a real DFT of size {}",
                       config.n_fft);
  }
  e.plan_ = std::move(plan);
  return e;
}

std::vector<float> LogMelExtractor::compute(std::span<const float> audio) const {
  const int64_t n = config_.n_samples;
  const int n_fft = config_.n_fft;
  const int64_t pad = n_fft / 2;
  const int64_t hop = config_.hop_length;
  const int bins = config_.num_frequency_bins();
  const int mels = config_.feature_size;
  const int64_t frames = config_.num_frames();  // the STFT's frames less the last

  // Zero-pad or cut to n samples, then reflect-pad (np.pad mode="reflect": the edge sample is not
  // repeated). validate() guarantees n > pad.
  std::vector<float> padded(static_cast<size_t>(n + 2 * pad), 0.0f);
  const int64_t used = std::min<int64_t>(n, static_cast<int64_t>(audio.size()));
  std::copy(audio.begin(), audio.begin() + used, padded.begin() + pad);
  for (int64_t j = 0; j < pad; ++j) {
    padded[static_cast<size_t>(j)] = padded[static_cast<size_t>(2 * pad - j)];
    padded[static_cast<size_t>(pad + n + j)] = padded[static_cast<size_t>(pad + n - 2 - j)];
  }

  FftwBuffer in_buf(sizeof(double) * static_cast<size_t>(n_fft));
  FftwBuffer out_buf(sizeof(fftw_complex) * static_cast<size_t>(bins));
  auto* in = static_cast<double*>(in_buf.p);
  auto* out = static_cast<fftw_complex*>(out_buf.p);
  std::vector<double> power(static_cast<size_t>(bins));
  std::vector<float> features(static_cast<size_t>(mels) * frames);

  for (int64_t t = 0; t < frames; ++t) {
    const float* frame = padded.data() + t * hop;
    for (int j = 0; j < n_fft; ++j)
      in[j] = static_cast<double>(frame[j]) * window_[j];
    fftw_execute_dft_r2c(plan_->plan, in, out);
    for (int k = 0; k < bins; ++k) {
      // numpy stores the spectrogram as complex64 before taking |X|^2 in float64.
      const double re = static_cast<float>(out[k][0]);
      const double im = static_cast<float>(out[k][1]);
      power[static_cast<size_t>(k)] = re * re + im * im;
    }
    for (int m = 0; m < mels; ++m) {
      const double* row = filters_.data() + static_cast<size_t>(m) * bins;
      const auto [first, last] = filter_support_[static_cast<size_t>(m)];
      double acc = 0.0;
      for (int k = first; k < last; ++k)
        acc += row[k] * power[static_cast<size_t>(k)];
      features[static_cast<size_t>(m) * frames + t] =
          static_cast<float>(std::log10(std::max(kMelFloor, acc)));
    }
  }

  // Whisper's dynamic range clamp and scaling, in float32 as numpy does on the float32 array.
  const float top = *std::max_element(features.begin(), features.end());
  const auto floor_value = static_cast<float>(static_cast<double>(top) - 8.0);
  for (float& x : features)
    x = (std::max(x, floor_value) + 4.0f) / 4.0f;
  return features;
}

}  // namespace kvserve::audio

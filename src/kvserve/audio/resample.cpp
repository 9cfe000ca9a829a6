// libsamplerate's one-shot converter (src_simple), which is reentrant: no shared state.
#include "kvserve/audio/resample.h"

#include <samplerate.h>

#include <cmath>
#include <limits>
#include <utility>

namespace kvserve::audio {
namespace {

constexpr int kConverter = SRC_SINC_MEDIUM_QUALITY;  // see resample.h for the choice

Status check_rate(int rate, const char* which) {
  if (rate < kMinSampleRate || rate > kMaxSampleRate) {
    return invalid_argument("resample: {} rate {} Hz is outside [{}, {}] Hz", which, rate,
                            kMinSampleRate, kMaxSampleRate);
  }
  return Status::ok();
}

}  // namespace

Result<std::vector<float>> resample(std::span<const float> samples, int from_rate, int to_rate) {
  KV_RETURN_IF_ERROR(check_rate(from_rate, "input"));
  KV_RETURN_IF_ERROR(check_rate(to_rate, "output"));
  if (from_rate == to_rate || samples.empty()) {
    return std::vector<float>(samples.begin(), samples.end());
  }
  // libsamplerate counts frames in a long.
  if (samples.size() > static_cast<size_t>(std::numeric_limits<long>::max() / 2)) {
    return invalid_argument("resample: {} samples is too many", samples.size());
  }
  const double ratio = static_cast<double>(to_rate) / from_rate;
  const auto capacity =
      static_cast<size_t>(std::ceil(static_cast<double>(samples.size()) * ratio)) + 16;
  std::vector<float> out(capacity);
  SRC_DATA data{};
  data.data_in = samples.data();
  data.input_frames = static_cast<long>(samples.size());
  data.data_out = out.data();
  data.output_frames = static_cast<long>(out.size());
  data.src_ratio = ratio;
  if (const int err = src_simple(&data, kConverter, /*channels=*/1); err != 0) {
    return make_status(StatusCode::kInternal, "resample {} -> {} Hz: {}", from_rate, to_rate,
                       src_strerror(err));
  }
  out.resize(static_cast<size_t>(data.output_frames_gen));
  return out;
}

Result<AudioClip> resample_clip(AudioClip clip, int to_rate) {
  if (clip.sample_rate == to_rate) return clip;
  KV_ASSIGN_OR_RETURN(std::vector<float> samples,
                      resample(clip.samples, clip.sample_rate, to_rate));
  return AudioClip{std::move(samples), to_rate};
}

}  // namespace kvserve::audio

// libsndfile decoding: a path through sf_open, bytes through sf_open_virtual over a cursor.
#include "kvserve/audio/audio_file.h"

#include <sndfile.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <system_error>

namespace kvserve::audio {
namespace {

// SF_MAX_CHANNELS in libsndfile's sources; no real file comes near it.
constexpr int kMaxChannels = 1024;
constexpr sf_count_t kChunkFrames = 4096;

struct SndfileCloser {
  void operator()(SNDFILE* f) const { sf_close(f); }
};
using SndfilePtr = std::unique_ptr<SNDFILE, SndfileCloser>;

// A read-only cursor over caller-owned bytes, for SF_VIRTUAL_IO.
struct ByteCursor {
  const uint8_t* data = nullptr;
  sf_count_t size = 0;
  sf_count_t pos = 0;
};

sf_count_t vio_get_filelen(void* user) {
  return static_cast<ByteCursor*>(user)->size;
}

sf_count_t vio_seek(sf_count_t offset, int whence, void* user) {
  auto* c = static_cast<ByteCursor*>(user);
  sf_count_t base = 0;
  switch (whence) {
    case SEEK_SET:
      base = 0;
      break;
    case SEEK_CUR:
      base = c->pos;
      break;
    case SEEK_END:
      base = c->size;
      break;
    default:
      return -1;
  }
  // Offsets come from file headers: clamp instead of overflowing or leaving the buffer.
  if (offset < 0) {
    c->pos = offset < -base ? 0 : base + offset;
  } else {
    c->pos = offset > c->size - base ? c->size : base + offset;
  }
  return c->pos;
}

sf_count_t vio_read(void* ptr, sf_count_t count, void* user) {
  auto* c = static_cast<ByteCursor*>(user);
  if (count <= 0 || c->pos >= c->size) return 0;
  const sf_count_t n = std::min(count, c->size - c->pos);
  std::memcpy(ptr, c->data + c->pos, static_cast<size_t>(n));
  c->pos += n;
  return n;
}

sf_count_t vio_write(const void* /*ptr*/, sf_count_t /*count*/, void* /*user*/) {
  return 0;
}

sf_count_t vio_tell(void* user) {
  return static_cast<ByteCursor*>(user)->pos;
}

// Why sf_open / sf_open_virtual returned null. NOTE: libsndfile keeps the error of a failed open
// in a process-wide variable, so under concurrent failures the text may be another thread's; the
// status code and the name are ours either way.
Status open_error(std::string_view name) {
  const int code = sf_error(nullptr);
  const std::string why = sf_strerror(nullptr);
  if (code == SF_ERR_SYSTEM) {
    return make_status(StatusCode::kIoError, "{}: cannot read: {}", name, why);
  }
  return invalid_argument("{}: not a supported audio file (WAV, FLAC or OGG expected): {}", name,
                          why);
}

Status too_long(std::string_view name, double seconds, double max_seconds) {
  return invalid_argument("{}: {:.2f} s of audio is longer than the limit of {} s", name, seconds,
                          max_seconds);
}

// Reads every frame of an open file, mixing channels to mono.
Result<AudioClip> read_all(SNDFILE* file, const SF_INFO& info, std::string_view name,
                           double max_seconds) {
  if (info.channels < 1 || info.channels > kMaxChannels) {
    return invalid_argument("{}: unsupported channel count {}", name, info.channels);
  }
  if (info.samplerate < kMinSampleRate || info.samplerate > kMaxSampleRate) {
    return invalid_argument("{}: unsupported sample rate {} Hz (supported: {} to {} Hz)", name,
                            info.samplerate, kMinSampleRate, kMaxSampleRate);
  }
  const double rate = info.samplerate;
  // The header's frame count may be absent (SF_COUNT_MAX) or wrong; it only allows an early
  // answer. The loop below enforces the limit on what is actually decoded.
  if (info.frames > 0 && info.frames != SF_COUNT_MAX &&
      static_cast<double>(info.frames) / rate > max_seconds) {
    return too_long(name, static_cast<double>(info.frames) / rate, max_seconds);
  }
  // Clamped so that an absurd limit cannot overflow the conversion.
  const auto max_frames = static_cast<sf_count_t>(std::floor(std::min(max_seconds * rate, 9e18)));
  const int channels = info.channels;

  AudioClip clip;
  clip.sample_rate = info.samplerate;
  if (info.frames > 0 && info.frames <= max_frames) {
    clip.samples.reserve(static_cast<size_t>(info.frames));
  }
  std::vector<float> chunk(static_cast<size_t>(kChunkFrames) * channels);
  sf_count_t total = 0;
  while (true) {
    const sf_count_t got = sf_readf_float(file, chunk.data(), kChunkFrames);
    if (got <= 0) break;
    total += got;
    if (total > max_frames) {
      return invalid_argument("{}: audio is longer than the limit of {} s", name, max_seconds);
    }
    for (sf_count_t f = 0; f < got; ++f) {
      const float* frame = chunk.data() + f * channels;
      double sum = 0.0;
      for (int ch = 0; ch < channels; ++ch)
        sum += frame[ch];
      const auto mono = static_cast<float>(sum / channels);
      if (!std::isfinite(mono)) {
        return invalid_argument("{}: sample {} is not a finite number", name,
                                static_cast<int64_t>(clip.samples.size()));
      }
      clip.samples.push_back(mono);
    }
  }
  if (const int code = sf_error(file); code != SF_ERR_NO_ERROR) {
    return invalid_argument("{}: decoding failed after {} frames: {}", name, total,
                            sf_error_number(code));
  }
  if (clip.samples.empty()) {
    return invalid_argument("{}: contains no audio (0 frames)", name);
  }
  return clip;
}

}  // namespace

Result<AudioClip> decode_audio_file(const std::filesystem::path& path, double max_seconds) {
  KV_CHECK_GT(max_seconds, 0.0);
  const std::string name = path.string();
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return make_status(StatusCode::kNotFound, "{}: no such file", name);
  }
  if (!std::filesystem::is_regular_file(path, ec)) {
    return invalid_argument("{}: not a regular file", name);
  }
  if (std::filesystem::file_size(path, ec) == 0 && !ec) {
    return invalid_argument("{}: empty file (0 bytes)", name);
  }
  SF_INFO info{};
  SndfilePtr file(sf_open(name.c_str(), SFM_READ, &info));
  if (file == nullptr) return open_error(name);
  return read_all(file.get(), info, name, max_seconds);
}

Result<AudioClip> decode_audio_bytes(std::span<const uint8_t> bytes, double max_seconds,
                                     std::string_view name) {
  KV_CHECK_GT(max_seconds, 0.0);
  if (bytes.empty()) return invalid_argument("{}: empty file (0 bytes)", name);
  ByteCursor cursor{bytes.data(), static_cast<sf_count_t>(bytes.size()), 0};
  SF_VIRTUAL_IO io{vio_get_filelen, vio_seek, vio_read, vio_write, vio_tell};
  SF_INFO info{};
  SndfilePtr file(sf_open_virtual(&io, SFM_READ, &info, &cursor));
  if (file == nullptr) return open_error(name);
  return read_all(file.get(), info, name, max_seconds);
}

}  // namespace kvserve::audio

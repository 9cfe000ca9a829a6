// The audio front end (src/kvserve/audio/): decoding, resampling and Whisper log-mel features.
//
// Log-mel features are compared with a float64 reference written here from the definitions (a
// direct O(N^2) DFT, mel filters from the slaney formulas), and, when tests/fixtures/audio/
// features.json exists, with transformers' WhisperFeatureExtractor (tools/make_audio_fixtures.py).
// Decoding round-trips files written here with libsndfile; resampling is compared with analytic
// sines. Randomised tests print their seed; set KVSERVE_TEST_SEED to replay one.
#include <gtest/gtest.h>
#include <sndfile.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "kvserve/audio/audio_file.h"
#include "kvserve/audio/log_mel.h"
#include "kvserve/audio/log_mel_config.h"
#include "kvserve/audio/resample.h"
#include "unit/model_test_util.h"

namespace kvserve::audio {
namespace {

namespace fs = std::filesystem;
constexpr double kPi = std::numbers::pi;

uint64_t test_seed() {
  if (const char* s = std::getenv("KVSERVE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

using model::testing::TempDir;  // the suites' mkdtemp scratch directory

std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Writes interleaved frames with libsndfile: int16 data for PCM formats, float otherwise.
void write_sound(const fs::path& path, int format, int channels, int rate,
                 const std::vector<short>* pcm, const std::vector<float>* floats) {
  SF_INFO info{};
  info.channels = channels;
  info.samplerate = rate;
  info.format = format;
  SNDFILE* f = sf_open(path.c_str(), SFM_WRITE, &info);
  ASSERT_NE(f, nullptr) << path << ": " << sf_strerror(nullptr);
  if (pcm != nullptr) {
    EXPECT_EQ(sf_writef_short(f, pcm->data(), static_cast<sf_count_t>(pcm->size()) / channels),
              static_cast<sf_count_t>(pcm->size()) / channels);
  }
  if (floats != nullptr) {
    EXPECT_EQ(
        sf_writef_float(f, floats->data(), static_cast<sf_count_t>(floats->size()) / channels),
        static_cast<sf_count_t>(floats->size()) / channels);
  }
  sf_close(f);
}

std::vector<float> sine(int rate, double seconds, double hz, double amplitude) {
  std::vector<float> v(static_cast<size_t>(std::llround(rate * seconds)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = static_cast<float>(amplitude * std::sin(2.0 * kPi * hz * static_cast<double>(i) / rate));
  }
  return v;
}

// --- float64 reference log-mel, written from the definitions ------------------------------

double ref_hz_to_mel(double hz) {  // slaney: linear to 1 kHz, then 27 mels per factor 6.4
  return hz < 1000.0 ? hz * 3.0 / 200.0 : 15.0 + 27.0 * std::log(hz / 1000.0) / std::log(6.4);
}
double ref_mel_to_hz(double mel) {
  return mel < 15.0 ? mel * 200.0 / 3.0 : 1000.0 * std::pow(6.4, (mel - 15.0) / 27.0);
}

// [n_mels][bins]: triangles between consecutive mel-spaced corners, area-normalised (2 / width).
std::vector<std::vector<double>> ref_filters(int n_mels, int n_fft, int rate) {
  const int bins = n_fft / 2 + 1;
  std::vector<double> corner(static_cast<size_t>(n_mels + 2));
  for (int i = 0; i < n_mels + 2; ++i) {
    corner[static_cast<size_t>(i)] = ref_mel_to_hz(ref_hz_to_mel(8000.0) * i / (n_mels + 1));
  }
  std::vector<std::vector<double>> w(static_cast<size_t>(n_mels), std::vector<double>(bins));
  for (int m = 0; m < n_mels; ++m) {
    const double lo = corner[m], mid = corner[m + 1], hi = corner[m + 2];
    for (int k = 0; k < bins; ++k) {
      const double f = static_cast<double>(k) * (rate / 2) / (bins - 1);
      double tri = 0.0;
      if (f > lo && f <= mid) tri = (f - lo) / (mid - lo);
      if (f > mid && f < hi) tri = (hi - f) / (hi - mid);
      w[m][k] = tri * 2.0 / (hi - lo);
    }
  }
  return w;
}

// Power spectra [frames][bins] of the centred, reflect-padded, Hann-windowed frames (direct DFT);
// the last STFT frame is left out.
std::vector<std::vector<double>> ref_power(const std::vector<float>& audio, const LogMelConfig& c) {
  const int64_t n = c.n_samples;
  std::vector<double> x(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < std::min<int64_t>(n, static_cast<int64_t>(audio.size())); ++i) {
    x[i] = audio[i];
  }
  auto at = [&](int64_t i) {  // reflection about the first and the last sample
    if (i < 0) i = -i;
    if (i >= n) i = 2 * (n - 1) - i;
    return x[static_cast<size_t>(i)];
  };
  const int n_fft = c.n_fft, bins = n_fft / 2 + 1;
  std::vector<double> cos_t(static_cast<size_t>(bins) * n_fft), sin_t(cos_t.size());
  for (int k = 0; k < bins; ++k) {
    for (int j = 0; j < n_fft; ++j) {
      const double a = 2.0 * kPi * static_cast<double>((int64_t{k} * j) % n_fft) / n_fft;
      cos_t[static_cast<size_t>(k) * n_fft + j] = std::cos(a);
      sin_t[static_cast<size_t>(k) * n_fft + j] = std::sin(a);
    }
  }
  const int64_t frames = (n + 2 * (n_fft / 2) - n_fft) / c.hop_length;  // STFT frames - 1
  std::vector<std::vector<double>> power(static_cast<size_t>(frames), std::vector<double>(bins));
  std::vector<double> frame(static_cast<size_t>(n_fft));
  for (int64_t t = 0; t < frames; ++t) {
    for (int j = 0; j < n_fft; ++j) {
      const double hann = 0.5 - 0.5 * std::cos(2.0 * kPi * j / n_fft);
      frame[j] = at(t * c.hop_length - n_fft / 2 + j) * hann;
    }
    for (int k = 0; k < bins; ++k) {
      double re = 0.0, im = 0.0;
      const double* cr = &cos_t[static_cast<size_t>(k) * n_fft];
      const double* sr = &sin_t[static_cast<size_t>(k) * n_fft];
      for (int j = 0; j < n_fft; ++j) {
        re += frame[j] * cr[j];
        im -= frame[j] * sr[j];
      }
      power[t][k] = re * re + im * im;
    }
  }
  return power;
}

// [n_mels * frames] row-major.
std::vector<double> ref_log_mel(const std::vector<std::vector<double>>& power, int n_mels,
                                const LogMelConfig& c) {
  const auto w = ref_filters(n_mels, c.n_fft, c.sampling_rate);
  const size_t frames = power.size();
  std::vector<double> out(static_cast<size_t>(n_mels) * frames);
  for (size_t t = 0; t < frames; ++t) {
    for (int m = 0; m < n_mels; ++m) {
      double acc = 0.0;
      for (size_t k = 0; k < power[t].size(); ++k)
        acc += w[m][k] * power[t][k];
      out[m * frames + t] = std::log10(std::max(acc, 1e-10));
    }
  }
  const double top = *std::max_element(out.begin(), out.end());
  for (double& v : out)
    v = (std::max(v, top - 8.0) + 4.0) / 4.0;
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<double>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0.0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return d;
}

// --- log-mel -------------------------------------------------------------------------------

TEST(LogMel, FilterBankMatchesSlaneyFormulas) {
  for (int n_mels : {80, 128}) {
    const auto bank = slaney_mel_filter_bank(201, n_mels, 0.0, 8000.0, 16000);
    const auto ref = ref_filters(n_mels, 400, 16000);
    ASSERT_EQ(bank.size(), static_cast<size_t>(n_mels) * 201);
    for (int m = 0; m < n_mels; ++m) {
      double row_sum = 0.0;
      for (int k = 0; k < 201; ++k) {
        EXPECT_NEAR(bank[static_cast<size_t>(m) * 201 + k], ref[m][k], 1e-12) << m << " " << k;
        row_sum += bank[static_cast<size_t>(m) * 201 + k];
      }
      EXPECT_GT(row_sum, 0.0) << "mel filter " << m << " is empty";
    }
  }
}

TEST(LogMel, PeriodicHannWindow) {
  const auto w = periodic_hann_window(400);
  ASSERT_EQ(w.size(), 400u);
  for (int j = 0; j < 400; ++j)
    EXPECT_NEAR(w[j], std::pow(std::sin(kPi * j / 400), 2), 1e-15);
}

void expect_matches_reference(const std::vector<float>& audio, const std::string& what) {
  LogMelConfig c;
  const auto power = ref_power(audio, c);
  for (int n_mels : {80, 128}) {
    c.feature_size = n_mels;
    auto e = LogMelExtractor::create(c);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    const std::vector<float> got = e->compute(audio);
    ASSERT_EQ(got.size(), static_cast<size_t>(n_mels) * 3000);
    const double d = max_abs_diff(got, ref_log_mel(power, n_mels, c));
    std::cout << "[ log-mel  ] " << what << ", " << n_mels << " bins: max |diff| " << d << "\n";
    EXPECT_LT(d, 1e-6) << what << ", " << n_mels << " bins";
  }
}

TEST(LogMel, RandomAudioMatchesFloat64Reference) {
  const uint64_t seed = test_seed();
  std::cout << "[ seed     ] " << seed << std::endl;
  SCOPED_TRACE(testing::Message() << "KVSERVE_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  // 31 s: longer than the 30 s window, so the input is cut.
  std::vector<float> audio(31 * 16000);
  for (float& v : audio)
    v = noise(rng);
  expect_matches_reference(audio, "random 31 s");
}

TEST(LogMel, SineMatchesFloat64Reference) {
  // 5 s of a 1 kHz tone, then zero padding: the clamp at max - 8 is exercised.
  expect_matches_reference(sine(16000, 5.0, 1000.0, 0.5), "1 kHz sine 5 s");
}

TEST(LogMel, ShortAudioAndEmptyAudio) {
  auto e = LogMelExtractor::create(LogMelConfig{});
  ASSERT_TRUE(e.is_ok());
  // Silence: every mel value is the 1e-10 floor, so everything is (-10 + 4) / 4.
  const std::vector<float> silent = e->compute({});
  ASSERT_EQ(silent.size(), 80u * 3000);
  for (float v : silent)
    ASSERT_FLOAT_EQ(v, -1.5f);
  const std::vector<float> one = {0.5f};
  const std::vector<float> f = e->compute(one);
  EXPECT_TRUE(std::all_of(f.begin(), f.end(), [](float v) { return std::isfinite(v); }));
}

TEST(LogMel, NonDefaultConfigMatchesReference) {
  LogMelConfig c;
  c.feature_size = 40;
  c.n_fft = 512;
  c.hop_length = 128;
  c.chunk_length = 1;
  c.n_samples = 16000;
  ASSERT_EQ(c.num_frames(), 125);
  auto e = LogMelExtractor::create(c);
  ASSERT_TRUE(e.is_ok()) << e.status().to_string();
  const std::vector<float> audio = sine(16000, 0.7, 440.0, 0.3);
  const double d = max_abs_diff(e->compute(audio), ref_log_mel(ref_power(audio, c), 40, c));
  EXPECT_LT(d, 1e-5);
}

TEST(LogMel, InvalidConfigIsAStatus) {
  LogMelConfig c;
  c.hop_length = 0;
  auto e = LogMelExtractor::create(c);
  ASSERT_FALSE(e.is_ok());
  EXPECT_NE(e.status().message().find("hop_length"), std::string::npos) << e.status().message();
  c = LogMelConfig{};
  c.n_samples = 100;  // shorter than n_fft
  EXPECT_FALSE(LogMelExtractor::create(c).is_ok());
}

// --- preprocessor_config.json --------------------------------------------------------------

TEST(LogMelConfig, ParsesWhisperPreprocessorConfig) {
  TempDir dir;
  const fs::path p = dir / "preprocessor_config.json";
  std::ofstream(p) << R"({"chunk_length": 30, "feature_extractor_type": "WhisperFeatureExtractor",
    "feature_size": 128, "hop_length": 160, "n_fft": 400, "n_samples": 480000,
    "nb_max_frames": 3000, "padding_side": "right", "padding_value": 0.0,
    "processor_class": "WhisperProcessor", "return_attention_mask": false,
    "sampling_rate": 16000})";
  auto c = parse_preprocessor_config(p);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->feature_size, 128);
  EXPECT_EQ(c->n_samples, 480000);
  EXPECT_EQ(c->num_frames(), 3000);

  std::ofstream(p) << "{}";
  c = parse_preprocessor_config(p);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->feature_size, 80);
  EXPECT_EQ(c->hop_length, 160);
}

TEST(LogMelConfig, ErrorsNameTheFileAndTheField) {
  TempDir dir;
  const fs::path p = dir / "preprocessor_config.json";
  struct Case {
    std::string json, field;
    StatusCode code;
  };
  const std::vector<Case> cases = {
      {R"({"feature_size": "80"})", "feature_size", StatusCode::kInvalidArgument},
      {R"({"hop_length": -160})", "hop_length", StatusCode::kInvalidArgument},
      {R"({"n_fft": 1.5})", "n_fft", StatusCode::kInvalidArgument},
      {R"({"n_samples": 160000})", "n_samples", StatusCode::kInvalidArgument},
      {R"({"padding_value": 1.0})", "padding_value", StatusCode::kUnimplemented},
      {R"({"n_fft": 1})", "n_fft", StatusCode::kInvalidArgument},
      {R"([1, 2])", "", StatusCode::kInvalidArgument},
      {R"({"feature_size": )", "", StatusCode::kInvalidArgument},
  };
  for (const Case& k : cases) {
    std::ofstream(p) << k.json;
    auto c = parse_preprocessor_config(p);
    ASSERT_FALSE(c.is_ok()) << k.json;
    EXPECT_EQ(c.status().code(), k.code) << k.json << ": " << c.status().to_string();
    EXPECT_NE(c.status().message().find(p.string()), std::string::npos) << c.status().message();
    EXPECT_NE(c.status().message().find(k.field), std::string::npos) << c.status().message();
  }
  auto missing = parse_preprocessor_config(dir / "nope.json");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

// --- decoding ------------------------------------------------------------------------------

struct Stereo {
  std::vector<short> pcm;   // interleaved L R
  std::vector<float> mono;  // (L + R) / 2 as int16 / 32768
};

Stereo stereo_pcm(int frames) {
  Stereo s;
  for (int i = 0; i < frames; ++i) {
    const auto l = static_cast<short>(std::lround(16000 * std::sin(2 * kPi * 440 * i / 16000.0)));
    const auto r =
        static_cast<short>(std::lround(8000 * std::sin(2 * kPi * 660 * i / 16000.0)) - 3000);
    s.pcm.push_back(l);
    s.pcm.push_back(r);
    s.mono.push_back(static_cast<float>((l / 32768.0 + r / 32768.0) / 2.0));
  }
  return s;
}

void expect_same_clip(const AudioClip& a, const AudioClip& b) {
  EXPECT_EQ(a.sample_rate, b.sample_rate);
  ASSERT_EQ(a.samples.size(), b.samples.size());
  for (size_t i = 0; i < a.samples.size(); ++i)
    ASSERT_EQ(a.samples[i], b.samples[i]) << i;
}

AudioClip decode_both_ways(const fs::path& path) {
  auto from_file = decode_audio_file(path, 60.0);
  EXPECT_TRUE(from_file.is_ok()) << from_file.status().to_string();
  if (!from_file.is_ok()) return {};
  const auto bytes = read_bytes(path);
  auto from_bytes = decode_audio_bytes(bytes, 60.0);
  EXPECT_TRUE(from_bytes.is_ok()) << from_bytes.status().to_string();
  if (from_bytes.is_ok()) expect_same_clip(*from_file, *from_bytes);
  return std::move(from_file).value();
}

TEST(AudioFile, LosslessStereoRoundTripsMixToMono) {
  TempDir dir;
  const Stereo s = stereo_pcm(8000);
  for (const auto& [name, format] : std::vector<std::pair<std::string, int>>{
           {"int16.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16},
           {"int16.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16}}) {
    SCOPED_TRACE(name);
    write_sound(dir / name, format, 2, 22050, &s.pcm, nullptr);
    const AudioClip clip = decode_both_ways(dir / name);
    EXPECT_EQ(clip.sample_rate, 22050);
    ASSERT_EQ(clip.samples.size(), s.mono.size());
    for (size_t i = 0; i < s.mono.size(); ++i)
      ASSERT_EQ(clip.samples[i], s.mono[i]) << i;
  }
}

TEST(AudioFile, FloatWavIsExact) {
  TempDir dir;
  const std::vector<float> x = sine(44100, 0.25, 1234.5, 0.9);
  write_sound(dir / "f.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1, 44100, nullptr, &x);
  const AudioClip clip = decode_both_ways(dir / "f.wav");
  EXPECT_EQ(clip.sample_rate, 44100);
  EXPECT_EQ(clip.samples, x);
}

TEST(AudioFile, OggVorbisRoundTrip) {
  TempDir dir;
  const std::vector<float> mono = sine(48000, 1.0, 440.0, 0.5);
  std::vector<float> stereo;  // the same tone on both channels: the mix is the tone
  for (float v : mono)
    stereo.insert(stereo.end(), {v, v});
  write_sound(dir / "a.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 2, 48000, nullptr, &stereo);
  const AudioClip clip = decode_both_ways(dir / "a.ogg");
  EXPECT_EQ(clip.sample_rate, 48000);
  ASSERT_NEAR(static_cast<double>(clip.samples.size()), 48000.0, 1024.0);
  // Lossy: compare the middle by energy of the error.
  double err = 0.0, sig = 0.0;
  for (size_t i = 4800; i < 43200; ++i) {
    err += std::pow(clip.samples[i] - mono[i], 2);
    sig += std::pow(mono[i], 2);
  }
  const double snr_db = 10.0 * std::log10(sig / err);
  std::cout << "[ vorbis   ] SNR " << snr_db << " dB\n";
  EXPECT_GT(snr_db, 20.0);
}

// Every error is a Status naming the file, never a crash.
void expect_error(const Result<AudioClip>& r, std::string_view name, std::string_view words) {
  ASSERT_FALSE(r.is_ok()) << "expected an error mentioning '" << words << "'";
  EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
}

TEST(AudioFile, ErrorsAreStatuses) {
  TempDir dir;
  // Missing, a directory, empty.
  auto missing = decode_audio_file(dir / "missing.wav", 30);
  expect_error(missing, "missing.wav", "no such file");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  fs::create_directories(dir / "d.wav");
  expect_error(decode_audio_file(dir / "d.wav", 30), "d.wav", "not a regular file");
  write_bytes(dir / "empty.wav", {});
  expect_error(decode_audio_file(dir / "empty.wav", 30), "empty.wav", "empty");
  expect_error(decode_audio_bytes({}, 30), "uploaded file", "empty");
  expect_error(decode_audio_bytes({}, 30, "upload.flac"), "upload.flac", "empty");

  // Not audio.
  const std::string text = "this is a text file, not audio\n";
  const std::vector<uint8_t> text_bytes(text.begin(), text.end());
  write_bytes(dir / "notes.wav", text_bytes);
  auto not_audio = decode_audio_file(dir / "notes.wav", 30);
  expect_error(not_audio, "notes.wav", "not a supported audio file");
  EXPECT_EQ(not_audio.status().code(), StatusCode::kInvalidArgument);
  expect_error(decode_audio_bytes(text_bytes, 30), "uploaded file", "not a supported audio file");

  // A WAV with no frames.
  write_sound(dir / "zero.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1, 16000, nullptr, nullptr);
  expect_error(decode_audio_file(dir / "zero.wav", 30), "zero.wav", "0 frames");
  expect_error(decode_audio_bytes(read_bytes(dir / "zero.wav"), 30), "uploaded file", "0 frames");

  // Too long: by the header, and for bytes too.
  const Stereo s = stereo_pcm(32000);  // 2 s at 16 kHz
  write_sound(dir / "two.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 2, 16000, &s.pcm, nullptr);
  expect_error(decode_audio_file(dir / "two.wav", 1.5), "two.wav",
               "longer than the limit of 1.5 s");
  expect_error(decode_audio_bytes(read_bytes(dir / "two.wav"), 1.0), "uploaded file",
               "longer than the limit");
  EXPECT_TRUE(decode_audio_file(dir / "two.wav", 2.0).is_ok());

  // NaN samples in a float WAV; an unsupported sample rate.
  std::vector<float> nan_audio(100, 0.1f);
  nan_audio[37] = std::nanf("");
  write_sound(dir / "nan.wav", SF_FORMAT_WAV | SF_FORMAT_FLOAT, 1, 16000, nullptr, &nan_audio);
  expect_error(decode_audio_file(dir / "nan.wav", 30), "nan.wav", "not a finite number");
  const std::vector<short> slow(100, 1000);
  write_sound(dir / "slow.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 1, 500, &slow, nullptr);
  expect_error(decode_audio_file(dir / "slow.wav", 30), "slow.wav", "unsupported sample rate");
}

TEST(AudioFile, TruncatedFilesNeverCrash) {
  TempDir dir;
  const Stereo s = stereo_pcm(4000);
  const std::vector<float> f = sine(16000, 0.5, 300.0, 0.5);
  write_sound(dir / "a.wav", SF_FORMAT_WAV | SF_FORMAT_PCM_16, 2, 16000, &s.pcm, nullptr);
  write_sound(dir / "a.flac", SF_FORMAT_FLAC | SF_FORMAT_PCM_16, 2, 16000, &s.pcm, nullptr);
  write_sound(dir / "a.ogg", SF_FORMAT_OGG | SF_FORMAT_VORBIS, 1, 16000, nullptr, &f);
  // A WAV cut inside its 44-byte header is not audio.
  const std::vector<uint8_t> wav = read_bytes(dir / "a.wav");
  for (size_t cut : {4u, 12u, 20u, 36u, 43u}) {
    const std::vector<uint8_t> head(wav.begin(), wav.begin() + static_cast<std::ptrdiff_t>(cut));
    expect_error(decode_audio_bytes(head, 30), "uploaded file", "");
    write_bytes(dir / "cut.wav", head);
    expect_error(decode_audio_file(dir / "cut.wav", 30), "cut.wav", "");
  }
  // Any cut of any format: an error, or the frames before the cut.
  for (const char* name : {"a.wav", "a.flac", "a.ogg"}) {
    const std::vector<uint8_t> whole = read_bytes(dir / name);
    for (size_t cut = 0; cut < whole.size(); cut += std::max<size_t>(1, whole.size() / 97)) {
      const std::vector<uint8_t> part(whole.begin(),
                                      whole.begin() + static_cast<std::ptrdiff_t>(cut));
      auto r = decode_audio_bytes(part, 30, name);
      if (r.is_ok()) {
        EXPECT_FALSE(r->samples.empty());
        EXPECT_LE(r->samples.size(), 8000u + 1024u) << name << " cut at " << cut;
      } else {
        EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
      }
    }
  }
}

TEST(AudioFile, RandomBytesNeverCrash) {
  const uint64_t seed = test_seed();
  std::cout << "[ seed     ] " << seed << std::endl;
  SCOPED_TRACE(testing::Message() << "KVSERVE_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  // Plain noise, and noise behind each format's magic so the parsers go deeper.
  using namespace std::string_literals;  // the magics contain NUL bytes
  const std::vector<std::string> magics = {
      ""s,     "RIFF\x24\x08\x00\x00WAVEfmt "s, "fLaC"s,
      "OggS"s, "RIFF\xff\xff\xff\xffWAVE"s,     "ID3\x04\x00"s};
  int errors = 0, total = 0;
  for (int round = 0; round < 400; ++round) {
    const std::string& magic = magics[static_cast<size_t>(round) % magics.size()];
    std::vector<uint8_t> bytes(magic.begin(), magic.end());
    const size_t n = std::uniform_int_distribution<size_t>(0, 4096)(rng);
    for (size_t i = 0; i < n; ++i)
      bytes.push_back(static_cast<uint8_t>(rng()));
    auto r = decode_audio_bytes(bytes, 30);
    ++total;
    if (!r.is_ok()) {
      ++errors;
      EXPECT_NE(r.status().message().find("uploaded file"), std::string::npos);
    } else {
      EXPECT_FALSE(r->samples.empty());
    }
  }
  std::cout << "[ garbage  ] " << errors << " of " << total << " inputs rejected\n";
  EXPECT_GT(errors, total * 9 / 10);
}

// --- resampling ----------------------------------------------------------------------------

TEST(Resample, SinesKeepFrequencyAndAmplitude) {
  for (int rate : {8000, 22050, 44100, 48000}) {
    for (double hz : {440.0, 3000.0}) {
      SCOPED_TRACE(testing::Message() << rate << " Hz input, " << hz << " Hz tone");
      const std::vector<float> in = sine(rate, 1.0, hz, 0.5);
      auto out = resample(in, rate, 16000);
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      EXPECT_NEAR(static_cast<double>(out->size()), 16000.0, 2.0);
      // Away from the edges (filter start-up), the output is the analytic tone at 16 kHz.
      double worst = 0.0;
      for (size_t n = 800; n + 800 < out->size(); ++n) {
        const double want = 0.5 * std::sin(2.0 * kPi * hz * static_cast<double>(n) / 16000.0);
        worst = std::max(worst, std::abs((*out)[n] - want));
      }
      std::cout << "[ resample ] " << rate << " -> 16000, " << hz << " Hz: max |err| " << worst
                << "\n";
      EXPECT_LT(worst, 1e-4);
    }
  }
}

TEST(Resample, IdentityAndErrors) {
  const std::vector<float> x = sine(16000, 0.1, 440.0, 0.5);
  auto same = resample(x, 16000, 16000);
  ASSERT_TRUE(same.is_ok());
  EXPECT_EQ(*same, x);
  auto clip = resample_clip(AudioClip{x, 16000});
  ASSERT_TRUE(clip.is_ok());
  EXPECT_EQ(clip->samples, x);
  EXPECT_EQ(clip->sample_rate, 16000);
  auto bad = resample(x, 0, 16000);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("input rate 0 Hz"), std::string::npos);
  auto down = resample_clip(AudioClip{sine(48000, 0.5, 440.0, 0.5), 48000});
  ASSERT_TRUE(down.is_ok());
  EXPECT_EQ(down->sample_rate, 16000);
  EXPECT_NEAR(static_cast<double>(down->samples.size()), 8000.0, 2.0);
}

// --- fixtures: espeak-ng clips and transformers' features ----------------------------------

const fs::path kFixtures = fs::path(KVSERVE_FIXTURES_DIR) / "audio";

TEST(AudioFixtures, NativeRateClipResamplesLikeTheCommitted16kClip) {
  // testing_22050.wav is espeak-ng's output; testing_16k.wav was resampled from it by the
  // independent Kaiser-sinc resampler in tools/make_audio_fixtures.py (92% passband, ours 90%).
  auto native = decode_audio_file(kFixtures / "testing_22050.wav", 30);
  ASSERT_TRUE(native.is_ok()) << native.status().to_string();
  EXPECT_EQ(native->sample_rate, 22050);
  auto ours = resample_clip(std::move(native).value());
  ASSERT_TRUE(ours.is_ok());
  auto theirs = decode_audio_file(kFixtures / "testing_16k.wav", 30);
  ASSERT_TRUE(theirs.is_ok());
  ASSERT_NEAR(static_cast<double>(ours->samples.size()),
              static_cast<double>(theirs->samples.size()), 2.0);
  double err = 0.0, sig = 0.0;
  for (size_t i = 0; i < std::min(ours->samples.size(), theirs->samples.size()); ++i) {
    err += std::pow(ours->samples[i] - theirs->samples[i], 2);
    sig += std::pow(theirs->samples[i], 2);
  }
  const double rel = std::sqrt(err / sig);
  std::cout << "[ resample ] espeak clip vs the reference resampler: relative RMS error " << rel
            << "\n";
  EXPECT_LT(rel, 0.02);
}

std::vector<float> read_f32(const fs::path& path, size_t offset_bytes, size_t count) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  in.seekg(static_cast<std::streamoff>(offset_bytes));
  std::vector<float> v(count);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_EQ(in.gcount(), static_cast<std::streamsize>(count * sizeof(float))) << path;
  return v;  // little-endian on every machine kvserve targets
}

TEST(AudioFixtures, MatchTransformersWhisperFeatureExtractor) {
  const fs::path json_path = kFixtures / "features.json";
  if (!fs::exists(json_path)) {
    GTEST_SKIP() << json_path << " is absent: run tools/make_audio_fixtures.py (see "
                 << "tests/fixtures/audio/README.md)";
  }
  const nlohmann::json doc = nlohmann::json::parse(std::ifstream(json_path));
  std::cout << "[ fixture  ] transformers " << doc.value("transformers_version", "?") << "\n";

  for (const auto& entry : doc.at("mel_filters")) {
    const int f = entry.at("feature_size");
    const auto theirs = read_f32(kFixtures / entry.at("file").get<std::string>(), 0,
                                 static_cast<size_t>(201 * f));            // [201, f]
    const auto ours = slaney_mel_filter_bank(201, f, 0.0, 8000.0, 16000);  // [f, 201]
    for (int m = 0; m < f; ++m) {
      for (int k = 0; k < 201; ++k) {
        ASSERT_NEAR(ours[static_cast<size_t>(m) * 201 + k], theirs[static_cast<size_t>(k) * f + m],
                    1e-7)
            << "filter " << m << " bin " << k;
      }
    }
  }

  ASSERT_FALSE(doc.at("clips").empty());
  for (const auto& clip : doc.at("clips")) {
    const std::string wav = clip.at("wav");
    SCOPED_TRACE(wav);
    auto audio = decode_audio_file(kFixtures / wav, 30);
    ASSERT_TRUE(audio.is_ok()) << audio.status().to_string();
    ASSERT_EQ(audio->sample_rate, 16000);
    ASSERT_EQ(static_cast<int64_t>(audio->samples.size()), clip.at("num_samples").get<int64_t>());
    for (const auto& feat : clip.at("features")) {
      LogMelConfig c;
      c.feature_size = feat.at("feature_size");
      auto e = LogMelExtractor::create(c);
      ASSERT_TRUE(e.is_ok());
      const std::vector<float> ours = e->compute(audio->samples);
      const int64_t frames = 3000, stored = feat.at("frames_stored");
      const fs::path bin = kFixtures / feat.at("file").get<std::string>();
      const auto head = read_f32(bin, 0, static_cast<size_t>(c.feature_size * stored));
      const auto frame_mean = read_f32(bin, feat.at("frame_mean_offset_bytes").get<size_t>(),
                                       static_cast<size_t>(frames));
      double worst = 0.0;
      for (int m = 0; m < c.feature_size; ++m) {
        for (int64_t t = 0; t < stored; ++t) {
          worst = std::max(worst, std::abs(static_cast<double>(ours[m * frames + t]) -
                                           head[static_cast<size_t>(m * stored + t)]));
        }
      }
      double worst_mean = 0.0, total = 0.0;
      for (int64_t t = 0; t < frames; ++t) {
        double mean = 0.0;
        for (int m = 0; m < c.feature_size; ++m)
          mean += ours[m * frames + t];
        total += mean;
        worst_mean = std::max(worst_mean, std::abs(mean / c.feature_size - frame_mean[t]));
      }
      const auto [lo, hi] = std::minmax_element(ours.begin(), ours.end());
      std::cout << "[ fixture  ] " << wav << ", " << c.feature_size << " bins: max |diff| " << worst
                << " over " << stored << " frames, frame means " << worst_mean << "\n";
      EXPECT_LT(worst, 1e-5);
      EXPECT_LT(worst_mean, 1e-5);
      EXPECT_NEAR(*hi, feat.at("max").get<double>(), 1e-5);
      EXPECT_NEAR(*lo, feat.at("min").get<double>(), 1e-5);
      EXPECT_NEAR(total / (frames * c.feature_size), feat.at("mean").get<double>(), 1e-5);
    }
  }
}

TEST(AudioFixtures, ClipsDecodeTheSameFromBytes) {
  for (const char* name :
       {"hello_16k.wav", "spoons_16k.wav", "testing_16k.wav", "testing_22050.wav"}) {
    SCOPED_TRACE(name);
    const AudioClip clip = decode_both_ways(kFixtures / name);
    EXPECT_GT(clip.seconds(), 1.0);
    EXPECT_LT(clip.seconds(), 2.0);
  }
}

}  // namespace
}  // namespace kvserve::audio

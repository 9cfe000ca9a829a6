#include "support/whisper_test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <regex>
#include <sstream>

#include "kvserve/audio/audio_file.h"
#include "kvserve/audio/log_mel.h"
#include "kvserve/audio/resample.h"
#include "kvserve/checkpoint/safetensors_writer.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/makemodel/whisper_checkpoint_layout.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::model::testing {

namespace fs = std::filesystem;

Status make_whisper_checkpoint(const std::string& preset, const fs::path& dir, DType dtype,
                               uint64_t seed) {
  makemodel::MakeModelOptions o;
  o.preset = preset;
  o.output = dir;
  o.dtype = dtype;
  o.seed = seed;
  o.force = true;
  return makemodel::make_model(o).status();
}

Status redraw_whisper_weights(const fs::path& dir, float spread, std::mt19937_64& rng) {
  KV_ASSIGN_OR_RETURN(const checkpoint::WhisperConfig config, checkpoint::load_whisper_config(dir));
  std::vector<checkpoint::TensorSpec> specs;
  for (const makemodel::CheckpointTensor& t :
       makemodel::whisper_checkpoint_tensors(config, DType::kF32))
    specs.push_back(t.spec);
  return checkpoint::write_safetensors_streaming(
      dir / "model.safetensors", specs, {{"format", "pt"}},
      [&](const checkpoint::TensorSpec& spec, checkpoint::ByteSink& out) -> Status {
        std::normal_distribution<float> d(0.0f, spread);
        const bool norm_weight = spec.name.find("layer_norm.weight") != std::string::npos;
        std::vector<float> v(*checkpoint::shape_numel(spec.shape));
        for (float& x : v)
          x = (norm_weight ? 1.0f : 0.0f) + d(rng);
        return out.write(v.data(), v.size() * sizeof(float));
      });
}

Status use_one_attention_head(const fs::path& dir) {
  const fs::path path = dir / "config.json";
  std::stringstream text;
  text << std::ifstream(path).rdbuf();
  const std::regex heads(R"re(("(en|de)coder_attention_heads": )\d+)re");
  const std::string patched = std::regex_replace(text.str(), heads, "$011");
  if (patched == text.str()) return invalid_argument("no attention heads in {}", path.string());
  std::ofstream out(path);
  out << patched;
  return out.good() ? Status::ok() : invalid_argument("could not write {}", path.string());
}

std::vector<float> synthetic_features(int32_t mels, int32_t frames) {
  std::vector<float> f(static_cast<size_t>(mels) * frames);
  for (int32_t m = 0; m < mels; ++m) {
    for (int32_t t = 0; t < frames; ++t) {
      const double v =
          0.6 * std::sin(0.013 * t * (m + 1) + 0.7 * m) + 0.2 * std::cos(0.031 * t) - 0.1;
      f[static_cast<size_t>(m) * frames + t] = static_cast<float>(v);
    }
  }
  return f;
}

std::vector<float> random_features(std::mt19937_64& rng, int32_t mels, int32_t frames) {
  std::normal_distribution<float> d(0.0f, 0.5f);
  std::vector<float> f(static_cast<size_t>(mels) * frames);
  for (float& x : f)
    x = d(rng);
  return f;
}

Result<std::vector<float>> audio_features(const fs::path& file, const audio::LogMelConfig& mel,
                                          double* seconds) {
  KV_ASSIGN_OR_RETURN(audio::AudioClip clip, audio::decode_audio_file(file, 30.0));
  if (seconds != nullptr) *seconds = clip.seconds();
  KV_ASSIGN_OR_RETURN(const audio::AudioClip at16k, audio::resample_clip(std::move(clip)));
  KV_ASSIGN_OR_RETURN(const audio::LogMelExtractor extractor, audio::LogMelExtractor::create(mel));
  return extractor.compute(at16k.samples);
}

std::unique_ptr<WhisperRunner> make_whisper_runner(const fs::path& dir, int32_t page_size,
                                                   mem::EncoderKvLayout layout,
                                                   const std::string& backend,
                                                   const std::string& device) {
  WhisperRunnerOptions o;
  o.device = device;
  o.page_size = page_size;
  o.layout = layout;
  o.attention_backend = backend;
  o.max_running_requests = 4;
  // No device pool on CUDA: GPU suites run side by side (ctest -j), none may take the whole GPU.
  o.device_pool.reserve = false;
  auto r = WhisperRunner::create(dir, o);
  if (!r.is_ok()) {
    ADD_FAILURE() << dir.string() << ": " << r.status().to_string();
    return nullptr;
  }
  return std::move(r).value();
}

Result<LibraryTranscript> transcribe_with_library(const fs::path& model_dir, const fs::path& file,
                                                  const WhisperGenerateOptions& options,
                                                  float temperature, uint64_t seed) {
  LibraryTranscript t;
  KV_ASSIGN_OR_RETURN(const audio::LogMelConfig mel,
                      audio::parse_preprocessor_config(model_dir / "preprocessor_config.json"));
  KV_ASSIGN_OR_RETURN(std::vector<float> features, audio_features(file, mel, &t.seconds));
  KV_ASSIGN_OR_RETURN(std::unique_ptr<WhisperRunner> runner,
                      WhisperRunner::create(model_dir, WhisperRunnerOptions{}));
  const std::vector<WhisperRequest> requests = {
      {.features = std::move(features), .prompt = {}, .temperature = temperature, .seed = seed}};
  KV_ASSIGN_OR_RETURN(const std::vector<WhisperGenerateResult> results,
                      whisper_generate(*runner, requests, options));
  t.tokens = results.at(0).tokens;
  KV_ASSIGN_OR_RETURN(const std::unique_ptr<tokenizer::Tokenizer> tok,
                      tokenizer::Tokenizer::from_directory(model_dir));
  t.text = tok->decode(t.tokens, /*skip_special_tokens=*/true);
  t.text.erase(0, t.text.find_first_not_of(" \t\r\n"));
  t.text.erase(t.text.find_last_not_of(" \t\r\n") + 1);
  return t;
}

double rel_l2(const std::vector<float>& ref, const std::vector<float>& got) {
  KV_CHECK_EQ(ref.size(), got.size());
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(got[i]) - ref[i];
    num += d * d;
    den += double(ref[i]) * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

std::vector<float> varlen_attention_reference(
    const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
    const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_kv, int heads, int kv_heads,
    int dim, float scaling, bool causal, int32_t window_left, float logit_softcap) {
  std::vector<float> out(q.size(), 0.0f);
  for (size_t s = 0; s + 1 < cu_q.size(); ++s) {
    const int64_t q_len = cu_q[s + 1] - cu_q[s];
    const int64_t kv_len = cu_kv[s + 1] - cu_kv[s];
    for (int64_t i = 0; i < q_len; ++i) {
      const int64_t seen = causal ? std::clamp<int64_t>(kv_len - q_len + i + 1, 0, kv_len) : kv_len;
      const int64_t lo =
          window_left >= 0 ? std::clamp<int64_t>(kv_len - q_len + i - window_left, 0, seen) : 0;
      for (int h = 0; h < heads; ++h) {
        const int g = h / (heads / kv_heads);
        const float* qr = q.data() + ((cu_q[s] + i) * heads + h) * dim;
        std::vector<double> sc(seen);
        double mx = -INFINITY;
        for (int64_t j = lo; j < seen; ++j) {
          const float* kr = k.data() + ((cu_kv[s] + j) * kv_heads + g) * dim;
          double dot = 0;
          for (int d = 0; d < dim; ++d)
            dot += double(qr[d]) * kr[d];
          sc[j] = dot * scaling;
          if (logit_softcap > 0) sc[j] = logit_softcap * std::tanh(sc[j] / logit_softcap);
          mx = std::max(mx, sc[j]);
        }
        double sum = 0;
        for (int64_t j = lo; j < seen; ++j) {
          sc[j] = std::exp(sc[j] - mx);
          sum += sc[j];
        }
        float* o = out.data() + ((cu_q[s] + i) * heads + h) * dim;
        for (int d = 0; d < dim; ++d) {
          double acc = 0;
          for (int64_t j = lo; j < seen; ++j)
            acc += sc[j] * v[((cu_kv[s] + j) * kv_heads + g) * dim + d];
          o[d] = seen > lo ? static_cast<float>(acc / sum) : 0.0f;
        }
      }
    }
  }
  return out;
}

}  // namespace kvserve::model::testing

// What the Whisper tests share (tests/unit/whisper_model_test.cpp, transcription_server_test.cpp,
// cli_test.cpp, varlen_attention_test.cpp; tests/gpu/whisper_model_gpu_test.cpp,
// whisper_ops_gpu_test.cpp): checkpoints made into a directory, features, runners, the
// file-to-text path through the library's pieces, and float64 references. Library
// kvserve_test_support (tests/CMakeLists.txt), linked into every unit and GPU suite.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kvserve/audio/log_mel_config.h"
#include "kvserve/core/status.h"
#include "kvserve/model/whisper_generate.h"
#include "kvserve/model/whisper_runner.h"

namespace kvserve::model::testing {

// make-model's `preset` written into `dir` (replacing what is there) in `dtype`, with make-model's
// `seed`.
Status make_whisper_checkpoint(const std::string& preset, const std::filesystem::path& dir,
                               DType dtype = DType::kF32, uint64_t seed = 0);

// Rewrites <dir>/model.safetensors (f32, the names and shapes of its config.json) with every
// weight drawn from `rng`: N(0, spread), layer-norm weights 1 + N(0, spread), so that attention
// is far from uniform and every weight matters.
Status redraw_whisper_weights(const std::filesystem::path& dir, float spread, std::mt19937_64& rng);

// Sets config.json's encoder and decoder attention heads to 1 (head_dim = d_model; the weight
// shapes do not depend on the head count).
Status use_one_attention_head(const std::filesystem::path& dir);

// The log-mel features tools/whisper_oracle.py calls "synthetic": a float64 formula cast to f32,
// in [-0.9, 0.7]; [mels, frames] row-major.
std::vector<float> synthetic_features(int32_t mels, int32_t frames);
// N(0, 0.5) features drawn from `rng`.
std::vector<float> random_features(std::mt19937_64& rng, int32_t mels, int32_t frames);

// An audio file's log-mel features as `kvserve transcribe` computes them: decoded (30 s at
// most), resampled to 16 kHz, log-mel with `mel`. `seconds`, when given, gets the clip's length.
Result<std::vector<float>> audio_features(const std::filesystem::path& file,
                                          const audio::LogMelConfig& mel,
                                          double* seconds = nullptr);

// A runner of the checkpoint in `dir` with 4 request rows; an empty `backend` is the device's
// default. A failure is a test failure (ADD_FAILURE naming `dir`) and returns null.
std::unique_ptr<WhisperRunner> make_whisper_runner(const std::filesystem::path& dir,
                                                   int32_t page_size, mem::EncoderKvLayout layout,
                                                   const std::string& backend = "",
                                                   const std::string& device = "cpu");

// An audio file transcribed by the library's pieces called one by one, independently of
// WhisperFrontEnd and the engine: audio_features with the checkpoint's preprocessor_config.json, a
// default runner of its own, whisper_generate, the tokenizer's decode with special tokens skipped,
// white space trimmed at both ends.
struct LibraryTranscript {
  std::vector<int32_t> tokens;
  std::string text;
  double seconds = 0;  // the decoded clip's length
};
// `temperature` / `seed`: the request's sampling (0: greedy).
Result<LibraryTranscript> transcribe_with_library(const std::filesystem::path& model_dir,
                                                  const std::filesystem::path& file,
                                                  const WhisperGenerateOptions& options = {},
                                                  float temperature = 0.0f, uint64_t seed = 0);

// ||got - ref|| / ||ref|| over all elements.
double rel_l2(const std::vector<float>& ref, const std::vector<float>& got);

// Varlen attention (ops/varlen_attention_params.h) in float64 on the host: sequences given by
// cu_q / cu_kv, rows packed ([tokens, heads * dim] queries and outputs, [tokens, kv_heads * dim]
// keys and values), zeros for a query that sees no key. window_left >= 0: query i (position
// kv_len - q_len + i) also skips keys below position - window_left; logit_softcap > 0: a score
// becomes cap * tanh(score / cap) after the scaling.
std::vector<float> varlen_attention_reference(
    const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v,
    const std::vector<int32_t>& cu_q, const std::vector<int32_t>& cu_kv, int heads, int kv_heads,
    int dim, float scaling, bool causal, int32_t window_left = -1, float logit_softcap = 0.0f);

}  // namespace kvserve::model::testing

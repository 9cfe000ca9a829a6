// kvserve transcribe: speech to text with a Whisper checkpoint, on the CPU (f32) or CUDA (bf16).
//
// Per file: decode (audio/audio_file.h, at most one 30 s window: long-form chunking is not
// supported yet), resample to the feature extractor's rate, log-mel features from the model's
// preprocessor_config.json, then greedy decoding (model/whisper_generate.h) in batches of
// --max-running-requests files. The text is the tokenizer's decode of the generated tokens with the
// special tokens skipped, trimmed.
//
// A file that cannot be decoded is reported on stderr (the message names it) and skipped; the
// other files are still transcribed, and the exit code is 1. Bad flags or a bad model directory
// exit 2 (1 for other model failures) before any file is read.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/cli/commands.h"
#include "kvserve/cli/default_model.h"
#include "kvserve/core/logging.h"
#include "kvserve/model/whisper_generate.h"
#include "kvserve/model/whisper_transcriber.h"
#include "kvserve/platform/kernel_switches_env.h"
#include "kvserve/platform/platform.h"

namespace kvserve::cli {
namespace {

struct TranscribeOptions {
  std::vector<std::string> files;
  std::string model_path;
  std::string language = "en";
  std::string task = "transcribe";
  int32_t page_size = 1;
  std::string encoder_kv_layout = "aligned";
  std::string attention_backend;  // empty: the device's default for the layout
  int32_t max_running_requests = 8;
  int32_t max_new_tokens = 0;
  float temperature = 0.0f;  // 0: greedy
  uint64_t seed = 0;         // file i of a sampled run draws with seed + i
  std::string response_format = "text";
  std::string device = "cpu";
};

// One decoded file waiting for its batch.
struct PendingFile {
  std::string name;  // as given on the command line
  double seconds = 0.0;
  model::WhisperRequest request;
};

int fail(const Status& s) {
  fmt::print(stderr, "kvserve transcribe: {}\n", s.message());
  return s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kNotFound ? 2 : 1;
}

Status check_flags(const TranscribeOptions& o) {
  if (auto device = platform::parse_device(o.device); !device.is_ok()) {
    return invalid_argument("--device: {}", device.status().message());
  }
  if (o.files.empty()) return invalid_argument("give at least one audio FILE to transcribe");
  if (!std::isfinite(o.temperature) || o.temperature < 0.0f) {
    return invalid_argument("--temperature must be >= 0 (0: greedy), got {}", o.temperature);
  }
  if (o.max_new_tokens < 0) {
    return invalid_argument("--max-new-tokens must be >= 0 (0: until max_length), got {}",
                            o.max_new_tokens);
  }
  return Status::ok();
}

Result<std::unique_ptr<model::WhisperTranscriber>> load(const TranscribeOptions& o) {
  const std::filesystem::path dir = o.model_path;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return make_status(StatusCode::kNotFound, "--model-path {}: no such directory", o.model_path);
  }
  model::WhisperRunnerOptions ropt;
  ropt.device = o.device;
  ropt.page_size = o.page_size;
  ropt.attention_backend = o.attention_backend;
  ropt.max_running_requests = o.max_running_requests;
  auto layout = mem::parse_encoder_kv_layout(o.encoder_kv_layout);
  if (!layout.is_ok()) {
    return invalid_argument("--encoder-kv-layout: {}", layout.status().message());
  }
  ropt.layout = *layout;
  KV_ASSIGN_OR_RETURN(ropt.kernel_switches, platform::kernel_switches_from_env());
  KV_ASSIGN_OR_RETURN(auto t, model::WhisperTranscriber::load(dir, ropt));
  KV_RETURN_IF_ERROR(t->check_language_and_task(o.language, o.task));
  return t;
}

// Decode, resample and log-mel one file; errors name it.
Result<PendingFile> prepare(const model::WhisperTranscriber& t, const std::string& name) {
  KV_ASSIGN_OR_RETURN(model::PreparedAudio audio, t.prepare_file(name));
  PendingFile f;
  f.name = name;
  f.seconds = audio.seconds;
  f.request.features = std::move(audio.features);
  return f;
}

std::string format_line(const TranscribeOptions& o, const PendingFile& f, const std::string& text,
                        const std::vector<int32_t>& tokens) {
  if (o.response_format == "text") return fmt::format("{}: {}", f.name, text);
  nlohmann::ordered_json j = {{"file", f.name}, {"text", text}};
  if (o.response_format == "verbose_json") {
    j["language"] = model::whisper_language_code(o.language);
    j["duration"] = f.seconds;
    j["tokens"] = tokens;
  }
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

// Decoding of one batch (greedy, or sampled with --temperature), printed in file order. Returns the
// tokens generated.
Result<size_t> run_batch(model::WhisperTranscriber& t, const TranscribeOptions& o,
                         std::vector<PendingFile>& batch) {
  std::vector<model::WhisperRequest> requests;
  for (PendingFile& f : batch)
    requests.push_back(std::move(f.request));
  const model::WhisperGenerateOptions gopt{
      .language = o.language, .task = o.task, .max_new_tokens = o.max_new_tokens};
  KV_ASSIGN_OR_RETURN(auto results, model::whisper_generate(t.runner(), requests, gopt));
  size_t generated = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const std::vector<int32_t>& tokens = results[i].tokens;
    generated += tokens.size();
    const std::string text = t.text(tokens);
    fmt::print("{}\n", format_line(o, batch[i], text, tokens));
  }
  std::fflush(stdout);
  batch.clear();
  return generated;
}

int run_transcribe(TranscribeOptions o) {
  if (Status s = check_flags(o); !s.is_ok()) return fail(s);
  if (!resolve_model_path(o.model_path, "transcribe", kDemoWhisper)) return 2;
  auto loaded = load(o);
  if (!loaded.is_ok()) return fail(loaded.status());
  model::WhisperTranscriber& t = **loaded;
  KV_LOG_INFO(
      "transcribe: {} ({} + {} layers) on {}, page size {}, {} encoder KV layout, {} attention, "
      "batches of {}",
      o.model_path, t.runner().config().encoder_layers, t.runner().config().decoder_layers,
      o.device, o.page_size, o.encoder_kv_layout, t.runner().options().attention_backend,
      o.max_running_requests);

  const auto t0 = std::chrono::steady_clock::now();
  size_t failed = 0;
  size_t done = 0;
  size_t generated = 0;
  std::vector<PendingFile> batch;
  const auto flush = [&]() -> Status {
    done += batch.size();
    KV_ASSIGN_OR_RETURN(const size_t n, run_batch(t, o, batch));
    generated += n;
    return Status::ok();
  };
  for (size_t i = 0; i < o.files.size(); ++i) {
    auto f = prepare(t, o.files[i]);
    if (!f.is_ok()) {
      fmt::print(stderr, "kvserve transcribe: {}\n", f.status().message());
      ++failed;
      continue;
    }
    f->request.temperature = o.temperature;
    f->request.seed = o.seed + i;
    batch.push_back(std::move(f).value());
    if (batch.size() == static_cast<size_t>(o.max_running_requests)) {
      if (Status s = flush(); !s.is_ok()) return fail(s);
    }
  }
  if (!batch.empty()) {
    if (Status s = flush(); !s.is_ok()) return fail(s);
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  KV_LOG_INFO("transcribed {} files ({} tokens) in {:.3f} s", done, generated, secs);
  if (failed > 0) {
    fmt::print(stderr, "kvserve transcribe: {} of {} files failed\n", failed, o.files.size());
    return 1;
  }
  return 0;
}

}  // namespace

Command add_transcribe_command(CLI::App& app) {
  auto o = std::make_shared<TranscribeOptions>();
  CLI::App* cmd = app.add_subcommand(
      "transcribe", "Transcribe audio files (WAV, FLAC, OGG; up to 30 s each) with Whisper");
  cmd->add_option("FILE", o->files, "Audio files; each is one line of output");
  cmd->add_option("--model-path", o->model_path,
                  "Whisper checkpoint directory (default: the shipped demo-whisper)");
  cmd->add_option("--language", o->language, "Language code (multilingual models)")
      ->capture_default_str();
  cmd->add_option("--task", o->task, "transcribe or translate")
      ->check(CLI::IsMember({"transcribe", "translate"}))
      ->capture_default_str();
  cmd->add_option("--page-size", o->page_size, "KV cache page size, 1..128")->capture_default_str();
  cmd->add_option("--encoder-kv-layout", o->encoder_kv_layout, "aligned or ragged")
      ->capture_default_str();
  cmd->add_option("--attention-backend", o->attention_backend,
                  "cpu or native (CPU), cuda-paged or cuda-ragged (CUDA); default: cpu on the CPU, "
                  "on CUDA cuda-paged for the aligned layout and cuda-ragged for the ragged one");
  cmd->add_option("--max-running-requests", o->max_running_requests, "Files per batch")
      ->capture_default_str();
  cmd->add_option("--max-new-tokens", o->max_new_tokens, "0: until the model's max_length")
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "0: greedy; > 0: sample from softmax(logits / temperature)")
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Sampling seed; file i draws with seed + i")
      ->capture_default_str();
  cmd->add_option("--response-format", o->response_format,
                  "text (FILE: transcript), json or verbose_json (one object per line)")
      ->check(CLI::IsMember({"text", "json", "verbose_json"}))
      ->capture_default_str();
  cmd->add_option("--device", o->device, "cpu, cuda or cuda:N (bf16 weights and KV cache on CUDA)")
      ->capture_default_str();
  return {cmd, [o] { return run_transcribe(*o); }};
}

}  // namespace kvserve::cli

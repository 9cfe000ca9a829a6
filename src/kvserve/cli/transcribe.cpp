// kvserve transcribe: speech to text with a Whisper checkpoint, on the CPU (f32) or CUDA (bf16).
//
// Per file: decode (audio/audio_file.h, at most one 30 s window: long-form chunking is not
// supported yet), resample to the feature extractor's rate, log-mel features from the model's
// preprocessor_config.json, then decoding on an in-process engine (engine/engine.h, the server's
// Engine and Scheduler: the encoder runs in each request's prefill and decode steps batch
// continuously over up to --max-running-requests files). Greedy, or sampled with --temperature.
// Lines come in file order. The text is the tokenizer's decode of the generated tokens with the
// special tokens skipped, trimmed.
//
// A file that cannot be decoded is reported on stderr (the message names it) and skipped; the
// other files are still transcribed, and the exit code is 1. Bad flags or a bad model directory
// exit 2 (1 for other model failures) before any file is read.
#include <fmt/format.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/attention/capabilities.h"
#include "kvserve/cli/commands.h"
#include "kvserve/cli/default_model.h"
#include "kvserve/core/logging.h"
#include "kvserve/engine/engine.h"
#include "kvserve/engine/stream_tokens.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/model/whisper_front_end.h"
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

// One file submitted to the engine.
struct PendingFile {
  std::string name;  // as given on the command line
  double seconds = 0.0;
  std::shared_ptr<engine::RequestStream> stream;
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

// The engine and the front end (tokenizer, feature extractor) of the checkpoint.
struct Loaded {
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<model::WhisperFrontEnd> front_end;
};

Result<Loaded> load(const TranscribeOptions& o) {
  const std::filesystem::path dir = o.model_path;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return make_status(StatusCode::kNotFound, "--model-path {}: no such directory", o.model_path);
  }
  if (!model::is_whisper_checkpoint(dir)) {
    return invalid_argument("--model-path {}: not a Whisper checkpoint (config.json's model_type)",
                            o.model_path);
  }
  if (o.page_size < 1 || o.page_size > 128) {
    return invalid_argument("--page-size must be in 1..128, got {}", o.page_size);
  }
  if (o.max_running_requests < 1) {
    return invalid_argument("--max-running-requests must be positive, got {}",
                            o.max_running_requests);
  }
  engine::EngineOptions e;
  e.model_path = dir;
  KV_ASSIGN_OR_RETURN(e.runner.device, platform::parse_device(o.device));
  e.runner.page_size = o.page_size;
  if (!o.attention_backend.empty()) {  // else the device's default for the layout
    auto backend = attention::parse_attention_backend(o.attention_backend);
    if (!backend.is_ok()) {
      return invalid_argument("--attention-backend: {}", backend.status().message());
    }
    e.runner.attention_backend = *backend;
  }
  e.runner.max_running_requests = o.max_running_requests;
  auto layout = mem::parse_encoder_kv_layout(o.encoder_kv_layout);
  if (!layout.is_ok()) {
    return invalid_argument("--encoder-kv-layout: {}", layout.status().message());
  }
  e.runner.encoder_kv_layout = *layout;
  KV_ASSIGN_OR_RETURN(e.runner.kernel_switches, platform::kernel_switches_from_env());
  Loaded l;
  KV_ASSIGN_OR_RETURN(l.engine, engine::Engine::create(e));
  KV_ASSIGN_OR_RETURN(l.front_end,
                      model::WhisperFrontEnd::load(dir, *l.engine->whisper_config(),
                                                   *l.engine->whisper_generation_config()));
  KV_RETURN_IF_ERROR(l.front_end->check_language_and_task(o.language, o.task));
  return l;
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

int run_transcribe(TranscribeOptions o) {
  if (Status s = check_flags(o); !s.is_ok()) return fail(s);
  if (!resolve_model_path(o.model_path, "transcribe", kDemoWhisper)) return 2;
  auto loaded = load(o);
  if (!loaded.is_ok()) return fail(loaded.status());
  engine::Engine& engine = *loaded->engine;
  const model::WhisperFrontEnd& t = *loaded->front_end;
  KV_LOG_INFO("transcribe: {}", engine.summary());
  auto prompt = t.prompt(o.language, o.task);
  if (!prompt.is_ok()) return fail(prompt.status());

  // Every file is prepared and submitted at once; the engine runs up to --max-running-requests
  // of them together and admits the next as each finishes.
  const auto t0 = std::chrono::steady_clock::now();
  size_t failed = 0;
  std::vector<PendingFile> pending;
  for (size_t i = 0; i < o.files.size(); ++i) {
    auto audio = t.prepare_file(o.files[i]);
    if (!audio.is_ok()) {
      fmt::print(stderr, "kvserve transcribe: {}\n", audio.status().message());
      ++failed;
      continue;
    }
    engine::SubmitRequest request;
    request.input_ids = *prompt;
    request.sampling.temperature = o.temperature;  // 0: greedy
    request.sampling.seed = o.seed + i;
    request.sampling.max_new_tokens = o.max_new_tokens > 0 ? o.max_new_tokens : INT32_MAX;
    request.encoder_input = std::make_shared<std::vector<float>>(std::move(audio->features));
    auto stream = engine.submit(request);
    if (!stream.is_ok()) return fail(stream.status());
    pending.push_back({o.files[i], audio->seconds, *stream});
  }
  size_t generated = 0;
  for (const PendingFile& f : pending) {
    auto tokens = engine::wait_for_tokens(*f.stream, "transcription");
    if (!tokens.is_ok()) return fail(tokens.status());
    generated += tokens->size();
    fmt::print("{}\n", format_line(o, f, t.text(*tokens), *tokens));
  }
  std::fflush(stdout);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  KV_LOG_INFO("transcribed {} files ({} tokens) in {:.3f} s", pending.size(), generated, secs);
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
  cmd->add_option("--max-running-requests", o->max_running_requests,
                  "Files decoded together (continuous batching)")
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

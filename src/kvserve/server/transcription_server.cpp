#include "kvserve/server/transcription_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <charconv>
#include <climits>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "kvserve/core/logging.h"
#include "kvserve/core/version.h"
#include "kvserve/engine/stream_tokens.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/server/errors.h"
#include "kvserve/server/http_transport.h"

namespace kvserve::server {
namespace {

using ordered_json = nlohmann::ordered_json;

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(e.body(), "application/json");
}

void send_json(httplib::Response& res, const ordered_json& j) {
  res.status = 200;
  res.set_content(j.dump(-1, ' ', false, ordered_json::error_handler_t::replace),
                  "application/json");
}

// One transcription request, validated.
struct TranscriptionRequest {
  std::string language = "en";  // no language detection: English unless the client says
  std::string response_format = "json";
  float temperature = 0.0f;      // 0: greedy; (0, 1]: sampled
  std::optional<uint64_t> seed;  // a sampled request's draws (kvserve's extension)
};

// A seed for a sampled request that gave none: distinct per request, random per process (the
// sampler mixes the seed before use, so consecutive seeds draw unrelated streams).
uint64_t fresh_seed() {
  static std::atomic<uint64_t> next = [] {
    std::random_device rd;
    return (uint64_t{rd()} << 32) | rd();
  }();
  return next.fetch_add(1, std::memory_order_relaxed);
}

std::optional<std::string> field(const httplib::Request& req, const char* name) {
  if (!req.has_file(name)) return std::nullopt;
  return req.get_file_value(name).content;
}

// The form's text fields; an error names the field.
std::optional<ApiError> parse_fields(const httplib::Request& req, const std::string& model_name,
                                     const model::WhisperFrontEnd& t, TranscriptionRequest& r) {
  if (auto model = field(req, "model"); model && *model != model_name) {
    return ApiError{
        404,
        fmt::format("The model `{}` does not exist (this server serves `{}`)", *model, model_name),
        "invalid_request_error", "model", "model_not_found"};
  }
  if (auto f = field(req, "response_format")) {
    if (*f == "srt" || *f == "vtt") {
      return ApiError{400,
                      fmt::format("response_format '{}' is not supported (json, text or "
                                  "verbose_json; no timestamps yet)",
                                  *f),
                      "invalid_request_error", "response_format", "unsupported"};
    }
    if (*f != "json" && *f != "text" && *f != "verbose_json") {
      return bad_request(
          fmt::format("response_format must be json, text or verbose_json, got '{}'", *f),
          "response_format");
    }
    r.response_format = *f;
  }
  if (auto lang = field(req, "language"); lang && !lang->empty()) {
    if (Status s = t.check_language_and_task(*lang, "transcribe", "language", "task"); !s.is_ok()) {
      return bad_request(s.message(), "language");
    }
    r.language = *lang;
  }
  if (auto temp = field(req, "temperature"); temp && !temp->empty()) {
    double value = 0;
    const char* end = temp->data() + temp->size();
    const auto [ptr, ec] = std::from_chars(temp->data(), end, value);
    if (ec != std::errc() || ptr != end || !std::isfinite(value) || value < 0 || value > 1) {
      return bad_request(fmt::format("temperature must be a number in [0, 1], got '{}'", *temp),
                         "temperature");
    }
    r.temperature = static_cast<float>(value);
  }
  if (auto seed = field(req, "seed"); seed && !seed->empty()) {
    uint64_t value = 0;
    const char* end = seed->data() + seed->size();
    const auto [ptr, ec] = std::from_chars(seed->data(), end, value);
    if (ec != std::errc() || ptr != end) {
      return bad_request(fmt::format("seed must be a non-negative integer, got '{}'", *seed),
                         "seed");
    }
    r.seed = value;
  }
  return std::nullopt;
}

ordered_json verbose_json(const TranscriptionRequest& r, double seconds, const std::string& text,
                          const std::vector<int32_t>& tokens) {
  ordered_json segment = {{"id", 0},
                          {"seek", 0},
                          {"start", 0.0},
                          {"end", seconds},
                          {"text", text},
                          {"tokens", tokens},
                          {"temperature", r.temperature}};
  return {{"task", "transcribe"},
          {"language", model::whisper_language_code(r.language)},
          {"duration", seconds},
          {"text", text},
          {"segments", ordered_json::array({segment})}};
}

}  // namespace

TranscriptionServer::TranscriptionServer(engine::Engine& engine,
                                         const model::WhisperFrontEnd& front_end,
                                         std::string model_path, ServerOptions options,
                                         int32_t max_new_tokens)
    : engine_(engine),
      front_end_(front_end),
      max_new_tokens_(max_new_tokens),
      model_path_(std::move(model_path)),
      options_(std::move(options)),
      http_(make_http_server(options_)) {
  model_name_ = options_.served_model_name;
  if (model_name_.empty()) {
    std::filesystem::path p(model_path_);
    model_name_ = (p.has_filename() ? p : p.parent_path()).filename().string();
  }
  install_routes();
}

TranscriptionServer::~TranscriptionServer() {
  stop();
}

Status TranscriptionServer::bind() {
  KV_ASSIGN_OR_RETURN(bound_port_, bind_http_server(*http_, options_));
  return Status::ok();
}

void TranscriptionServer::run() {
  http_->listen_after_bind();
}

void TranscriptionServer::stop() {
  if (http_) http_->stop();
}

void TranscriptionServer::install_routes() {
  httplib::Server& s = *http_;
  configure_http_server(s, options_);

  s.Get("/health",
        [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"object", "list"},
                    {"data",
                     {{{"id", model_name_},
                       {"object", "model"},
                       {"created", 0},
                       {"owned_by", "kvserve"},
                       {"root", model_path_}}}}});
  });

  auto server_info = [this](const httplib::Request&, httplib::Response& res) {
    const engine::EngineStatus st = engine_.status();
    const engine::EngineOptions& o = engine_.options();
    const checkpoint::WhisperConfig& c = front_end_.config();
    send_json(res, {{"version", kVersion},
                    {"model_path", model_path_},
                    {"served_model_name", model_name_},
                    {"model_type", "whisper"},
                    {"device", o.runner.device.to_string()},
                    {"encoder_layers", c.encoder_layers},
                    {"decoder_layers", c.decoder_layers},
                    {"attention_backend", engine_.attention_backend()},
                    {"encoder_kv_layout",
                     std::string(mem::encoder_kv_layout_name(o.runner.encoder_kv_layout))},
                    {"page_size", o.runner.page_size},
                    {"max_running_requests", engine_.max_running_requests()},
                    {"max_total_num_tokens", engine_.max_total_tokens()},
                    {"max_audio_seconds", front_end_.max_seconds()},
                    {"num_running_reqs", st.scheduler.running},
                    {"num_waiting_reqs", st.scheduler.waiting},
                    {"requests_served", st.metrics.requests_finished - st.metrics.requests_aborted},
                    {"requests_failed", st.metrics.requests_aborted},
                    {"prefill_batches", st.scheduler.prefill_batches},
                    {"decode_steps", st.scheduler.decode_steps},
                    {"retractions", st.scheduler.retractions},
                    {"generation_tokens", st.metrics.generation_tokens},
                    {"memory_invariant_violations", st.invariant_violations}});
  };
  s.Get("/get_server_info", server_info);
  s.Get("/server_info", server_info);

  for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions"}) {
    s.Post(path, [this](const httplib::Request& req, httplib::Response& res) {
      send_error(res, bad_request(fmt::format("the model `{}` is a speech-recognition model: "
                                              "{} is not available; use POST "
                                              "/v1/audio/transcriptions",
                                              model_name_, req.path)));
    });
  }

  s.Post("/v1/audio/transcriptions", [this](const httplib::Request& req, httplib::Response& res) {
    if (!req.is_multipart_form_data()) {
      return send_error(res, bad_request("expected a multipart/form-data body with the audio in "
                                         "a `file` field"));
    }
    const model::WhisperFrontEnd& t = front_end_;
    const auto it = req.files.find("file");
    if (it == req.files.end()) {
      return send_error(res, bad_request("the `file` field is required", "file"));
    }
    const httplib::MultipartFormData& file = it->second;
    const std::string name = file.filename.empty() ? "uploaded file" : file.filename;
    if (file.content.empty()) {
      return send_error(res, bad_request(fmt::format("{}: the file is empty", name), "file"));
    }
    TranscriptionRequest r;
    if (auto e = parse_fields(req, model_name_, t, r)) return send_error(res, *e);
    auto prompt = t.prompt(r.language);
    if (!prompt.is_ok()) return send_error(res, bad_request(prompt.status().message()));

    // CPU work on this thread: decode, resample, log-mel.
    const auto* bytes = reinterpret_cast<const uint8_t*>(file.content.data());
    auto audio = t.prepare_bytes({bytes, file.content.size()}, name);
    if (!audio.is_ok()) return send_error(res, from_status(audio.status(), "file"));

    engine::SubmitRequest request;
    request.input_ids = std::move(prompt).value();
    request.sampling.temperature = r.temperature;  // 0: greedy
    request.sampling.seed = r.seed ? *r.seed : fresh_seed();
    // Clipped by the engine to what the decoder's max_length leaves.
    request.sampling.max_new_tokens = max_new_tokens_ > 0 ? max_new_tokens_ : INT32_MAX;
    request.encoder_input = std::make_shared<std::vector<float>>(std::move(audio->features));
    auto stream = engine_.submit(request);
    if (!stream.is_ok()) return send_error(res, from_status(stream.status()));
    auto tokens = engine::wait_for_tokens(**stream, "transcription");
    if (!tokens.is_ok()) return send_error(res, from_status(tokens.status()));
    const std::string text = t.text(*tokens);
    if (r.response_format == "text") {
      res.status = 200;
      res.set_content(text, "text/plain; charset=utf-8");
    } else if (r.response_format == "verbose_json") {
      send_json(res, verbose_json(r, audio->seconds, text, *tokens));
    } else {
      send_json(res, {{"text", text}});
    }
  });
}

}  // namespace kvserve::server

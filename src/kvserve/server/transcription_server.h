// The HTTP server for a speech-recognition (Whisper) model: OpenAI's audio transcription API over
// the engine (engine/engine.h: the same Engine and Scheduler as decoder-only models; the upload's
// features are the request's encoder input, the language's prompt its input ids). `kvserve serve`
// starts it instead of HttpServer when config.json's model_type is "whisper".
//
//   POST /v1/audio/transcriptions   multipart/form-data: file (WAV/FLAC/OGG, any rate, <= 30 s),
//                                   model, language, response_format (json | text | verbose_json),
//                                   temperature (0: greedy, up to 1: sampled), seed (kvserve's),
//                                   prompt (accepted and ignored)
//   GET  /v1/models, /health, /get_server_info (/server_info)
//   POST /generate, /v1/completions, /v1/chat/completions: 400, a speech-recognition model
// Authentication, body limit and error bodies as HttpServer's (configure_http_server). It runs on
// the threaded server (server/http_transport.h), not the asynchronous one: the HTTP
// thread decodes the upload and computes the features, then waits for the engine's tokens.
#pragma once

#include <memory>
#include <string>

#include "kvserve/engine/engine.h"
#include "kvserve/model/whisper_front_end.h"
#include "kvserve/server/server_options.h"

namespace httplib {
class Server;
}

namespace kvserve::server {

class TranscriptionServer {
 public:
  // `engine` serves a Whisper checkpoint (Engine::is_encoder_decoder) whose tokenizer and feature
  // extractor `front_end` holds; both outlive the server. `model_path` is reported by /v1/models
  // and /get_server_info; its name is the served model name unless options.served_model_name is
  // set. max_new_tokens: 0 until the model's max_length.
  TranscriptionServer(engine::Engine& engine, const model::WhisperFrontEnd& front_end,
                      std::string model_path, ServerOptions options, int32_t max_new_tokens = 0);
  ~TranscriptionServer();

  Status bind();
  int port() const { return bound_port_; }
  void run();  // serves until stop(); call after bind()
  void stop();

 private:
  void install_routes();

  engine::Engine& engine_;
  const model::WhisperFrontEnd& front_end_;
  int32_t max_new_tokens_ = 0;
  std::string model_path_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int bound_port_ = 0;
  std::string model_name_;
};

}  // namespace kvserve::server

// The HTTP server for a speech-recognition (Whisper) model: OpenAI's audio transcription API over
// a TranscriptionService. `kvserve serve` starts it instead of HttpServer when config.json's
// model_type is "whisper".
//
//   POST /v1/audio/transcriptions   multipart/form-data: file (WAV/FLAC/OGG, any rate, <= 30 s),
//                                   model, language, response_format (json | text | verbose_json),
//                                   temperature (0 only), prompt (accepted and ignored)
//   GET  /v1/models, /health, /get_server_info (/server_info)
//   POST /generate, /v1/completions, /v1/chat/completions: 400, a speech-recognition model
// Authentication, body limit and error bodies as HttpServer's (configure_http_server). The HTTP
// thread decodes the upload and computes the features; only the decoding waits for the worker.
#pragma once

#include <memory>
#include <string>

#include "kvserve/server/http_server.h"
#include "kvserve/server/transcription_service.h"

namespace kvserve::server {

class TranscriptionServer {
 public:
  // `model_path` is reported by /v1/models and /get_server_info; its name is the served model
  // name unless options.served_model_name is set.
  TranscriptionServer(TranscriptionService& service, std::string model_path, ServerOptions options);
  ~TranscriptionServer();

  Status bind();
  int port() const { return bound_port_; }
  void run();  // serves until stop(); call after bind()
  void stop();

 private:
  void install_routes();

  TranscriptionService& service_;
  std::string model_path_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int bound_port_ = 0;
  std::string model_name_;
};

}  // namespace kvserve::server

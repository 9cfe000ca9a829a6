// The HTTP server: SGLang's /generate and OpenAI's /v1 API over one Engine (cpp-httplib from
// Debian, a thread per connection from a pool; engine work stays on the engine thread).
//
//   POST /generate, /v1/completions, /v1/chat/completions   (stream: server-sent events)
//   GET  /v1/models, /health, /health_generate, /get_server_info, /metrics
//   POST /flush_cache
// With an API key, every endpoint but /health needs "Authorization: Bearer KEY" (401 without).
// Errors are OpenAI-style JSON bodies with a 4xx/5xx status. A client that disconnects aborts
// its requests (the socket is polled while the engine works).
#pragma once

#include <memory>
#include <string>

#include "kvserve/engine/engine.h"

namespace httplib {
class Server;
}

namespace kvserve::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;  // 0: any free port
  std::string api_key;
  std::string served_model_name;  // empty: the model directory's name
  size_t max_body_bytes = size_t{32} << 20;
  int http_threads = 512;  // streams hold a thread each while they run
  int read_timeout_s = 60;
  // SGLang's --sampling-defaults: "model" (generation_config.json) or "openai" (temperature 1,
  // top_p 1, no top-k / min-p / repetition penalty).
  std::string sampling_defaults = "model";
};

// Shared with the transcription server (server/transcription_server.h): the worker pool, body
// limit and timeouts, the API key check, and JSON bodies for httplib's own errors and for
// exceptions.
void configure_http_server(httplib::Server& s, const ServerOptions& options);
// Binds per options (port 0: any free port), raises the listen backlog; returns the port, or
// kUnavailable naming the address.
Result<int> bind_http_server(httplib::Server& s, const ServerOptions& options);

class HttpServer {
 public:
  HttpServer(engine::Engine& engine, ServerOptions options);
  ~HttpServer();

  // Binds the socket; kUnavailable naming the address when it is taken.
  Status bind();
  int port() const { return bound_port_; }
  // Serves until stop(); call after bind().
  void run();
  void stop();

 private:
  void install_routes();

  engine::Engine& engine_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int bound_port_ = 0;
  std::string model_name_;
};

}  // namespace kvserve::server

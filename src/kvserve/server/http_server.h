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
#include "kvserve/server/admission.h"
#include "kvserve/server/job.h"

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
  size_t max_head_bytes = size_t{16} << 10;  // request line + headers (431 above)
  // A thread per connection, started on demand; above this many, 503 with Retry-After.
  int max_connections = 4096;
  int header_timeout_s = 10;     // the whole request head (slowloris)
  int keep_alive_timeout_s = 5;  // idle between requests on one connection
  int read_timeout_s = 60;       // longest pause inside a request body
  int write_timeout_s = 60;      // longest wait for a client to take what we send
  // SGLang's --max-queued-requests: with this many requests waiting for the engine, new
  // generation requests get 503 with Retry-After. 0: no limit.
  int max_queued_requests = 0;
  // SGLang's --sampling-defaults: "model" (generation_config.json) or "openai" (temperature 1,
  // top_p 1, no top-k / min-p / repetition penalty).
  std::string sampling_defaults = "model";
};

// Shared with the transcription server (server/transcription_server.h): the hardened connection
// layer (server/http_transport.h) with the options' limits and timeouts.
std::unique_ptr<httplib::Server> make_http_server(const ServerOptions& options);
// The API key check, and JSON bodies for httplib's own errors and for exceptions.
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
  // Admission (--max-queued-requests), then the engine requests.
  std::variant<std::shared_ptr<Job>, ApiError> start_job(const std::vector<GenerationSpec>& specs,
                                                         int32_t n,
                                                         const std::vector<std::string>& rids = {});

  engine::Engine& engine_;
  ServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  int bound_port_ = 0;
  std::string model_name_;
  Admission admission_;
};

}  // namespace kvserve::server

// The HTTP server: SGLang's /generate and OpenAI's /v1 API over one Engine, on the asynchronous
// server (server/async_http_server.h: Boost.Asio + Beast, one I/O thread, a small worker pool;
// engine work stays on the engine thread, streams are driven by the engine's events).
//
//   POST /generate, /v1/completions, /v1/chat/completions   (stream: server-sent events)
//   GET  /v1/models, /health, /health_generate, /get_server_info, /metrics
//   POST /flush_cache
// With an API key, every endpoint but /health needs "Authorization: Bearer KEY" (401 without).
// Errors are OpenAI-style JSON bodies with a 4xx/5xx status. A client that disconnects aborts
// its requests (its socket is watched while the engine works).
#pragma once

#include <memory>
#include <string>
#include <variant>

#include "kvserve/engine/engine.h"
#include "kvserve/server/admission.h"
#include "kvserve/server/job.h"
#include "kvserve/server/server_options.h"

namespace kvserve::server {

class AsyncHttpServer;
class HttpRouter;

class HttpServer {
 public:
  HttpServer(engine::Engine& engine, ServerOptions options);
  ~HttpServer();

  // Binds the socket; kUnavailable naming the address when it is taken.
  Status bind();
  int port() const { return bound_port_; }
  // Serves until stop(); call after bind().
  void run();
  // Stops accepting; run() returns once the exchanges in flight have ended (or a few seconds).
  void stop();

 private:
  void install_routes();
  // Admission (--max-queued-requests), then the engine requests.
  std::variant<std::shared_ptr<Job>, ApiError> start_job(const std::vector<GenerationSpec>& specs,
                                                         int32_t n,
                                                         const std::vector<std::string>& rids = {});

  engine::Engine& engine_;
  ServerOptions options_;
  std::unique_ptr<AsyncHttpServer> http_;
  std::unique_ptr<HttpRouter> router_;
  int bound_port_ = 0;
  std::string model_name_;
  Admission admission_;
};

}  // namespace kvserve::server

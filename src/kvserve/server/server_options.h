// The HTTP servers' options (`kvserve serve`): address, API key, limits and timeouts.
#pragma once

#include <cstddef>
#include <string>

namespace kvserve::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;  // 0: any free port
  std::string api_key;
  std::string served_model_name;  // empty: the model directory's name
  size_t max_body_bytes = size_t{32} << 20;
  size_t max_head_bytes = size_t{16} << 10;  // request line + headers (431 above)
  // Above this many open connections, 503 with Retry-After.
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
  // The asynchronous server (HttpServer): threads running the connections, and the pool for
  // CPU work of requests (parsing, tokenizing, chat templates).
  int io_threads = 1;
  int worker_threads = 2;
};

}  // namespace kvserve::server

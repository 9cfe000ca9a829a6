// The asynchronous HTTP/1.1 server under the routes (Boost.Asio + Boost.Beast, header-only):
// one or two I/O threads run every connection (server/http_connection.h) as a state machine on
// its own strand, so thousands of idle or streaming clients cost a socket, a timer and their
// request's state each, not a thread. Above max_connections a client gets 503 with Retry-After.
// Routes run on the I/O thread and must not block; CPU work (parsing, tokenizing, templating)
// goes to the small worker pool (offload), waits on the engine become events
// (server/job_responder.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "kvserve/core/status.h"
#include "kvserve/server/http_connection.h"

namespace kvserve::server {

struct AsyncServerOptions {
  std::string host = "127.0.0.1";
  int port = 30000;  // 0: any free port
  ConnectionLimits limits;
  int io_threads = 1;
  int worker_threads = 2;
  // After stop(), how long exchanges in flight may take to finish before their connections are
  // closed.
  std::chrono::milliseconds stop_grace{3000};
};

class AsyncHttpServer {
 public:
  // `handle` runs on the I/O thread (a connection's strand) for every framed request.
  AsyncHttpServer(AsyncServerOptions options, ConnectionShared::Handler handle);
  ~AsyncHttpServer();

  // Binds and listens; returns the port, or kUnavailable naming the address.
  Result<int> bind();
  // Serves until stop() (and the exchanges in flight have ended, or stop_grace); call after
  // bind().
  void run();
  // Stops accepting; idle connections close, the others after their exchange. Any thread.
  void stop();
  // Runs `fn` on the worker pool.
  void offload(std::function<void()> fn);

  int open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::server

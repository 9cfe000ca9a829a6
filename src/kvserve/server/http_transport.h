// The threaded HTTP server (the transcription server's; HttpServer runs on the asynchronous one,
// server/async_http_server.h). The connection layer under the HTTP handlers: httplib's Server
// (Debian's cpp-httplib 0.11) with its per-connection loop replaced. httplib still parses the
// request it is given and runs the routes; this layer owns the socket:
//   - the request head must arrive whole within header_timeout (slowloris), at most
//     max_head_bytes (431); framing is checked strictly before httplib parses anything
//     (server/http_framing.h: conflicting Content-Length 400, unknown Transfer-Encoding 400,
//     malformed chunks 400, a declared body over the limit 413 before it is read);
//   - a body must keep arriving (no pause over read_timeout), idle keep-alive connections close
//     after keep_alive_timeout;
//   - one thread per connection, started on demand (no fixed pool to exhaust), at most
//     max_connections at once: the next ones get 503 with Retry-After and are closed.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>

#include "kvserve/core/status.h"
#include "kvserve/server/http_framing.h"
#include "kvserve/server/server_options.h"

namespace kvserve::server {

struct TransportOptions {
  FramingLimits framing;
  std::chrono::milliseconds header_timeout{10000};     // whole request head, from its first byte
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
  std::chrono::milliseconds read_timeout{60000};       // longest pause inside a request body
  std::chrono::milliseconds write_timeout{60000};      // longest wait for the client to read
  int max_connections = 4096;
  int max_requests_per_connection = 10000;
};

class HardenedServer : public httplib::Server {
 public:
  explicit HardenedServer(TransportOptions options);
  ~HardenedServer() override;

  const TransportOptions& transport_options() const { return options_; }
  int open_connections() const { return open_.load(); }

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve_connection(int fd);

  TransportOptions options_;
  std::atomic<int> open_{0};
};

// The hardened connection layer with the options' limits and timeouts.
std::unique_ptr<httplib::Server> make_http_server(const ServerOptions& options);
// The API key check, and JSON bodies for httplib's own errors and for exceptions.
void configure_http_server(httplib::Server& s, const ServerOptions& options);
// Binds per options (port 0: any free port), raises the listen backlog; returns the port, or
// kUnavailable naming the address.
Result<int> bind_http_server(httplib::Server& s, const ServerOptions& options);

}  // namespace kvserve::server

// One HTTP request and the way back to its client, as the asynchronous server
// (server/async_http_server.h) hands them to a route: the request read whole and framed strictly,
// and an `Exchange`, the connection's side of the answer. A route answers at once (respond), or
// later from any thread, or streams (a chunked body, server-sent events) piece by piece, each
// write's completion reported back so that a client that does not read is not sent more.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::server {

using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // the target's path, percent-decoded (bytes as sent: maybe not UTF-8)
  HttpHeaders headers;
  std::string body;

  // The first header of that name (case-insensitive); empty when absent.
  std::string header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  HttpHeaders headers;  // extra ones (Retry-After, Cache-Control)
};

// The connection's side of one exchange. Every method may be called from any thread: the work
// is posted to the connection's strand, in call order. After respond() or end_stream() the
// exchange is over; calls after that, or after the client has gone, do nothing (a pending
// write's callback gets false).
class Exchange {
 public:
  using Written = std::function<void(bool ok)>;  // on the connection's strand; false: client gone

  virtual ~Exchange() = default;

  // The whole answer (Content-Length body).
  virtual void respond(HttpResponse response) = 0;
  // A chunked answer: the head, then pieces, each reported through `written` once the client's
  // socket has taken it (or failed); then the last chunk.
  virtual void start_stream(int status, std::string content_type, HttpHeaders headers,
                            Written written) = 0;
  virtual void stream_piece(std::string data, Written written) = 0;
  virtual void end_stream() = 0;

  // Runs `fn` on the connection's strand (serialised with its I/O); false (and dropped) once the
  // server is being destroyed.
  virtual bool post(std::function<void()> fn) = 0;
  // `fn` runs (on the strand) if the client goes away before the exchange is over: its socket
  // reads end-of-file or fails, a write fails or stalls past the write timeout, or the server
  // stops. Replaces an earlier one.
  virtual void on_gone(std::function<void()> fn) = 0;
};

}  // namespace kvserve::server

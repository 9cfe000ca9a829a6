#include "kvserve/server/http_connection.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <boost/beast/http.hpp>

#include <cerrno>
#include <limits>

#include "kvserve/core/logging.h"
#include "kvserve/server/errors.h"

namespace kvserve::server {
namespace {

namespace net = boost::asio;
namespace http = boost::beast::http;
using boost::system::error_code;
using std::chrono::milliseconds;

constexpr milliseconds kRejectHeadWait{1000};  // a refused client's head, read before the 503
constexpr milliseconds kLingerTime{2000};      // reading what follows an error answer
constexpr size_t kLingerBytes = size_t{64} << 20;
constexpr size_t kReadPiece = 16384;

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The target's path (before '?'), %XX decoded (invalid escapes kept as sent).
std::string decode_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::string out;
  out.reserve(target.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size()) {
      const int hi = hex_value(target[i + 1]);
      const int lo = hex_value(target[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += target[i];
  }
  return out;
}

// Reads the framed request (`text`: head and Content-Length body) with Beast's parser.
bool parse_request(const std::string& text, const FramingLimits& limits, HttpRequest& out,
                   bool& keep_alive) {
  http::request_parser<http::string_body> parser;
  parser.eager(true);
  parser.header_limit(static_cast<uint32_t>(
      std::min<size_t>(limits.max_head_bytes + 256, std::numeric_limits<uint32_t>::max())));
  parser.body_limit(limits.max_body_bytes);
  boost::beast::error_code ec;
  size_t used = 0;
  while (!parser.is_done() && used < text.size()) {
    const size_t n = parser.put(net::buffer(text.data() + used, text.size() - used), ec);
    if (ec || n == 0) return false;
    used += n;
  }
  if (!parser.is_done()) return false;
  auto& m = parser.get();
  out.method = std::string(m.method_string());
  out.target = std::string(m.target());
  out.path = decode_path(out.target);
  for (const auto& f : m) {
    out.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
  }
  out.body = std::move(m.body());
  keep_alive = m.keep_alive();
  return true;
}

const char* reason(int status) {
  return http::obsolete_reason(static_cast<http::status>(status)).data();
}

}  // namespace

Connection::Connection(net::ip::tcp::socket socket, std::shared_ptr<ConnectionShared> shared,
                       bool reject)
    : socket_(std::move(socket)),
      timer_(socket_.get_executor()),
      shared_(std::move(shared)),
      reject_(reject) {
  ++(reject_ ? shared_->rejecting : shared_->open);
}

Connection::~Connection() {
  release_count();
  std::lock_guard<std::mutex> lock(shared_->mu);
  shared_->live.erase(registered_);
}

void Connection::release_count() {
  if (!counted_) return;
  counted_ = false;
  --(reject_ ? shared_->rejecting : shared_->open);
}

void Connection::start() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    registered_ = shared_->live.insert(shared_->live.end(), weak_from_this());
  }
  error_code ec;
  socket_.set_option(net::ip::tcp::no_delay(true), ec);  // stream events go out at once
  socket_.non_blocking(true, ec);
  if (reject_) {
    phase_ = Phase::kHead;
    arm(kRejectHeadWait, Timer::kReject);
  } else {
    arm(shared_->limits.header_timeout, Timer::kIdle);
  }
  wait_readable();
}

void Connection::server_stopping() {
  keep_alive_ = false;
  if (phase_ == Phase::kIdle) close();
}

void Connection::close_now() {
  if (phase_ == Phase::kHandling) return client_gone();
  close();
}

// ---- reading a request ---------------------------------------------------------------------

void Connection::wait_readable() {
  socket_.async_wait(net::ip::tcp::socket::wait_read,
                     [self = shared_from_this()](const error_code& ec) { self->on_readable(ec); });
}

void Connection::on_readable(const error_code& ec) {
  if (phase_ == Phase::kClosed || phase_ == Phase::kHandling) return;
  if (ec == net::error::operation_aborted) return;
  if (ec) return close();
  thread_local char buf[kReadPiece];
  error_code rec;
  const size_t n = socket_.read_some(net::buffer(buf), rec);
  if (rec == net::error::would_block || rec == net::error::try_again) return wait_readable();
  if (phase_ == Phase::kClosing) {  // lingering after an error answer: read and drop
    lingered_ += n;
    if (rec || lingered_ >= kLingerBytes) return close();
    return wait_readable();
  }
  if (rec) return close();  // end of file or reset: nothing to answer
  in_.append(buf, n);
  if (phase_ == Phase::kIdle) {  // a head begins: it has header_timeout from here
    phase_ = Phase::kHead;
    arm(shared_->limits.header_timeout, Timer::kHead);
  } else if (phase_ == Phase::kBody) {
    arm(shared_->limits.read_timeout, Timer::kBody);  // the body keeps arriving
  }
  process_input();
}

void Connection::process_input() {
  const ConnectionLimits& o = shared_->limits;
  if (reject_) {
    if (in_.find("\r\n\r\n") == std::string::npos && in_.size() < o.framing.max_head_bytes) {
      return wait_readable();
    }
    return on_timeout(Timer::kReject);
  }
  if (phase_ == Phase::kIdle && !in_.empty()) {  // a pipelined request is already here
    phase_ = Phase::kHead;
    arm(o.header_timeout, Timer::kHead);
  }
  if (phase_ == Phase::kHead) {
    auto parsed = parse_request_head(in_, o.framing);
    if (std::holds_alternative<NeedMoreInput>(parsed)) return wait_readable();
    if (const auto* e = std::get_if<FramingError>(&parsed)) {
      return answer_and_close(e->status, e->message);
    }
    head_ = std::get<RequestHead>(std::move(parsed));
    in_.erase(0, head_.head_bytes);
    phase_ = Phase::kBody;
    body_.clear();
    chunks_.emplace(o.framing);
    arm(o.read_timeout, Timer::kBody);
    if (head_.expect_continue && (head_.chunked || head_.content_length > in_.size())) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      head_.expect_continue = false;
      writing_ = true;
      return write(nullptr, net::buffer(kContinue), [this, self = shared_from_this()](bool ok) {
        if (!ok) return close();
        arm(shared_->limits.read_timeout, Timer::kBody);
        process_input();
      });
    }
  }
  if (phase_ != Phase::kBody) return;
  if (head_.chunked) {
    in_.erase(0, chunks_->feed(in_, body_));
    if (const FramingError* e = chunks_->error()) return answer_and_close(e->status, e->message);
    if (!chunks_->done()) return wait_readable();
  } else {
    if (in_.size() < head_.content_length) return wait_readable();
    body_.assign(in_, 0, head_.content_length);
    in_.erase(0, head_.content_length);
  }
  dispatch();
}

void Connection::dispatch() {
  disarm();
  chunks_.reset();
  std::string text = std::move(head_.rewritten);
  text += fmt::format("Content-Length: {}\r\n\r\n", body_.size());
  text += body_;
  body_.clear();
  body_.shrink_to_fit();
  HttpRequest request;
  bool keep_alive = false;
  if (!parse_request(text, shared_->limits.framing, request, keep_alive)) {
    return answer_and_close(400, "malformed HTTP request");
  }
  text.clear();
  text.shrink_to_fit();
  phase_ = Phase::kHandling;
  answered_ = false;
  ++exchange_;
  keep_alive_ = keep_alive_ && keep_alive &&
                exchange_ < static_cast<uint64_t>(shared_->limits.max_requests_per_connection) &&
                !shared_->stopping.load();
  if (in_.empty()) watch_client(exchange_);
  try {
    shared_->handle(request, shared_from_this());
  } catch (const std::exception& e) {  // the route catches its own; this is a last resort
    KV_LOG_ERROR("{} {}: handler failed: {}", request.method, request.path, e.what());
    respond({500,
             "application/json",
             ApiError{500, "internal error", "internal_error", "", ""}.body(),
             {}});
  }
}

// While a request is handled, a readable socket is either the client's end of file (it went
// away: its requests are aborted) or a pipelined next request (then it is left for later).
void Connection::watch_client(uint64_t exchange) {
  socket_.async_wait(
      net::ip::tcp::socket::wait_read, [self = shared_from_this(), exchange](const error_code& ec) {
        if (self->phase_ != Phase::kHandling || self->exchange_ != exchange) return;
        if (ec) return ec == net::error::operation_aborted ? void() : self->client_gone();
        char c = 0;
        const ssize_t n = ::recv(self->socket_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
          return self->client_gone();
        }
        if (n < 0) self->watch_client(exchange);
      });
}

// ---- timers ----------------------------------------------------------------------------------

void Connection::arm(milliseconds after, Timer what) {
  const uint64_t gen = ++timer_gen_;
  timer_.expires_after(after);
  timer_.async_wait([self = shared_from_this(), gen, what](const error_code& ec) {
    if (ec || gen != self->timer_gen_) return;
    self->on_timeout(what);
  });
}

void Connection::disarm() {
  ++timer_gen_;
  timer_.cancel();
}

void Connection::on_timeout(Timer what) {
  if (phase_ == Phase::kClosed) return;
  switch (what) {
    case Timer::kIdle:
      return close();
    case Timer::kHead:
      if (in_.find_first_not_of("\r\n") == std::string::npos) return close();
      return answer_and_close(408, "the request head did not arrive in time");
    case Timer::kBody:
      return answer_and_close(408, "the request body stalled");
    case Timer::kWrite:
      return client_gone();
    case Timer::kLinger:
      return close();
    case Timer::kReject:
      return answer_and_close(
          503,
          fmt::format("the server is at its limit of {} connections; retry later",
                      shared_->limits.max_connections),
          {{"Retry-After", "1"}});
  }
}

// ---- writing ---------------------------------------------------------------------------------

template <typename Buffers>
void Connection::write(std::shared_ptr<void> keep, const Buffers& buffers,
                       std::function<void(bool)> done) {
  arm(shared_->limits.write_timeout, Timer::kWrite);
  net::async_write(socket_, buffers,
                   [self = shared_from_this(), keep = std::move(keep), done = std::move(done)](
                       const error_code& ec, size_t) {
                     self->writing_ = false;
                     if (self->phase_ == Phase::kClosed) return done(false);
                     self->disarm();
                     done(!ec);
                   });
}

void Connection::respond(HttpResponse r) {
  post([self = shared_from_this(), r = std::move(r)]() mutable {
    if (self->phase_ != Phase::kHandling || self->answered_) return;
    self->answered_ = true;
    self->on_gone_ = nullptr;
    auto res = std::make_shared<http::response<http::string_body>>(
        static_cast<http::status>(r.status), 11);
    res->set(http::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers)
      res->insert(k, v);
    res->body() = std::move(r.body);
    res->keep_alive(self->keep_alive_);
    res->prepare_payload();
    self->writing_ = true;
    self->arm(self->shared_->limits.write_timeout, Timer::kWrite);
    http::async_write(self->socket_, *res, [self, res](const error_code& ec, size_t) {
      self->writing_ = false;
      if (self->phase_ == Phase::kClosed) return;
      self->disarm();
      if (ec) return self->close();
      self->next_request();
    });
  });
}

void Connection::start_stream(int status, std::string content_type, HttpHeaders headers,
                              Written written) {
  post([self = shared_from_this(), status, ct = std::move(content_type),
        headers = std::move(headers), written = std::move(written)]() mutable {
    if (self->phase_ != Phase::kHandling || self->answered_) return written(false);
    self->answered_ = true;
    auto res =
        std::make_shared<http::response<http::empty_body>>(static_cast<http::status>(status), 11);
    res->set(http::field::content_type, ct);
    for (const auto& [k, v] : headers)
      res->insert(k, v);
    res->keep_alive(self->keep_alive_);
    res->chunked(true);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*res);
    self->writing_ = true;
    self->arm(self->shared_->limits.write_timeout, Timer::kWrite);
    http::async_write_header(
        self->socket_, *sr,
        [self, res, sr, written = std::move(written)](const error_code& ec, size_t) {
          self->writing_ = false;
          if (self->phase_ == Phase::kClosed) return written(false);
          self->disarm();
          if (ec) self->client_gone();
          written(!ec);
        });
  });
}

void Connection::stream_piece(std::string data, Written written) {
  post([self = shared_from_this(), data = std::move(data), written = std::move(written)]() mutable {
    if (self->phase_ != Phase::kHandling || !self->answered_) return written(false);
    if (data.empty()) return written(true);
    auto piece = std::make_shared<std::string>(std::move(data));
    self->writing_ = true;
    self->write(piece, http::make_chunk(net::buffer(*piece)),
                [self, written = std::move(written)](bool ok) {
                  if (!ok) self->client_gone();
                  written(ok);
                });
  });
}

void Connection::end_stream() {
  post([self = shared_from_this()] {
    if (self->phase_ != Phase::kHandling || !self->answered_) return;
    self->on_gone_ = nullptr;
    self->writing_ = true;
    self->write(nullptr, http::make_chunk_last(), [self](bool ok) {
      if (!ok) return self->close();
      self->next_request();
    });
  });
}

bool Connection::post(std::function<void()> fn) {
  std::lock_guard<std::mutex> lock(shared_->mu);
  if (!shared_->gate_open) return false;
  net::post(socket_.get_executor(), std::move(fn));
  return true;
}

void Connection::on_gone(std::function<void()> fn) {
  post([self = shared_from_this(), fn = std::move(fn)]() mutable {
    if (self->phase_ == Phase::kHandling) {
      self->on_gone_ = std::move(fn);
    } else if (self->phase_ == Phase::kClosed && fn) {
      fn();  // already gone
    }
  });
}

// ---- ending ----------------------------------------------------------------------------------

void Connection::next_request() {
  on_gone_ = nullptr;
  if (!keep_alive_ || shared_->stopping.load()) return close();
  phase_ = Phase::kIdle;
  in_.shrink_to_fit();
  arm(shared_->limits.keep_alive_timeout, Timer::kIdle);
  if (!in_.empty()) return process_input();
  wait_readable();
}

void Connection::answer_and_close(int status, const std::string& message,
                                  const HttpHeaders& extra) {
  phase_ = Phase::kClosing;
  on_gone_ = nullptr;
  in_.clear();
  in_.shrink_to_fit();
  const char* type = status >= 500 ? "service_unavailable" : "invalid_request_error";
  const std::string body = ApiError{status, message, type, "", ""}.body();
  std::string headers;
  for (const auto& [k, v] : extra)
    headers += fmt::format("{}: {}\r\n", k, v);
  auto text = std::make_shared<std::string>(
      fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
                  "Connection: close\r\n{}\r\n{}",
                  status, reason(status), body.size(), headers, body));
  writing_ = true;
  socket_.cancel();  // the pending wait for input; lingering waits again
  write(text, net::buffer(*text), [self = shared_from_this()](bool ok) {
    if (!ok) return self->close();
    self->linger();
  });
}

void Connection::linger() {
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ec);
  if (ec) return close();
  release_count();  // answered: no longer counts against max_connections
  arm(kLingerTime, Timer::kLinger);
  wait_readable();
}

void Connection::client_gone() {
  if (phase_ == Phase::kClosed) return;
  std::function<void()> gone = std::move(on_gone_);
  on_gone_ = nullptr;
  close();
  if (gone) gone();
}

void Connection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  on_gone_ = nullptr;
  disarm();
  error_code ec;
  socket_.shutdown(net::ip::tcp::socket::shutdown_both, ec);
  socket_.close(ec);
  release_count();
  in_.clear();
  in_.shrink_to_fit();
}

}  // namespace kvserve::server

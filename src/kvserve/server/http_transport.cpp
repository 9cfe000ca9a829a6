#include "kvserve/server/http_transport.h"

#include <fmt/format.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <filesystem>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <system_error>
#include <thread>

#include "kvserve/core/logging.h"
#include "kvserve/server/api_key.h"
#include "kvserve/server/errors.h"

namespace kvserve::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// How a connection handed to process_and_close_socket is treated (set by the task queue on the
// thread that runs it).
enum class Mode { kServe, kReject, kDrop };
thread_local Mode tls_mode = Mode::kServe;

constexpr milliseconds kStopCheck{100};  // how often a waiting connection looks for stop()
constexpr int kMaxRejecting = 64;        // connections being answered 503 at once

// Threads started on demand, one per connection, reused while they stay idle (up to 30 s). At
// most max_connections serve at once; above that a connection gets a short-lived thread that
// answers 503 (at most kMaxRejecting of those; beyond, it is closed at once).
class ConnectionThreads final : public httplib::TaskQueue {
 public:
  explicit ConnectionThreads(int max_connections) : max_(max_connections) {}

  void enqueue(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (busy_ >= max_) {
      if (rejecting_ >= kMaxRejecting) {
        lock.unlock();
        drop(fn);
        return;
      }
      ++rejecting_;
      ++threads_;
      try {
        std::thread([this, fn] {
          tls_mode = Mode::kReject;
          fn();
          std::lock_guard<std::mutex> l(mu_);
          --rejecting_;
          --threads_;
          done_.notify_all();
        }).detach();
      } catch (const std::system_error&) {  // no thread to be had: close the connection
        --rejecting_;
        --threads_;
        lock.unlock();
        drop(fn);
      }
      return;
    }
    ++busy_;
    if (idle_ > 0) {
      --idle_;
      jobs_.push_back(std::move(fn));
      cv_.notify_one();
      return;
    }
    ++threads_;
    try {
      std::thread([this, fn]() mutable { work(std::move(fn)); }).detach();
    } catch (const std::system_error&) {
      KV_LOG_WARN("cannot start a connection thread ({} running); closing the connection",
                  threads_ - 1);
      --busy_;
      --threads_;
      lock.unlock();
      drop(fn);
    }
  }

  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
    done_.wait(lock, [&] { return threads_ == 0; });
  }

 private:
  // Runs the connection's job on this (the accepting) thread in drop mode: it closes at once.
  static void drop(const std::function<void()>& fn) {
    tls_mode = Mode::kDrop;
    fn();
    tls_mode = Mode::kServe;
  }

  void work(std::function<void()> fn) {
    while (true) {
      fn();
      fn = nullptr;
      std::unique_lock<std::mutex> lock(mu_);
      --busy_;
      ++idle_;
      cv_.wait_for(lock, std::chrono::seconds(30), [&] { return !jobs_.empty() || stopping_; });
      if (!jobs_.empty()) {
        fn = std::move(jobs_.front());
        jobs_.pop_front();
        continue;
      }
      --idle_;
      --threads_;
      done_.notify_all();
      return;
    }
  }

  const int max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable done_;
  std::deque<std::function<void()>> jobs_;
  int busy_ = 0;
  int idle_ = 0;
  int threads_ = 0;
  int rejecting_ = 0;
  bool stopping_ = false;
};

int remaining_ms(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

// Writes all of `data` (each wait for the client to read at most `timeout`); false if the
// client is gone or stalled.
bool write_all(int fd, std::string_view data, milliseconds timeout) {
  while (!data.empty()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
    const ssize_t n = send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 417:
      return "Expectation Failed";
    case 431:
      return "Request Header Fields Too Large";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

// Answers with an OpenAI-style error and closes our side; what the client still sends is read
// (briefly) and dropped, so that closing does not reset the connection before it reads the
// answer.
void answer_and_close(int fd, int status, const std::string& message, milliseconds write_timeout,
                      const std::string& extra_headers = "") {
  const char* type = status >= 500 ? "service_unavailable" : "invalid_request_error";
  const std::string body = ApiError{status, message, type, "", ""}.body();
  const std::string response = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n{}\r\n{}",
      status, reason_phrase(status), body.size(), extra_headers, body);
  if (!write_all(fd, response, write_timeout)) return;
  ::shutdown(fd, SHUT_WR);
  // Clients that send the whole body before reading (httplib's) still get the answer: up to
  // 64 MiB or 2 s of what they send is read and dropped before closing.
  const Clock::time_point deadline = Clock::now() + milliseconds(2000);
  char buf[16384];
  size_t drained = 0;
  while (drained < (size_t{64} << 20)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, remaining_ms(deadline)) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    drained += static_cast<size_t>(n);
  }
}

enum class ReadResult { kData, kClosed, kTimeout, kStopped };

// Appends what arrives to `in`, waiting until `deadline` (in slices, to notice stop()).
template <typename Stopped>
ReadResult read_some(int fd, std::string& in, Clock::time_point deadline, Stopped stopped) {
  while (true) {
    if (stopped()) return ReadResult::kStopped;
    const int left = remaining_ms(deadline);
    if (left == 0) return ReadResult::kTimeout;
    pollfd p{fd, POLLIN, 0};
    const int r = poll(&p, 1, std::min<int>(left, static_cast<int>(kStopCheck.count())));
    if (r < 0 && errno != EINTR) return ReadResult::kClosed;
    if (r <= 0) continue;
    char buf[16384];
    const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return ReadResult::kClosed;
    in.append(buf, static_cast<size_t>(n));
    return ReadResult::kData;
  }
}

void address_of(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (r != 0) return;
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

// One framed request for httplib: reads come from memory (the checked, rewritten request),
// writes go to the socket.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int fd, std::string request, milliseconds write_timeout)
      : fd_(fd), request_(std::move(request)), write_timeout_(write_timeout) {}

  bool is_readable() const override { return pos_ < request_.size(); }
  // Writable and still connected: a client that closed (or reset) its side is gone.
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT | POLLRDHUP, 0};
    if (poll(&p, 1, static_cast<int>(write_timeout_.count())) <= 0) return false;
    return (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) == 0 &&
           (p.revents & POLLOUT) != 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, request_.size() - pos_);
    std::memcpy(ptr, request_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    while (true) {
      pollfd p{fd_, POLLOUT, 0};
      if (poll(&p, 1, static_cast<int>(write_timeout_.count())) <= 0) return -1;
      const ssize_t n = send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      return n;
    }
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    address_of(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    address_of(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  std::string request_;
  size_t pos_ = 0;
  milliseconds write_timeout_;
};

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(e.body(), "application/json");
}

// Debian's cpp-httplib is compiled with a listen backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG): a
// burst of clients (bench-serving opens 64 or more at once) would overflow the accept queue and
// stall in SYN retransmits. listen() again on the bound socket raises the backlog; httplib does
// not expose the descriptor, so find the listening socket on `port` among ours.
void widen_listen_backlog(int port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (...) {
      continue;
    }
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int listening = 0;
    socklen_t len = sizeof(listening);
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) != 0 || !listening) continue;
    sockaddr_storage addr{};
    socklen_t alen = sizeof(addr);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) != 0) continue;
    int bound = -1;
    if (addr.ss_family == AF_INET) bound = ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    if (addr.ss_family == AF_INET6) {
      bound = ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port);
    }
    if (bound == port && listen(fd, SOMAXCONN) != 0) {
      KV_LOG_WARN("could not raise the listen backlog of port {}", port);
    }
  }
}

}  // namespace

HardenedServer::HardenedServer(TransportOptions options) : options_(std::move(options)) {
  const int max_connections = options_.max_connections;
  new_task_queue = [max_connections] { return new ConnectionThreads(max_connections); };
}

HardenedServer::~HardenedServer() = default;

bool HardenedServer::process_and_close_socket(socket_t sock) {
  const Mode mode = tls_mode;
  if (mode == Mode::kServe) {
    ++open_;
    serve_connection(sock);
    --open_;
  } else if (mode == Mode::kReject) {
    // Read the request head (briefly), so that the answer reaches a client that is sending.
    std::string in;
    const Clock::time_point deadline = Clock::now() + milliseconds(1000);
    while (in.find("\r\n\r\n") == std::string::npos &&
           in.size() < options_.framing.max_head_bytes &&
           read_some(sock, in, deadline, [] { return false; }) == ReadResult::kData) {
    }
    answer_and_close(sock, 503,
                     fmt::format("the server is at its limit of {} connections; retry later",
                                 options_.max_connections),
                     milliseconds(1000), "Retry-After: 1\r\n");
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return mode == Mode::kServe;
}

void HardenedServer::serve_connection(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // stream events go out at once
  const auto stopped = [this] { return svr_sock_ == INVALID_SOCKET; };
  const TransportOptions& o = options_;
  std::string in;  // bytes read and not yet used (a pipelined next request stays here)
  for (int n = 0; n < o.max_requests_per_connection; ++n) {
    // The head: the first request's within header_timeout of the connection; later ones may
    // idle keep_alive_timeout first. From its first byte, a head has header_timeout to finish.
    bool started = !in.empty();
    Clock::time_point deadline =
        Clock::now() + (started || n == 0 ? o.header_timeout : o.keep_alive_timeout);
    auto parsed = parse_request_head(in, o.framing);
    while (std::holds_alternative<NeedMoreInput>(parsed)) {
      const ReadResult r = read_some(fd, in, deadline, stopped);
      if (r == ReadResult::kClosed || r == ReadResult::kStopped) return;
      if (r == ReadResult::kTimeout) {
        if (in.find_first_not_of("\r\n") != std::string::npos) {
          answer_and_close(fd, 408, "the request head did not arrive in time", o.write_timeout);
        }
        return;
      }
      if (!started) {
        started = true;
        deadline = Clock::now() + o.header_timeout;
      }
      parsed = parse_request_head(in, o.framing);
    }
    if (const auto* e = std::get_if<FramingError>(&parsed)) {
      answer_and_close(fd, e->status, e->message, o.write_timeout);
      return;
    }
    RequestHead head = std::get<RequestHead>(std::move(parsed));
    in.erase(0, head.head_bytes);

    // The body, read whole (its size is bounded): strictly de-chunked, or Content-Length bytes.
    if (head.expect_continue && (head.chunked || head.content_length > in.size())) {
      if (!write_all(fd, "HTTP/1.1 100 Continue\r\n\r\n", o.write_timeout)) return;
    }
    std::string body;
    ChunkedDecoder chunks(o.framing);
    while (true) {
      if (head.chunked) {
        in.erase(0, chunks.feed(in, body));
        if (const FramingError* e = chunks.error()) {
          answer_and_close(fd, e->status, e->message, o.write_timeout);
          return;
        }
        if (chunks.done()) break;
      } else if (in.size() >= head.content_length) {
        body.assign(in, 0, head.content_length);
        in.erase(0, head.content_length);
        break;
      }
      const ReadResult r = read_some(fd, in, Clock::now() + o.read_timeout, stopped);
      if (r == ReadResult::kClosed || r == ReadResult::kStopped) return;
      if (r == ReadResult::kTimeout) {
        answer_and_close(fd, 408, "the request body stalled", o.write_timeout);
        return;
      }
    }

    std::string request = std::move(head.rewritten);
    request += fmt::format("Content-Length: {}\r\n\r\n", body.size());
    request += body;
    body.clear();
    body.shrink_to_fit();
    ConnectionStream stream(fd, std::move(request), o.write_timeout);
    const bool last = n + 1 == o.max_requests_per_connection || stopped();
    bool closed = false;  // httplib: the client asked to close (or HTTP/1.0 without keep-alive)
    bool ok = false;
    try {  // handlers' exceptions are answered inside; this is for writing the response
      ok = process_request(stream, last, closed, nullptr);
    } catch (const std::exception& e) {
      KV_LOG_ERROR("closing a connection: writing the response failed: {}", e.what());
    }
    if (!ok || closed || last) return;
    in.shrink_to_fit();
  }
}

std::unique_ptr<httplib::Server> make_http_server(const ServerOptions& options) {
  TransportOptions t;
  t.framing.max_body_bytes = options.max_body_bytes;
  t.framing.max_head_bytes = options.max_head_bytes;
  t.max_connections = options.max_connections;
  t.header_timeout = std::chrono::seconds(options.header_timeout_s);
  t.keep_alive_timeout = std::chrono::seconds(options.keep_alive_timeout_s);
  t.read_timeout = std::chrono::seconds(options.read_timeout_s);
  t.write_timeout = std::chrono::seconds(options.write_timeout_s);
  return std::make_unique<HardenedServer>(t);
}

void configure_http_server(httplib::Server& s, const ServerOptions& options) {
  s.set_payload_max_length(options.max_body_bytes);
  s.set_read_timeout(options.read_timeout_s, 0);
  s.set_write_timeout(options.write_timeout_s, 0);

  // Authentication: everything but /health needs the key.
  s.set_pre_routing_handler(
      [key = options.api_key](const httplib::Request& req, httplib::Response& res) {
        if (key.empty() || req.path == "/health")
          return httplib::Server::HandlerResponse::Unhandled;
        if (api_key_matches(req.get_header_value("Authorization"), key)) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        send_error(res, {401, "invalid API key (send Authorization: Bearer <key>)",
                         "invalid_request_error", "", "invalid_api_key"});
        return httplib::Server::HandlerResponse::Handled;
      });
  // Errors httplib produces itself (404, 405, 413, 400 on a broken request) get a JSON body.
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    std::string msg = fmt::format("HTTP error {}", res.status);
    if (res.status == 404) msg = fmt::format("no route for {} {}", req.method, req.path);
    if (res.status == 405) msg = fmt::format("{} is not allowed on {}", req.method, req.path);
    if (res.status == 413) msg = "the request body is too large";
    if (res.status == 400) msg = "malformed HTTP request";
    const char* type = res.status >= 500 ? "internal_error" : "invalid_request_error";
    res.set_content(ApiError{res.status, msg, type, "", ""}.body(), "application/json");
  });
  // A handler that throws is a bug; the client still gets an OpenAI-style error without the
  // library's text: a JSON access that did not fit the document (a field of an unexpected type)
  // is the request's fault (400), running out of memory is 503, anything else 500.
  s.set_exception_handler([](const httplib::Request& req, httplib::Response& res,
                             std::exception_ptr ep) {
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const nlohmann::json::exception& e) {
      KV_LOG_WARN("{} {}: JSON access failed: {}", req.method, req.path, e.what());
      return send_error(res, bad_request("a field of the request has an unexpected type"));
    } catch (const std::bad_alloc&) {
      KV_LOG_ERROR("{} {}: out of memory", req.method, req.path);
      return send_error(res, {503, "the server is out of memory", "service_unavailable", "", ""});
    } catch (const std::exception& e) {
      KV_LOG_ERROR("{} {}: handler failed: {}", req.method, req.path, e.what());
    } catch (...) {
      KV_LOG_ERROR("{} {}: handler failed", req.method, req.path);
    }
    send_error(res, {500, "internal error", "internal_error", "", ""});
  });
}

Result<int> bind_http_server(httplib::Server& s, const ServerOptions& options) {
  int port = options.port;
  if (port == 0) {
    port = s.bind_to_any_port(options.host);
    if (port <= 0) return unavailable("cannot bind {}: no free port", options.host);
  } else if (!s.bind_to_port(options.host, options.port)) {
    return unavailable("cannot bind {}:{} (in use, or not a local address)", options.host,
                       options.port);
  }
  widen_listen_backlog(port);
  return port;
}

}  // namespace kvserve::server

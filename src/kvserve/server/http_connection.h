// One client connection of the asynchronous server (server/async_http_server.h), on Boost.Asio:
// the request read with strict framing (server/http_framing.h decides where the head and the body
// end and refuses what is ambiguous, before Beast's request_parser reads the fields), the route
// called on the connection's strand, and the answer written back (whole, or chunked piece by
// piece) while the socket is watched for the client going away. Idle connections hold no buffer
// and no thread: a wait on the socket and a timer.
//
// Deadlines: a request head within header_timeout of its first byte (else 408), a body that
// never pauses longer than read_timeout (408), keep_alive_timeout idle between requests (closed),
// a write the client does not take within write_timeout (the client is gone).
#pragma once

#include <utility>  // before Asio: Boost 1.74's awaitable.hpp uses std::exchange unincluded

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "kvserve/server/http_exchange.h"
#include "kvserve/server/http_framing.h"

namespace kvserve::server {

struct ConnectionLimits {
  FramingLimits framing;
  std::chrono::milliseconds header_timeout{10000};     // whole request head, from its first byte
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between requests
  std::chrono::milliseconds read_timeout{60000};       // longest pause inside a request body
  std::chrono::milliseconds write_timeout{60000};      // longest wait for the client to read
  int max_connections = 4096;                          // then 503 with Retry-After
  int max_requests_per_connection = 10000;
};

class Connection;

// What the server's connections share: limits, the route, the count of open connections, and the
// gate that stops posts to the io_context once the server is going away.
struct ConnectionShared {
  using Handler = std::function<void(HttpRequest&, std::shared_ptr<Exchange>)>;

  ConnectionLimits limits;
  Handler handle;  // called on the connection's strand
  std::atomic<int> open{0};
  std::atomic<int> rejecting{0};
  std::atomic<bool> stopping{false};

  std::mutex mu;  // guards `gate_open` and `live`
  bool gate_open = true;
  std::list<std::weak_ptr<Connection>> live;
};

class Connection final : public Exchange, public std::enable_shared_from_this<Connection> {
 public:
  // `reject`: the server is at max_connections; read the head briefly, answer 503, close.
  Connection(boost::asio::ip::tcp::socket socket, std::shared_ptr<ConnectionShared> shared,
             bool reject);
  ~Connection() override;

  void start();
  // The server stops: close when idle, or after the exchange in flight.
  void server_stopping();
  // The server's io_context has stopped: close now (the exchange's client counts as gone).
  void close_now();

  void respond(HttpResponse response) override;
  void start_stream(int status, std::string content_type, HttpHeaders headers,
                    Written written) override;
  void stream_piece(std::string data, Written written) override;
  void end_stream() override;
  bool post(std::function<void()> fn) override;
  void on_gone(std::function<void()> fn) override;

 private:
  enum class Phase { kIdle, kHead, kBody, kHandling, kClosing, kClosed };
  enum class Timer { kIdle, kHead, kBody, kWrite, kLinger, kReject };

  void wait_readable();
  void on_readable(const boost::system::error_code& ec);
  void process_input();
  void dispatch();
  void watch_client(uint64_t exchange);
  void arm(std::chrono::milliseconds after, Timer what);
  void disarm();
  void on_timeout(Timer what);
  // The exchange is over: the next request on this connection, or close.
  void next_request();
  // An error answer with Connection: close; then what the client still sends is read and
  // dropped (briefly), so that closing does not reset the connection before it reads it.
  void answer_and_close(int status, const std::string& message, const HttpHeaders& extra = {});
  void linger();
  void client_gone();
  void close();
  void release_count();
  template <typename Buffers>
  void write(std::shared_ptr<void> keep, const Buffers& buffers, std::function<void(bool)> done);

  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer timer_;
  std::shared_ptr<ConnectionShared> shared_;
  std::list<std::weak_ptr<Connection>>::iterator registered_;
  const bool reject_;
  bool counted_ = true;  // holds a place in shared_->open (or rejecting)

  Phase phase_ = Phase::kIdle;
  uint64_t timer_gen_ = 0;
  uint64_t exchange_ = 0;  // exchanges started on this connection
  bool keep_alive_ = true;
  bool answered_ = false;  // the exchange's answer has begun
  bool writing_ = false;
  std::string in_;  // bytes read and not yet used (a pipelined next request stays here)
  RequestHead head_;
  std::string body_;
  std::optional<ChunkedDecoder> chunks_;
  size_t lingered_ = 0;
  std::function<void()> on_gone_;
};

}  // namespace kvserve::server

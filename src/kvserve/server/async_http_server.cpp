#include "kvserve/server/async_http_server.h"

#include <thread>
#include <vector>

#include "kvserve/core/logging.h"

namespace kvserve::server {

namespace net = boost::asio;
using boost::system::error_code;
using tcp = net::ip::tcp;

constexpr int kMaxRejecting = 64;  // connections being answered 503 at once; beyond, closed

struct AsyncHttpServer::Impl {
  AsyncServerOptions options;
  std::shared_ptr<ConnectionShared> shared = std::make_shared<ConnectionShared>();
  net::io_context io{std::max(1, options.io_threads)};
  tcp::acceptor acceptor{io};
  net::steady_timer retry{io};       // accepting again after an error (out of descriptors)
  net::steady_timer stop_check{io};  // after stop(): waits for exchanges in flight
  net::thread_pool workers{static_cast<size_t>(std::max(1, options.worker_threads))};
  std::atomic<bool> stopped{false};
  std::chrono::steady_clock::time_point stop_deadline;

  explicit Impl(AsyncServerOptions o) : options(std::move(o)) {}

  void accept() {
    acceptor.async_accept(net::make_strand(io), [this](const error_code& ec, tcp::socket s) {
      if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {  // e.g. out of descriptors: try again shortly rather than spin
        KV_LOG_WARN("accept failed: {}", ec.message());
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](const error_code& e) {
          if (!e && acceptor.is_open()) accept();
        });
        return;
      }
      const bool reject = shared->open.load() >= options.limits.max_connections;
      if (reject && shared->rejecting.load() >= kMaxRejecting) {
        error_code ignored;
        s.close(ignored);
      } else {
        std::make_shared<Connection>(std::move(s), shared, reject)->start();
      }
      accept();
    });
  }

  std::vector<std::shared_ptr<Connection>> live() {
    std::vector<std::shared_ptr<Connection>> out;
    std::lock_guard<std::mutex> lock(shared->mu);
    for (const auto& w : shared->live) {
      if (auto c = w.lock()) out.push_back(std::move(c));
    }
    return out;
  }

  // After stop(): idle connections close now, busy ones after their exchange; the io_context
  // stops once none is open (or at the deadline).
  void wait_for_connections() {
    if (shared->open.load() + shared->rejecting.load() == 0 ||
        std::chrono::steady_clock::now() >= stop_deadline) {
      io.stop();
      return;
    }
    stop_check.expires_after(std::chrono::milliseconds(20));
    stop_check.async_wait([this](const error_code&) { wait_for_connections(); });
  }
};

AsyncHttpServer::AsyncHttpServer(AsyncServerOptions options, ConnectionShared::Handler handle)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  impl_->shared->limits = impl_->options.limits;
  impl_->shared->handle = std::move(handle);
}

AsyncHttpServer::~AsyncHttpServer() {
  stop();
  impl_->io.stop();
  impl_->workers.join();
  // Nothing runs the io_context any more: close what is left (a client still in an exchange
  // counts as gone: its requests are aborted), then no more posts into it.
  for (const auto& c : impl_->live())
    c->close_now();
  std::lock_guard<std::mutex> lock(impl_->shared->mu);
  impl_->shared->gate_open = false;
}

Result<int> AsyncHttpServer::bind() {
  const AsyncServerOptions& o = impl_->options;
  error_code ec;
  tcp::resolver resolver(impl_->io);
  const auto endpoints = resolver.resolve(
      o.host, std::to_string(o.port), tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || endpoints.empty()) {
    return unavailable("cannot bind {}:{} (in use, or not a local address)", o.host, o.port);
  }
  for (const auto& entry : endpoints) {
    tcp::acceptor& a = impl_->acceptor;
    error_code e;
    a.open(entry.endpoint().protocol(), e);
    if (e) continue;
    a.set_option(net::socket_base::reuse_address(true), e);
    a.bind(entry.endpoint(), e);
    if (!e) a.listen(net::socket_base::max_listen_connections, e);
    if (!e) return static_cast<int>(a.local_endpoint().port());
    a.close(e);
  }
  if (o.port == 0) return unavailable("cannot bind {}: no free port", o.host);
  return unavailable("cannot bind {}:{} (in use, or not a local address)", o.host, o.port);
}

void AsyncHttpServer::run() {
  Impl& s = *impl_;
  if (s.stopped.load() || !s.acceptor.is_open()) return;
  s.accept();
  std::vector<std::thread> extra;
  for (int i = 1; i < s.options.io_threads; ++i)
    extra.emplace_back([&s] { s.io.run(); });
  s.io.run();
  for (std::thread& t : extra)
    t.join();
}

void AsyncHttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopped.exchange(true)) return;
  s.shared->stopping = true;
  net::post(s.io, [&s] {
    error_code ec;
    s.acceptor.close(ec);
    s.retry.cancel();
    for (const auto& c : s.live())
      c->post([c] { c->server_stopping(); });
    s.stop_deadline = std::chrono::steady_clock::now() + s.options.stop_grace;
    s.wait_for_connections();
  });
}

void AsyncHttpServer::offload(std::function<void()> fn) {
  net::post(impl_->workers, std::move(fn));
}

int AsyncHttpServer::open_connections() const {
  return impl_->shared->open.load();
}

}  // namespace kvserve::server

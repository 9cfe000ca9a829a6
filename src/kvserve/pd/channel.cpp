#include "kvserve/pd/channel.h"

#include <zmq.hpp>

#include "kvserve/core/logging.h"

namespace kvserve::pd {
namespace {

// Messages queued towards one peer before send() reports it unreachable.
constexpr int kHighWaterMark = 100000;

void configure(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, kHighWaterMark);
  s.set(zmq::sockopt::rcvhwm, kHighWaterMark);
}

void log_bad(const Status& s) {
  KV_LOG_WARN("dropped a control message: {}", s.message());
}

}  // namespace

struct ControlServer::Impl {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::router};
};

ControlServer::ControlServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {}
ControlServer::~ControlServer() = default;

Result<std::unique_ptr<ControlServer>> ControlServer::bind(const std::string& host, int port) {
  auto impl = std::make_unique<Impl>();
  try {
    configure(impl->socket);
    // A reply to a peer that is gone fails instead of vanishing silently.
    impl->socket.set(zmq::sockopt::router_mandatory, 1);
    // A decode server that reconnects under the same identity (its old connection not yet torn
    // down here) takes the identity over instead of being ignored.
    impl->socket.set(zmq::sockopt::router_handover, 1);
    const std::string bind_host = host.empty() || host == "0.0.0.0" ? "*" : host;
    impl->socket.bind(port == 0 ? fmt::format("tcp://{}:*", bind_host)
                                : fmt::format("tcp://{}:{}", bind_host, port));
    const std::string endpoint = impl->socket.get(zmq::sockopt::last_endpoint);
    const int bound = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
    return std::unique_ptr<ControlServer>(new ControlServer(std::move(impl), bound));
  } catch (const zmq::error_t& e) {
    return unavailable("--disaggregation-bootstrap-port {}: cannot bind: {}", port, e.what());
  }
}

std::vector<std::pair<std::string, Message>> ControlServer::receive() {
  std::vector<std::pair<std::string, Message>> out;
  while (true) {
    zmq::message_t identity;
    zmq::message_t body;
    if (!impl_->socket.recv(identity, zmq::recv_flags::dontwait)) break;
    // [identity][body]; the parts of one message arrive together, so these reads do not wait.
    if (!identity.more() || !impl_->socket.recv(body, zmq::recv_flags::none)) continue;
    if (body.more()) {  // not ours: drain and drop
      zmq::message_t rest;
      while (impl_->socket.recv(rest, zmq::recv_flags::none) && rest.more()) {
      }
      continue;
    }
    Result<Message> m = decode(body.to_string_view());
    if (!m.is_ok()) {
      log_bad(m.status());
      continue;
    }
    out.emplace_back(identity.to_string(), std::move(m).value());
  }
  return out;
}

bool ControlServer::send(const std::string& peer, const Message& m) {
  try {
    const std::string body = encode(m);
    if (!impl_->socket.send(zmq::buffer(peer),
                            zmq::send_flags::sndmore | zmq::send_flags::dontwait))
      return false;
    return impl_->socket.send(zmq::buffer(body), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;  // EHOSTUNREACH: the peer is not connected
  }
}

struct ControlClient::Impl {
  zmq::context_t context{1};
  zmq::socket_t socket{context, zmq::socket_type::dealer};
};

ControlClient::ControlClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlClient::~ControlClient() = default;

Result<std::unique_ptr<ControlClient>> ControlClient::connect(const std::string& host, int port,
                                                              const std::string& identity) {
  auto impl = std::make_unique<Impl>();
  try {
    configure(impl->socket);
    impl->socket.set(zmq::sockopt::routing_id, identity);
    impl->socket.set(zmq::sockopt::reconnect_ivl, 100);
    impl->socket.set(zmq::sockopt::reconnect_ivl_max, 1000);
    impl->socket.connect(fmt::format("tcp://{}:{}", host, port));
    return std::unique_ptr<ControlClient>(new ControlClient(std::move(impl)));
  } catch (const zmq::error_t& e) {
    return unavailable("bootstrap {}:{}: cannot connect: {}", host, port, e.what());
  }
}

std::vector<Message> ControlClient::receive() {
  std::vector<Message> out;
  while (true) {
    zmq::message_t body;
    if (!impl_->socket.recv(body, zmq::recv_flags::dontwait)) break;
    while (body.more()) {  // a multi-part message is not ours: drain it
      if (!impl_->socket.recv(body, zmq::recv_flags::none)) break;
    }
    Result<Message> m = decode(body.to_string_view());
    if (!m.is_ok()) {
      log_bad(m.status());
      continue;
    }
    out.push_back(std::move(m).value());
  }
  return out;
}

bool ControlClient::send(const Message& m) {
  try {
    const std::string body = encode(m);
    return impl_->socket.send(zmq::buffer(body), zmq::send_flags::dontwait).has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

}  // namespace kvserve::pd

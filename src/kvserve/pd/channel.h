// The control plane's sockets (ZeroMQ; docs/disaggregation.md says why not HTTP). Both ends are
// owned and driven by the engine thread: receive() never blocks, send() never blocks (a message
// that cannot be queued is reported, not waited for), and closing never lingers.
//
//   ControlServer  the prefill side: a ROUTER bound on --disaggregation-bootstrap-port; it
//                  answers each decode server on the identity that server's messages came from.
//   ControlClient  the decode side's link to one prefill server: a DEALER that ZeroMQ reconnects
//                  by itself when the prefill restarts (no state here remembers a failure).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/pd/messages.h"

namespace kvserve::pd {

class ControlServer {
 public:
  // Binds tcp://host:port (port 0: a free port, see port()). kUnavailable when the port is taken.
  static Result<std::unique_ptr<ControlServer>> bind(const std::string& host, int port);
  ~ControlServer();

  int port() const { return port_; }
  // Every message waiting now, with the identity of the decode server that sent it. A malformed
  // message is logged and dropped.
  std::vector<std::pair<std::string, Message>> receive();
  // False when `peer` is not connected (or its queue is full): the message is dropped.
  bool send(const std::string& peer, const Message& m);

 private:
  struct Impl;
  explicit ControlServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

class ControlClient {
 public:
  // Connects (asynchronously: messages queue until the link is up) to tcp://host:port as
  // `identity`.
  static Result<std::unique_ptr<ControlClient>> connect(const std::string& host, int port,
                                                        const std::string& identity);
  ~ControlClient();

  std::vector<Message> receive();
  bool send(const Message& m);

 private:
  struct Impl;
  explicit ControlClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvserve::pd

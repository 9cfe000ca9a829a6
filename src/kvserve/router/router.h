// kvserve router: the front of a disaggregated deployment (docs/disaggregation.md). Each request
// to /generate, /v1/completions or /v1/chat/completions goes, with the same body plus
// bootstrap_host / bootstrap_port / bootstrap_room (a fresh random 63-bit room), to one prefill
// and one decode server at once; the client gets the decode server's answer (streamed when it
// asked). When one side fails the other side's connection is closed, which aborts it there.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/router/worker_pool.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace kvserve::router {

struct RouterOptions {
  std::string host = "127.0.0.1";
  int32_t port = 30000;
  std::vector<std::string> prefill;
  std::vector<std::string> decode;
  double health_interval_s = 2;
  double startup_timeout_s = 60;
  double request_timeout_s = 3600;  // per read from a server
};

class Router {
 public:
  static Result<std::unique_ptr<Router>> create(const RouterOptions& options);
  ~Router();

  Status bind();  // kUnavailable naming --host / --port when it cannot listen
  int32_t port() const { return port_; }
  void run();  // until stop()
  void stop();

 private:
  explicit Router(const RouterOptions& options);
  void routes();
  void forward(const std::string& path, const httplib::Request& req, httplib::Response& res);

  RouterOptions options_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<httplib::Server> server_;
  int32_t port_ = 0;
};

}  // namespace kvserve::router

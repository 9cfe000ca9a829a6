// The route table of the asynchronous server: (method, path) -> handler, with what every route
// shares: the API key (every path but /health needs "Authorization: Bearer KEY", 401 without),
// a JSON 404 for what no route takes, and a handler's exceptions turned into OpenAI-style errors
// without the library's text (a JSON access that does not fit the document: 400; out of memory:
// 503; anything else: 500). A route runs on the I/O thread when it is short and never waits, or
// on the worker pool (tokenizing, chat templates, JSON of a request body, engine calls that wait).
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "kvserve/server/errors.h"
#include "kvserve/server/http_exchange.h"

namespace kvserve::server {

using ordered_json = nlohmann::ordered_json;

void send_error(Exchange& ex, const ApiError& e);
void send_json(Exchange& ex, const ordered_json& j);

class HttpRouter {
 public:
  using Handler = std::function<void(const HttpRequest&, std::shared_ptr<Exchange>)>;
  using Offload = std::function<void(std::function<void()>)>;
  enum class Where { kIoThread, kWorker };

  HttpRouter(std::string api_key, Offload offload)
      : api_key_(std::move(api_key)), offload_(std::move(offload)) {}

  void add(const std::string& method, const std::string& path, Where where, Handler handler);
  // Called by the server for every request, on its connection's strand.
  void dispatch(HttpRequest& request, std::shared_ptr<Exchange> exchange) const;

 private:
  struct Route {
    Where where;
    Handler handler;
  };
  std::string api_key_;
  Offload offload_;
  std::map<std::pair<std::string, std::string>, Route> routes_;
};

}  // namespace kvserve::server

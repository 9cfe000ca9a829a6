#include "kvserve/server/http_router.h"

#include <fmt/format.h>

#include "kvserve/core/logging.h"
#include "kvserve/server/api_key.h"

namespace kvserve::server {
namespace {

// Runs a handler, answering what it throws.
void run_guarded(const HttpRouter::Handler& handler, const HttpRequest& req,
                 const std::shared_ptr<Exchange>& ex) {
  try {
    handler(req, ex);
    return;
  } catch (const nlohmann::json::exception& e) {
    KV_LOG_WARN("{} {}: JSON access failed: {}", req.method, req.path, e.what());
    return send_error(*ex, bad_request("a field of the request has an unexpected type"));
  } catch (const std::bad_alloc&) {
    KV_LOG_ERROR("{} {}: out of memory", req.method, req.path);
    return send_error(*ex, {503, "the server is out of memory", "service_unavailable", "", ""});
  } catch (const std::exception& e) {
    KV_LOG_ERROR("{} {}: handler failed: {}", req.method, req.path, e.what());
  } catch (...) {
    KV_LOG_ERROR("{} {}: handler failed", req.method, req.path);
  }
  send_error(*ex, {500, "internal error", "internal_error", "", ""});
}

}  // namespace

void send_error(Exchange& ex, const ApiError& e) {
  HttpResponse r;
  r.status = e.status;
  r.body = e.body();
  if (e.retry_after_s > 0) r.headers.emplace_back("Retry-After", std::to_string(e.retry_after_s));
  ex.respond(std::move(r));
}

void send_json(Exchange& ex, const ordered_json& j) {
  ex.respond({200,
              "application/json",
              j.dump(-1, ' ', false, ordered_json::error_handler_t::replace),
              {}});
}

void HttpRouter::add(const std::string& method, const std::string& path, Where where,
                     Handler handler) {
  routes_[{method, path}] = Route{where, std::move(handler)};
}

void HttpRouter::dispatch(HttpRequest& request, std::shared_ptr<Exchange> ex) const {
  if (!api_key_.empty() && request.path != "/health" &&
      !api_key_matches(request.header("Authorization"), api_key_)) {
    return send_error(*ex, {401, "invalid API key (send Authorization: Bearer <key>)",
                            "invalid_request_error", "", "invalid_api_key"});
  }
  const auto it = routes_.find({request.method, request.path});
  if (it == routes_.end()) {
    // ApiError::body() replaces bytes that are not UTF-8 (a path may hold any).
    return send_error(*ex, {404, fmt::format("no route for {} {}", request.method, request.path),
                            "invalid_request_error", "", ""});
  }
  const Route& route = it->second;
  if (route.where == Where::kIoThread) return run_guarded(route.handler, request, ex);
  auto req = std::make_shared<HttpRequest>(std::move(request));
  offload_([handler = route.handler, req, ex] { run_guarded(handler, *req, ex); });
}

}  // namespace kvserve::server

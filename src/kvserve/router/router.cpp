#include "kvserve/router/router.h"

#include <httplib.h>

#include <mutex>
#include <random>
#include <thread>

#include "kvserve/core/logging.h"

namespace kvserve::router {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxErrorBody = 64 * 1024;

void send_error(httplib::Response& res, int status, const std::string& message) {
  const json body = {{"object", "error"},
                     {"message", message},
                     {"type", status >= 500 ? "service_unavailable" : "invalid_request_error"},
                     {"param", nullptr},
                     {"code", status}};
  res.status = status;
  res.set_content(body.dump(), "application/json");
}

uint64_t random_room() {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return rng() >> 1;  // 63 bits
}

// One request's two halves. The prefill half runs on its own thread; whichever side fails first
// closes the other's connection (the server aborts a request whose client is gone).
struct Exchange {
  std::string path;
  std::string body;
  httplib::Client prefill;
  httplib::Client decode;
  std::mutex mu;
  bool prefill_failed = false;
  int prefill_status = 0;
  std::string prefill_error;
  std::thread prefill_thread;

  Exchange(const std::string& p, std::string b, const Worker& pw, const Worker& dw,
           double timeout_s)
      : path(p), body(std::move(b)), prefill(pw.url), decode(dw.url) {
    const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    for (httplib::Client* c : {&prefill, &decode}) {
      c->set_connection_timeout(std::chrono::seconds(5));
      c->set_tcp_nodelay(true);  // the request's header and body writes go out at once
      c->set_read_timeout(timeout);
      c->set_write_timeout(timeout);
    }
  }

  void start_prefill() {
    prefill_thread = std::thread([this] {
      std::string error_body;
      int status = 0;
      httplib::Request req;
      req.method = "POST";
      req.path = path;
      req.body = body;
      req.set_header("Content-Type", "application/json");
      req.response_handler = [&](const httplib::Response& r) {
        status = r.status;
        return true;
      };
      req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
        if (error_body.size() < kMaxErrorBody) error_body.append(data, n);
        return true;
      };
      httplib::Response res;
      httplib::Error err = httplib::Error::Success;
      const bool sent = prefill.send(req, res, err);
      std::lock_guard lock(mu);
      prefill_status = sent ? res.status : 0;
      // An SSE stream that reported an error counts as failed too.
      const bool stream_error = error_body.find("\"error\"") != std::string::npos;
      if (!sent || res.status != 200 || stream_error) {
        prefill_failed = true;
        prefill_error =
            sent ? error_body : fmt::format("prefill server: {}", httplib::to_string(err));
        decode.stop();  // the decode half cannot get its KV: end it there
      }
    });
  }

  // Closes the prefill connection (if still open) and waits for its thread.
  void finish_prefill() {
    if (prefill_thread.joinable()) prefill_thread.join();
  }

  ~Exchange() {
    prefill.stop();
    finish_prefill();
  }
};

std::string sse_error(const std::string& message, int code) {
  const json e = {
      {"error", {{"message", message}, {"type", "service_unavailable"}, {"code", code}}}};
  return "data: " + e.dump() + "\n\ndata: [DONE]\n\n";
}

}  // namespace

Router::Router(const RouterOptions& options) : options_(options) {}
Router::~Router() = default;

Result<std::unique_ptr<Router>> Router::create(const RouterOptions& options) {
  std::unique_ptr<Router> r(new Router(options));
  KV_ASSIGN_OR_RETURN(r->pool_,
                      WorkerPool::create(options.prefill, options.decode, options.startup_timeout_s,
                                         options.health_interval_s));
  r->server_ = std::make_unique<httplib::Server>();
  // Without it every streamed event (chunk size, data and CRLF: three writes) waits on Nagle for
  // the client's ACK of the one before (kvserve serve sets it on its sockets for the same reason).
  r->server_->set_tcp_nodelay(true);
  r->routes();
  return r;
}

Status Router::bind() {
  port_ = options_.port == 0
              ? server_->bind_to_any_port(options_.host)
              : (server_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0)
    return unavailable("--host {} --port {}: cannot listen", options_.host, options_.port);
  return Status::ok();
}

void Router::run() {
  server_->listen_after_bind();
}

void Router::stop() {
  server_->stop();
}

void Router::routes() {
  httplib::Server& s = *server_;
  s.Get("/health",
        [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });
  s.Get("/get_server_info", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(json{{"router", pool_->describe()}}.dump(), "application/json");
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    httplib::Client cli(pool_->any_decode()->url);
    cli.set_read_timeout(std::chrono::seconds(10));
    const auto r = cli.Get("/v1/models");
    if (!r) return send_error(res, 503, "no decode server answered");
    res.status = r->status;
    res.set_content(r->body, "application/json");
  });
  for (const char* path : {"/generate", "/v1/completions", "/v1/chat/completions"}) {
    s.Post(path, [this, path](const httplib::Request& req, httplib::Response& res) {
      forward(path, req, res);
    });
  }
}

void Router::forward(const std::string& path, const httplib::Request& req, httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return send_error(res, 400, "the body must be a JSON object");
  }
  const auto stream_it = body.find("stream");
  if (stream_it != body.end() && !stream_it->is_null() && !stream_it->is_boolean()) {
    return send_error(res, 400, "'stream' must be a boolean");
  }
  const bool stream = stream_it != body.end() && stream_it->is_boolean() && stream_it->get<bool>();
  const std::optional<WorkerPool::Pair> pair = pool_->pick();
  if (!pair) return send_error(res, 503, "no healthy prefill or decode server");
  body["bootstrap_host"] = pair->prefill->host;
  body["bootstrap_port"] = pair->prefill->bootstrap_port;
  body["bootstrap_room"] = random_room();
  auto ex = std::make_shared<Exchange>(path, body.dump(), *pair->prefill, *pair->decode,
                                       options_.request_timeout_s);
  ex->start_prefill();
  if (!stream) {
    const auto dres = ex->decode.Post(path.c_str(), ex->body, "application/json");
    if (!dres || dres->status != 200) ex->prefill.stop();  // the decode half failed: end the other
    ex->finish_prefill();
    std::lock_guard lock(ex->mu);
    if (ex->prefill_failed && (!dres || dres->status != 200)) {
      // The prefill's own answer says why (its HTTP error, or its stream's error).
      if (ex->prefill_status >= 400) {
        res.status = ex->prefill_status;
        res.set_content(ex->prefill_error, "application/json");
        return;
      }
      return send_error(res, 502, ex->prefill_error);
    }
    if (!dres) {
      return send_error(res, 502,
                        fmt::format("decode server: {}", httplib::to_string(dres.error())));
    }
    res.status = dres->status;
    res.set_content(dres->body, dres->get_header_value("Content-Type"));
    return;
  }
  res.set_chunked_content_provider("text/event-stream", [ex](size_t, httplib::DataSink& sink) {
    int status = 0;
    bool client_gone = false;
    std::string error_body;
    httplib::Request dreq;
    dreq.method = "POST";
    dreq.path = ex->path;
    dreq.body = ex->body;
    dreq.set_header("Content-Type", "application/json");
    dreq.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    dreq.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        if (error_body.size() < kMaxErrorBody) error_body.append(data, n);
        return true;
      }
      if (!sink.is_writable() || !sink.write(data, n)) {
        client_gone = true;  // closing our decode connection aborts it there
        return false;
      }
      return true;
    };
    httplib::Response dres;
    httplib::Error err = httplib::Error::Success;
    const bool sent = ex->decode.send(dreq, dres, err);
    if (!sent || status != 200 || client_gone) ex->prefill.stop();
    ex->finish_prefill();
    if (client_gone) return false;
    if (!sent || status != 200) {
      std::lock_guard lock(ex->mu);
      std::string why = ex->prefill_failed ? ex->prefill_error
                        : sent             ? error_body
                               : fmt::format("decode server: {}", httplib::to_string(err));
      const std::string event = sse_error(why, status == 0 ? 502 : status);
      sink.write(event.data(), event.size());
    }
    sink.done();
    return true;
  });
}

}  // namespace kvserve::router

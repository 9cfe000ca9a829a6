#include "kvserve/server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <filesystem>
#include <thread>

#include "kvserve/core/logging.h"
#include "kvserve/core/version.h"
#include "kvserve/server/api_key.h"
#include "kvserve/server/disagg_info.h"
#include "kvserve/server/http_transport.h"
#include "kvserve/server/responses.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;

constexpr auto kPoll = milliseconds(50);  // how often a waiting handler checks its client

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
  res.set_content(e.body(), "application/json");
}

void send_json(httplib::Response& res, const ordered_json& j) {
  res.status = 200;
  res.set_content(j.dump(-1, ' ', false, ordered_json::error_handler_t::replace),
                  "application/json");
}

// Streams `job` as server-sent events. `on_event` renders each event into SSE text; `finish`
// renders what follows the last event (usage chunks, [DONE]). The client going away aborts it.
void stream_job(
    httplib::Response& res, std::shared_ptr<Job> job,
    std::function<std::string(size_t, const std::string&, const engine::StreamEvent&)> on_event,
    std::function<std::string()> finish) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [job, on_event, finish](size_t, httplib::DataSink& sink) {
        while (!job->all_done()) {
          std::string out;
          job->poll(kPoll, [&](size_t i, const std::string& delta, const engine::StreamEvent& e) {
            out += on_event(i, delta, e);
          });
          // A write to a closed connection fails; with nothing to write, ask the socket (a
          // syscall, so only when idle).
          if (out.empty() ? !sink.is_writable() : !sink.write(out.data(), out.size())) {
            job->abort();
            return false;
          }
        }
        const std::string tail = finish();
        if (!sink.write(tail.data(), tail.size())) return false;
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->abort();
      });
}

// Waits for the whole job (checking that the client is still there), then sends `render()`, or
// the OpenAI-style error of a choice the engine failed (FinishKind::kError). The headers leave
// with the first byte, before the engine has answered, so that error goes with status 200: its
// body is the error document clients parse.
void respond_when_done(httplib::Response& res, std::shared_ptr<Job> job,
                       std::function<ordered_json()> render) {
  res.set_chunked_content_provider(
      "application/json",
      [job, render](size_t, httplib::DataSink& sink) {
        while (!job->all_done()) {
          if (!sink.is_writable()) {
            job->abort();
            return false;
          }
          job->poll(kPoll, [](size_t, const std::string&, const engine::StreamEvent&) {});
        }
        const std::optional<ApiError> failed = job_error(*job);
        const std::string body = failed ? failed->body() : render().dump();
        if (!sink.write(body.data(), body.size())) return false;
        sink.done();
        return true;
      },
      [job](bool success) {
        if (!success) job->abort();
      });
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

HttpServer::HttpServer(engine::Engine& engine, ServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      http_(make_http_server(options_)),
      admission_(engine_, options_.max_queued_requests) {
  model_name_ =
      options_.served_model_name.empty() ? engine_.model_name() : options_.served_model_name;
  install_routes();
}

HttpServer::~HttpServer() {
  stop();
}

Status HttpServer::bind() {
  KV_ASSIGN_OR_RETURN(bound_port_, bind_http_server(*http_, options_));
  return Status::ok();
}

void HttpServer::run() {
  http_->listen_after_bind();
}

void HttpServer::stop() {
  if (http_) http_->stop();
}

std::variant<std::shared_ptr<Job>, ApiError> HttpServer::start_job(
    const std::vector<GenerationSpec>& specs, int32_t n, const std::vector<std::string>& rids) {
  auto admitted = admission_.admit(static_cast<int64_t>(specs.size()) * n);
  if (auto* e = std::get_if<ApiError>(&admitted)) return *e;
  auto started = Job::start(engine_, specs, n, rids);
  if (auto* e = std::get_if<ApiError>(&started)) return *e;
  std::shared_ptr<Job> job = std::move(std::get<std::unique_ptr<Job>>(started));
  job->admission = std::get<Admission::Ticket>(std::move(admitted));
  return job;
}

void HttpServer::install_routes() {
  httplib::Server& s = *http_;
  configure_http_server(s, options_);

  ModelLimits limits{
      engine_.context_len(), engine_.model_config().vocab_size, engine_.tokenizer(), nullptr, {}};
  if (options_.sampling_defaults == "model") {
    limits.sampling_defaults = model_sampling_defaults(engine_.generation_config());
  }
  // The chat template is parsed once.
  auto chat_template = std::make_shared<std::optional<tokenizer::ChatTemplate>>();
  if (engine_.tokenizer() && !engine_.tokenizer()->chat_template().empty()) {
    auto t = tokenizer::ChatTemplate::parse(engine_.tokenizer()->chat_template());
    if (t.is_ok()) {
      *chat_template = std::move(t).value();
    } else {
      KV_LOG_WARN("the model's chat template does not parse ({}); chat completions are disabled",
                  t.status().message());
    }
  }
  auto limits_with_template = [limits, chat_template] {
    ModelLimits m = limits;
    if (chat_template->has_value()) m.chat_template = &chat_template->value();
    return m;
  };

  s.Get("/health",
        [](const httplib::Request&, httplib::Response& res) { res.set_content("", "text/plain"); });

  s.Get("/health_generate", [this](const httplib::Request&, httplib::Response& res) {
    GenerationSpec g;
    g.input_ids = {0};
    g.sampling.max_new_tokens = 1;
    g.sampling.temperature = 0;
    auto started = Job::start(engine_, {g}, 1);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(res, *e);
    auto job = std::move(std::get<std::unique_ptr<Job>>(started));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!job->all_done() && std::chrono::steady_clock::now() < deadline) {
      job->poll(kPoll, [](size_t, const std::string&, const engine::StreamEvent&) {});
    }
    if (!job->all_done())
      return send_error(res, {503, "generation timed out", "service_unavailable", "", ""});
    res.set_content("", "text/plain");
  });

  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"object", "list"},
                    {"data",
                     {{{"id", model_name_},
                       {"object", "model"},
                       {"created", 0},
                       {"owned_by", "kvserve"},
                       {"root", engine_.options().model_path.string()},
                       {"max_model_len", engine_.context_len()}}}}});
  });

  auto server_info = [this](const httplib::Request&, httplib::Response& res) {
    const engine::EngineStatus st = engine_.status();
    const engine::EngineOptions& o = engine_.options();
    send_json(res,
              {{"version", kVersion},
               {"model_path", o.model_path.string()},
               {"served_model_name", model_name_},
               {"device", o.runner.device.to_string()},
               {"context_length", engine_.context_len()},
               {"max_total_num_tokens", engine_.max_total_tokens()},
               {"max_running_requests", engine_.max_running_requests()},
               {"page_size", o.runner.page_size},
               {"chunked_prefill_size", o.scheduler.chunked_prefill_size},
               {"max_prefill_tokens", o.scheduler.max_prefill_tokens},
               {"schedule_policy", o.schedule_policy},
               {"disable_radix_cache", o.disable_radix_cache},
               {"num_running_reqs", st.scheduler.running},
               {"num_waiting_reqs", st.scheduler.waiting},
               {"available_tokens", st.scheduler.available_tokens},
               {"evictable_tokens", st.scheduler.evictable_tokens},
               {"used_tokens", st.scheduler.used_tokens},
               {"new_token_ratio", st.scheduler.new_token_ratio},
               {"num_retractions", st.scheduler.retractions},
               {"cache_hit_rate", st.metrics.cache_hit_rate()},
               {"invariant_checks", st.invariant_checks},
               {"invariant_violations", st.invariant_violations},
               {"last_invariant_violation", st.last_violation},
               {"disaggregation", disagg_stats_json(st.disagg)},
               {"engine_time",
                {{"prefill_batches", st.scheduler.prefill_batches},
                 {"decode_steps", st.scheduler.decode_steps},
                 {"failed_batches", st.scheduler.failed_batches},
                 {"step_seconds", st.scheduler.step_seconds},
                 {"forward_seconds", st.scheduler.forward_seconds},
                 {"sample_seconds", st.scheduler.sample_seconds},
                 {"decode_step_seconds", st.scheduler.decode_step_seconds},
                 {"decode_forward_seconds", st.scheduler.decode_forward_seconds},
                 {"decode_sample_seconds", st.scheduler.decode_sample_seconds},
                 {"step_cpu_seconds", st.scheduler.step_cpu_seconds},
                 {"forward_cpu_seconds", st.scheduler.forward_cpu_seconds},
                 {"decode_scheduler_cpu_seconds", st.scheduler.decode_scheduler_cpu_seconds}}}});
  };
  s.Get("/get_server_info", server_info);
  // Disaggregation: this server's role and KV layout; a prefill server's control-plane port (the
  // router reads it to fill bootstrap_port, and checks the pairs' layouts at its startup).
  s.Get("/disaggregation/bootstrap", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, disagg_bootstrap_json(engine_));
  });
  // SGLang's /abort_request: ends a request by its rid (the router's way to stop the other half).
  s.Post("/abort_request", [this](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    const json& o = std::get<json>(body);
    const auto rid = o.find("rid");
    if (rid == o.end() || !rid->is_string()) {
      return send_error(res, {400, "'rid' must be a string", "invalid_request_error", "rid", ""});
    }
    engine_.abort(rid->get<std::string>());
    send_json(res, {{"rid", rid->get<std::string>()}});
  });
  s.Get("/server_info", server_info);

  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(engine_.prometheus_metrics(), "text/plain; version=0.0.4");
  });

  s.Post("/flush_cache", [this](const httplib::Request&, httplib::Response& res) {
    const Status st = engine_.flush_cache();
    if (!st.is_ok()) return send_error(res, {400, st.message(), "invalid_request_error", "", ""});
    send_json(res, {{"message", "Cache flushed."}});
  });

  s.Post("/generate", [this, limits](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto parsed = parse_generate(std::get<json>(body), limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto r = std::get<NativeGenerateRequest>(std::move(parsed));
    auto started = start_job(r.items, 1, r.rids);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(res, *e);
    std::shared_ptr<Job> job = std::move(std::get<std::shared_ptr<Job>>(started));
    if (r.stream) {
      stream_job(
          res, job,
          [job](size_t i, const std::string&, const engine::StreamEvent& e) {
            if (e.finished && e.finish.kind == engine::FinishKind::kError) {
              return sse_error(engine_error(e.finish));
            }
            return native_stream_event(*job, job->choices()[i], i);
          },
          [] { return std::string(kSseDone); });
    } else {
      const bool batched = r.batched;
      respond_when_done(res, job, [job, batched] {
        if (!batched) return native_item(*job, job->choices()[0], true);
        ordered_json all = ordered_json::array();
        for (const Choice& c : job->choices())
          all.push_back(native_item(*job, c, true));
        return all;
      });
    }
  });

  s.Post("/v1/completions", [this, limits](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto parsed = parse_completion(std::get<json>(body), limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto r = std::make_shared<CompletionRequest>(std::get<CompletionRequest>(std::move(parsed)));
    auto started = start_job(r->prompts, r->n);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(res, *e);
    std::shared_ptr<Job> job = std::move(std::get<std::shared_ptr<Job>>(started));
    const std::string id = new_id("cmpl");
    const std::string model = r->model.empty() ? model_name_ : r->model;
    const tokenizer::Tokenizer* tok = engine_.tokenizer();
    if (!r->stream) {
      return respond_when_done(res, job, [job, r, id, model, tok] {
        return completion_response(*job, *r, id, model, tok);
      });
    }
    auto echoed = std::make_shared<std::vector<bool>>(job->choices().size());
    stream_job(
        res, job,
        [job, r, id, model, echoed](size_t i, const std::string& delta,
                                    const engine::StreamEvent& e) {
          std::string text = delta;
          if (r->echo && !(*echoed)[i]) {
            (*echoed)[i] = true;
            text = job->specs()[job->choices()[i].spec].prompt_text + text;
          }
          if (e.finished && e.finish.kind == engine::FinishKind::kError) {
            return sse_error(engine_error(e.finish));
          }
          const char* fr = e.finished ? e.finish.openai_name() : nullptr;
          if (text.empty() && !fr) return std::string();
          return sse(completion_chunk(id, model, job->created_unix(), i, text, fr));
        },
        [job, r, id, model] {
          return openai_stream_end(*job, r->include_usage, id, model, "text_completion");
        });
  });

  s.Post("/v1/chat/completions", [this, limits_with_template](const httplib::Request& req,
                                                              httplib::Response& res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(res, *e);
    auto parsed = parse_chat_completion(std::get<json>(body), limits_with_template());
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(res, *e);
    auto r =
        std::make_shared<ChatCompletionRequest>(std::get<ChatCompletionRequest>(std::move(parsed)));
    auto started = start_job({r->spec}, r->n);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(res, *e);
    std::shared_ptr<Job> job = std::move(std::get<std::shared_ptr<Job>>(started));
    const std::string id = new_id("chatcmpl");
    const std::string model = r->model.empty() ? model_name_ : r->model;
    const tokenizer::Tokenizer* tok = engine_.tokenizer();
    if (!r->stream) {
      return respond_when_done(
          res, job, [job, r, id, model, tok] { return chat_response(*job, *r, id, model, tok); });
    }
    auto started_choice = std::make_shared<std::vector<bool>>(job->choices().size());
    auto logprob_from = std::make_shared<std::vector<size_t>>(job->choices().size());
    stream_job(
        res, job,
        [job, r, id, model, tok, started_choice, logprob_from](size_t i, const std::string& delta,
                                                               const engine::StreamEvent& e) {
          std::string out;
          if (!(*started_choice)[i]) {
            (*started_choice)[i] = true;
            out += sse(chat_chunk(id, model, job->created_unix(), i,
                                  {{"role", "assistant"}, {"content", ""}}, nullptr));
          }
          ordered_json lp = nullptr;
          if (r->logprobs) {
            const OutputCollector& o = *job->choices()[i].output;
            lp = chat_logprobs(tok, o.output_ids(), o.logprobs(), o.top_logprobs(),
                               (*logprob_from)[i]);
            (*logprob_from)[i] = o.logprobs().size();
          }
          if (!delta.empty() || r->logprobs) {
            out += sse(
                chat_chunk(id, model, job->created_unix(), i, {{"content", delta}}, nullptr, lp));
          }
          if (e.finished && e.finish.kind == engine::FinishKind::kError) {
            out += sse_error(engine_error(e.finish));
          } else if (e.finished) {
            out += sse(chat_chunk(id, model, job->created_unix(), i, ordered_json::object(),
                                  e.finish.openai_name()));
          }
          return out;
        },
        [job, r, id, model] {
          return openai_stream_end(*job, r->include_usage, id, model, "chat.completion.chunk");
        });
  });
}

}  // namespace kvserve::server

#include "kvserve/server/http_server.h"

#include <fmt/format.h>

#include <thread>

#include "kvserve/core/logging.h"
#include "kvserve/core/version.h"
#include "kvserve/server/async_http_server.h"
#include "kvserve/server/disagg_info.h"
#include "kvserve/server/http_router.h"
#include "kvserve/server/job_responder.h"
#include "kvserve/server/responses.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;
using std::chrono::milliseconds;
using Where = HttpRouter::Where;
using Ex = std::shared_ptr<Exchange>;

constexpr auto kPoll = milliseconds(50);  // /health_generate's wait (on a worker thread)

AsyncServerOptions async_options(const ServerOptions& o) {
  AsyncServerOptions a;
  a.host = o.host;
  a.port = o.port;
  a.limits.framing.max_body_bytes = o.max_body_bytes;
  a.limits.framing.max_head_bytes = o.max_head_bytes;
  a.limits.max_connections = o.max_connections;
  a.limits.header_timeout = std::chrono::seconds(o.header_timeout_s);
  a.limits.keep_alive_timeout = std::chrono::seconds(o.keep_alive_timeout_s);
  a.limits.read_timeout = std::chrono::seconds(o.read_timeout_s);
  a.limits.write_timeout = std::chrono::seconds(o.write_timeout_s);
  a.io_threads = o.io_threads;
  a.worker_threads = o.worker_threads;
  return a;
}

HttpResponse json_response(const ordered_json& j) {
  return {
      200, "application/json", j.dump(-1, ' ', false, ordered_json::error_handler_t::replace), {}};
}

}  // namespace

HttpServer::HttpServer(engine::Engine& engine, ServerOptions options)
    : engine_(engine),
      options_(std::move(options)),
      admission_(engine_, options_.max_queued_requests) {
  model_name_ =
      options_.served_model_name.empty() ? engine_.model_name() : options_.served_model_name;
  http_ = std::make_unique<AsyncHttpServer>(async_options(options_),
                                            [this](HttpRequest& req, std::shared_ptr<Exchange> ex) {
                                              router_->dispatch(req, std::move(ex));
                                            });
  router_ = std::make_unique<HttpRouter>(
      options_.api_key, [this](std::function<void()> fn) { http_->offload(std::move(fn)); });
  install_routes();
}

HttpServer::~HttpServer() {
  stop();
  http_.reset();  // joins the workers and closes every connection while the routes still exist
}

Status HttpServer::bind() {
  KV_ASSIGN_OR_RETURN(bound_port_, http_->bind());
  return Status::ok();
}

void HttpServer::run() {
  http_->run();
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
  HttpRouter& s = *router_;

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

  s.add("GET", "/health", Where::kIoThread, [](const HttpRequest&, Ex res) {
    res->respond({200, "text/plain", "", {}});
  });

  s.add("GET", "/health_generate", Where::kWorker, [this](const HttpRequest&, Ex res) {
    GenerationSpec g;
    g.input_ids = {0};
    g.sampling.max_new_tokens = 1;
    g.sampling.temperature = 0;
    auto started = Job::start(engine_, {g}, 1);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(*res, *e);
    auto job = std::move(std::get<std::unique_ptr<Job>>(started));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (!job->all_done() && std::chrono::steady_clock::now() < deadline) {
      job->poll(kPoll, [](size_t, const std::string&, const engine::StreamEvent&) {});
    }
    if (!job->all_done())
      return send_error(*res, {503, "generation timed out", "service_unavailable", "", ""});
    res->respond({200, "text/plain", "", {}});
  });

  s.add("GET", "/v1/models", Where::kIoThread, [this](const HttpRequest&, Ex res) {
    send_json(*res, {{"object", "list"},
                     {"data",
                      {{{"id", model_name_},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "kvserve"},
                        {"root", engine_.options().model_path.string()},
                        {"max_model_len", engine_.context_len()}}}}});
  });

  auto server_info = [this](const HttpRequest&, Ex res) {
    const engine::EngineStatus st = engine_.status();
    const engine::EngineOptions& o = engine_.options();
    send_json(*res,
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
  s.add("GET", "/get_server_info", Where::kIoThread, server_info);
  // Disaggregation: this server's role and KV layout; a prefill server's control-plane port (the
  // router reads it to fill bootstrap_port, and checks the pairs' layouts at its startup).
  s.add("GET", "/disaggregation/bootstrap", Where::kIoThread,
        [this](const HttpRequest&, Ex res) { send_json(*res, disagg_bootstrap_json(engine_)); });
  // SGLang's /abort_request: ends a request by its rid (the router's way to stop the other half).
  s.add("POST", "/abort_request", Where::kWorker, [this](const HttpRequest& req, Ex res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(*res, *e);
    const json& o = std::get<json>(body);
    const auto rid = o.find("rid");
    if (rid == o.end() || !rid->is_string()) {
      return send_error(*res, {400, "'rid' must be a string", "invalid_request_error", "rid", ""});
    }
    engine_.abort(rid->get<std::string>());
    send_json(*res, {{"rid", rid->get<std::string>()}});
  });
  s.add("GET", "/server_info", Where::kIoThread, server_info);

  s.add("GET", "/metrics", Where::kIoThread, [this](const HttpRequest&, Ex res) {
    res->respond({200, "text/plain; version=0.0.4", engine_.prometheus_metrics(), {}});
  });

  s.add("POST", "/flush_cache", Where::kWorker, [this](const HttpRequest&, Ex res) {
    const Status st = engine_.flush_cache();
    if (!st.is_ok()) return send_error(*res, {400, st.message(), "invalid_request_error", "", ""});
    send_json(*res, {{"message", "Cache flushed."}});
  });

  s.add("POST", "/generate", Where::kWorker, [this, limits](const HttpRequest& req, Ex res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(*res, *e);
    auto parsed = parse_generate(std::get<json>(body), limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(*res, *e);
    auto r = std::get<NativeGenerateRequest>(std::move(parsed));
    auto started = start_job(r.items, 1, r.rids);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(*res, *e);
    std::shared_ptr<Job> job = std::move(std::get<std::shared_ptr<Job>>(started));
    if (r.stream) {
      JobResponder::stream(
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
      JobResponder::whole(res, job, [job, batched] {
        if (!batched) return json_response(native_item(*job, job->choices()[0], true));
        ordered_json all = ordered_json::array();
        for (const Choice& c : job->choices())
          all.push_back(native_item(*job, c, true));
        return json_response(all);
      });
    }
  });

  s.add("POST", "/v1/completions", Where::kWorker, [this, limits](const HttpRequest& req, Ex res) {
    auto body = parse_json_body(req.body);
    if (auto* e = std::get_if<ApiError>(&body)) return send_error(*res, *e);
    auto parsed = parse_completion(std::get<json>(body), limits);
    if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(*res, *e);
    auto r = std::make_shared<CompletionRequest>(std::get<CompletionRequest>(std::move(parsed)));
    auto started = start_job(r->prompts, r->n);
    if (auto* e = std::get_if<ApiError>(&started)) return send_error(*res, *e);
    std::shared_ptr<Job> job = std::move(std::get<std::shared_ptr<Job>>(started));
    const std::string id = new_id("cmpl");
    const std::string model = r->model.empty() ? model_name_ : r->model;
    const tokenizer::Tokenizer* tok = engine_.tokenizer();
    if (!r->stream) {
      return JobResponder::whole(res, job, [job, r, id, model, tok] {
        return json_response(completion_response(*job, *r, id, model, tok));
      });
    }
    auto echoed = std::make_shared<std::vector<bool>>(job->choices().size());
    JobResponder::stream(
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

  s.add("POST", "/v1/chat/completions", Where::kWorker,
        [this, limits_with_template](const HttpRequest& req, Ex res) {
          auto body = parse_json_body(req.body);
          if (auto* e = std::get_if<ApiError>(&body)) return send_error(*res, *e);
          auto parsed = parse_chat_completion(std::get<json>(body), limits_with_template());
          if (auto* e = std::get_if<ApiError>(&parsed)) return send_error(*res, *e);
          auto r = std::make_shared<ChatCompletionRequest>(
              std::get<ChatCompletionRequest>(std::move(parsed)));
          auto started = start_job({r->spec}, r->n);
          if (auto* e = std::get_if<ApiError>(&started)) return send_error(*res, *e);
          std::shared_ptr<Job> job = std::move(std::get<std::shared_ptr<Job>>(started));
          const std::string id = new_id("chatcmpl");
          const std::string model = r->model.empty() ? model_name_ : r->model;
          const tokenizer::Tokenizer* tok = engine_.tokenizer();
          if (!r->stream) {
            return JobResponder::whole(res, job, [job, r, id, model, tok] {
              return json_response(chat_response(*job, *r, id, model, tok));
            });
          }
          auto started_choice = std::make_shared<std::vector<bool>>(job->choices().size());
          auto logprob_from = std::make_shared<std::vector<size_t>>(job->choices().size());
          JobResponder::stream(
              res, job,
              [job, r, id, model, tok, started_choice, logprob_from](
                  size_t i, const std::string& delta, const engine::StreamEvent& e) {
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
                  out += sse(chat_chunk(id, model, job->created_unix(), i, {{"content", delta}},
                                        nullptr, lp));
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
                return openai_stream_end(*job, r->include_usage, id, model,
                                         "chat.completion.chunk");
              });
        });
}

}  // namespace kvserve::server

#include "kvserve/bench/client.h"

#include <httplib.h>

#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>

namespace kvserve::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxErrorBody = 2000;  // bytes of an error response kept for the message

// A counting semaphore whose waiters are the dispatcher alone (so the order is FIFO).
class Slots {
 public:
  explicit Slots(int32_t n) : free_(n) {}
  void acquire() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return free_ > 0; });
    --free_;
  }
  void release() {
    {
      std::lock_guard lock(mu_);
      ++free_;
    }
    cv_.notify_one();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int32_t free_;
};

std::string chunk_error(const json& chunk) {
  if (!chunk.is_object()) return {};
  if (auto it = chunk.find("error"); it != chunk.end() && !it->is_null()) {
    if (it->is_object() && it->contains("message") && (*it)["message"].is_string()) {
      return (*it)["message"].get<std::string>();
    }
    return it->dump();
  }
  if (chunk.value("object", std::string()) == "error") {
    return chunk.value("message", chunk.dump());
  }
  return {};
}

// completion_tokens of a chunk's meta_info (sglang) or usage (openai), if it has one.
std::optional<int32_t> completion_tokens(const json& chunk, const char* object) {
  auto it = chunk.find(object);
  if (it == chunk.end() || !it->is_object()) return std::nullopt;
  auto n = it->find("completion_tokens");
  if (n == it->end() || !n->is_number_integer()) return std::nullopt;
  return n->get<int32_t>();
}

std::string choice_text(const json& chunk) {
  auto choices = chunk.find("choices");
  if (choices == chunk.end() || !choices->is_array() || choices->empty()) return {};
  const json& c = (*choices)[0];
  if (!c.is_object()) return {};
  auto text = c.find("text");
  return text != c.end() && text->is_string() ? text->get<std::string>() : std::string();
}

void configure(httplib::Client& cli, double timeout_s) {
  const auto t = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(timeout_s));
  cli.set_read_timeout(t);
  cli.set_write_timeout(t);
  cli.set_connection_timeout(std::chrono::seconds(30));
  cli.set_keep_alive(false);
  cli.set_tcp_nodelay(true);  // the request's header and body writes go out at once
  if (const char* key = std::getenv("OPENAI_API_KEY"); key != nullptr && *key != '\0') {
    cli.set_bearer_token_auth(key);
  }
}

std::string describe(httplib::Error e) {
  return httplib::to_string(e);
}

}  // namespace

Result<Backend> parse_backend(std::string_view name) {
  if (name == "sglang") return Backend::kSglang;
  if (name == "openai") return Backend::kOpenAI;
  return invalid_argument("--backend: '{}' is not one of sglang, openai", name);
}

std::string_view backend_name(Backend backend) {
  return backend == Backend::kSglang ? "sglang" : "openai";
}

std::string_view request_path(Backend backend) {
  return backend == Backend::kSglang ? "/generate" : "/v1/completions";
}

Result<Endpoint> parse_base_url(std::string_view url) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string_view::npos) {
    return invalid_argument("--base-url: '{}' is not a URL like http://127.0.0.1:30000", url);
  }
  const std::string_view scheme = url.substr(0, scheme_end);
  if (scheme != "http" && scheme != "https") {
    return invalid_argument("--base-url: '{}': the scheme must be http or https", url);
  }
  const size_t host_start = scheme_end + 3;
  const size_t path_start = url.find('/', host_start);
  Endpoint e;
  e.scheme_host_port = std::string(url.substr(0, path_start));
  if (e.scheme_host_port.size() == host_start) {
    return invalid_argument("--base-url: '{}' has no host", url);
  }
  if (path_start != std::string_view::npos) {
    std::string_view prefix = url.substr(path_start);
    while (!prefix.empty() && prefix.back() == '/')
      prefix.remove_suffix(1);
    e.path_prefix = std::string(prefix);
  }
  return e;
}

json request_body(const ClientOptions& o, const DatasetRow& row, int32_t output_len) {
  if (o.backend == Backend::kSglang) {
    json body;
    if (row.input_ids.empty()) {
      body["text"] = row.prompt;
    } else {
      body["input_ids"] = row.input_ids;
    }
    body["sampling_params"] = {
        {"max_new_tokens", output_len}, {"temperature", 0.0}, {"ignore_eos", o.ignore_eos}};
    body["stream"] = o.stream;
    return body;
  }
  json body = {{"model", o.model},   {"prompt", row.prompt}, {"max_tokens", output_len},
               {"temperature", 0.0}, {"stream", o.stream},   {"ignore_eos", o.ignore_eos}};
  if (!row.input_ids.empty()) body["prompt"] = row.input_ids;
  if (o.stream) body["stream_options"] = {{"include_usage", true}};
  return body;
}

ResponseReader::ResponseReader(Backend backend, bool stream, int32_t requested_output_len,
                               RequestOutput& out)
    : backend_(backend), stream_(stream), out_(out) {
  out_.output_len = requested_output_len;
}

void ResponseReader::fail(std::string error) {
  if (failed_) return;
  failed_ = true;
  out_.success = false;
  out_.error = std::move(error);
}

void ResponseReader::on_bytes(std::string_view bytes, double now) {
  if (failed_) return;
  if (!stream_) {
    body_.append(bytes);
    return;
  }
  for (const std::string& event : sse_.feed(bytes)) {
    on_event(event, now);
  }
}

void ResponseReader::on_event(const std::string& data, double now) {
  if (failed_ || done_) return;
  ++events_;
  out_.latency = now - out_.start_time;
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  json chunk = json::parse(data, nullptr, /*allow_exceptions=*/false);
  if (chunk.is_discarded() || !chunk.is_object()) {
    fail(fmt::format("malformed stream chunk (not a JSON object): {}", data.substr(0, 200)));
    return;
  }
  if (std::string err = chunk_error(chunk); !err.empty()) {
    fail("server error in the stream: " + err);
    return;
  }
  if (backend_ == Backend::kSglang) {
    on_sglang_chunk(chunk, now);
  } else {
    on_openai_chunk(chunk, now);
  }
}

void ResponseReader::on_sglang_chunk(const json& chunk, double now) {
  const std::optional<int32_t> completion = completion_tokens(chunk, "meta_info");
  auto text = chunk.find("text");
  const bool has_text =
      text != chunk.end() && text->is_string() && !text->get_ref<const std::string&>().empty();
  if (!first_text_seen_ && out_.first_token_chunk < 0 && completion.value_or(1) > 0) {
    out_.first_token_chunk = now - out_.start_time;
  }
  if (completion.has_value() && *completion > last_token_count_) {
    if (last_token_count_ > 0) {
      const int32_t new_tokens = *completion - last_token_count_;
      out_.token_itl.insert(out_.token_itl.end(), static_cast<size_t>(new_tokens),
                            (now - last_token_time_) / new_tokens);
    }
    last_token_time_ = now;
    last_token_count_ = *completion;
  }
  if (!has_text) {
    if (completion.has_value()) {
      out_.output_len = *completion;
      if (!first_text_seen_) out_.tokens_before_text = *completion;
    }
    return;
  }
  out_.generated_text = text->get<std::string>();  // cumulative
  // Without meta_info a chunk counts as one token.
  const int32_t output_len = completion.value_or(last_output_len_ + 1);
  out_.output_len = output_len;
  if (!first_text_seen_) {
    first_text_seen_ = true;
    out_.ttft = now - out_.start_time;
  } else {
    const int32_t new_tokens = output_len - last_output_len_;
    if (new_tokens <= 0) return;  // SGLang: skip, and keep timing from the earlier chunk
    const double gap = (now - last_text_time_) / new_tokens;
    out_.itl.insert(out_.itl.end(), static_cast<size_t>(new_tokens), gap);
  }
  last_text_time_ = now;
  last_output_len_ = output_len;
}

void ResponseReader::on_openai_chunk(const json& chunk, double now) {
  if (const auto n = completion_tokens(chunk, "usage"); n.has_value()) out_.output_len = *n;
  const std::string text = choice_text(chunk);
  if (text.empty()) return;
  if (!first_text_seen_) {
    first_text_seen_ = true;
    out_.ttft = now - out_.start_time;
  } else {
    out_.itl.push_back(now - last_text_time_);
  }
  last_text_time_ = now;
  out_.generated_text += text;
}

void ResponseReader::finish(double now) {
  if (failed_) return;
  if (!stream_) {
    out_.latency = now - out_.start_time;
    out_.ttft = out_.latency;
    json body = json::parse(body_, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded() || !body.is_object()) {
      fail(fmt::format("malformed response (not a JSON object): {}", body_.substr(0, 200)));
      return;
    }
    if (std::string err = chunk_error(body); !err.empty()) {
      fail("server error: " + err);
      return;
    }
    if (backend_ == Backend::kSglang) {
      if (auto t = body.find("text"); t != body.end() && t->is_string()) {
        out_.generated_text = t->get<std::string>();
      }
      if (auto n = completion_tokens(body, "meta_info"); n.has_value()) out_.output_len = *n;
    } else {
      out_.generated_text = choice_text(body);
      if (auto n = completion_tokens(body, "usage"); n.has_value()) out_.output_len = *n;
    }
    out_.success = true;
    return;
  }
  for (const std::string& event : sse_.finish()) {
    on_event(event, now);
  }
  if (failed_) return;
  if (events_ == 0) {
    fail(sse_.ignored_lines() > 0
             ? "the response is not a server-sent event stream (no 'data:' lines)"
             : "the response stream ended without any event");
    return;
  }
  if (!first_text_seen_) out_.ttft = out_.latency;
  out_.success = true;
}

double seconds_since(Clock::time_point origin) {
  return std::chrono::duration<double>(Clock::now() - origin).count();
}

RequestOutput send_request(const ClientOptions& o, const DatasetRow& row, int32_t output_len,
                           Clock::time_point origin) {
  RequestOutput out;
  out.prompt_len = row.prompt_len;
  out.output_len = output_len;
  try {
    const Result<Endpoint> endpoint = parse_base_url(o.base_url);
    if (!endpoint.is_ok()) {
      out.error = endpoint.status().message();
      return out;
    }
    httplib::Client cli(endpoint->scheme_host_port);
    configure(cli, o.timeout_s);
    httplib::Request req;
    req.method = "POST";
    req.path = endpoint->path_prefix + std::string(request_path(o.backend));
    req.body = request_body(o, row, output_len).dump();
    req.set_header("Content-Type", "application/json");
    req.set_header("Accept", o.stream ? "text/event-stream" : "application/json");

    ResponseReader reader(o.backend, o.stream, output_len, out);
    int status = 0;
    std::string error_body;
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      if (status != 200) {
        error_body.append(data,
                          std::min(n, kMaxErrorBody - std::min(kMaxErrorBody, error_body.size())));
        return true;
      }
      reader.on_bytes(std::string_view(data, n), seconds_since(origin));
      return true;
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    out.start_time = seconds_since(origin);
    const bool sent = cli.send(req, res, err);
    const double end = seconds_since(origin);
    if (!sent) {
      out.success = false;
      out.error = fmt::format("POST {}{}: {}", o.base_url, req.path, describe(err));
      return out;
    }
    if (res.status != 200) {
      if (error_body.empty()) error_body = res.body.substr(0, kMaxErrorBody);
      out.success = false;
      out.error = fmt::format("POST {}{}: HTTP {}{}{}", o.base_url, req.path, res.status,
                              error_body.empty() ? "" : ": ", error_body);
      return out;
    }
    reader.finish(end);
  } catch (const std::exception& e) {
    out.success = false;
    out.error = fmt::format("request failed: {}", e.what());
  }
  return out;
}

std::vector<RequestOutput> run_requests(const ClientOptions& o, std::span<const DatasetRow> rows,
                                        std::span<const double> arrival_times,
                                        int32_t max_concurrency, Clock::time_point origin) {
  KV_CHECK_EQ(rows.size(), arrival_times.size());
  std::vector<RequestOutput> outputs(rows.size());
  Slots slots(std::max(max_concurrency, 1));
  std::vector<std::thread> threads;
  threads.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    std::this_thread::sleep_until(origin + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(arrival_times[i])));
    if (max_concurrency > 0) slots.acquire();
    try {
      threads.emplace_back([&, i] {
        outputs[i] = send_request(o, rows[i], rows[i].output_len, origin);
        if (max_concurrency > 0) slots.release();
      });
    } catch (const std::system_error& e) {
      outputs[i].prompt_len = rows[i].prompt_len;
      outputs[i].error = fmt::format("cannot start a request thread: {}", e.what());
      if (max_concurrency > 0) slots.release();
    }
  }
  for (std::thread& t : threads)
    t.join();
  return outputs;
}

Result<json> get_json(const std::string& base_url, const std::string& path, double timeout_s) {
  KV_ASSIGN_OR_RETURN(const Endpoint endpoint, parse_base_url(base_url));
  httplib::Client cli(endpoint.scheme_host_port);
  configure(cli, timeout_s);
  const httplib::Result res = cli.Get(endpoint.path_prefix + path);
  if (!res) {
    return unavailable("GET {}{}: {}", base_url, path, describe(res.error()));
  }
  if (res->status != 200) {
    return unavailable("GET {}{}: HTTP {}", base_url, path, res->status);
  }
  json body = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return unavailable("GET {}{}: the answer is not JSON", base_url, path);
  return body;
}

Status post_empty(const std::string& base_url, const std::string& path, double timeout_s) {
  KV_ASSIGN_OR_RETURN(const Endpoint endpoint, parse_base_url(base_url));
  httplib::Client cli(endpoint.scheme_host_port);
  configure(cli, timeout_s);
  const httplib::Result res = cli.Post(endpoint.path_prefix + path);
  if (!res) return unavailable("POST {}{}: {}", base_url, path, describe(res.error()));
  if (res->status != 200) return unavailable("POST {}{}: HTTP {}", base_url, path, res->status);
  return Status::ok();
}

}  // namespace kvserve::bench

// bench-serving's HTTP side: request bodies, reading streamed responses into RequestOutputs
// (SGLang's async_request_sglang_generate / async_request_openai_completions), and sending the
// requests of a benchmark on their arrival schedule with a concurrency limit.
//
// One thread per request in flight (at most --max-concurrency of them when it is set), each with
// its own connection. Times are seconds on std::chrono::steady_clock since the benchmark's start.
#pragma once

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/bench/dataset.h"
#include "kvserve/bench/metrics.h"
#include "kvserve/bench/sse.h"
#include "kvserve/core/status.h"

namespace kvserve::bench {

enum class Backend {
  kSglang,  // POST /generate
  kOpenAI,  // POST /v1/completions
};
Result<Backend> parse_backend(std::string_view name);  // "sglang" or "openai"
std::string_view backend_name(Backend backend);

// "http://host:port[/prefix]" split for the HTTP client; kInvalidArgument for anything else.
struct Endpoint {
  std::string scheme_host_port;  // "http://127.0.0.1:30000"
  std::string path_prefix;       // "" or "/prefix" (no trailing slash)
};
Result<Endpoint> parse_base_url(std::string_view base_url);

struct ClientOptions {
  std::string base_url = "http://127.0.0.1:30000";
  Backend backend = Backend::kSglang;
  std::string model;  // the OpenAI "model" field
  bool stream = true;
  bool ignore_eos = true;
  double timeout_s = 6 * 3600.0;  // per read, as SGLang's 6-hour aiohttp session
};

// The JSON body of one request (temperature 0; ignore_eos unless --disable-ignore-eos).
//   sglang: {"text" | "input_ids", "sampling_params": {"max_new_tokens", "temperature",
//           "ignore_eos"}, "stream"}
//   openai: {"model", "prompt", "max_tokens", "temperature", "stream", "ignore_eos"
//           [, "stream_options": {"include_usage": true}]}
nlohmann::json request_body(const ClientOptions& options, const DatasetRow& row,
                            int32_t output_len);
// "/generate" or "/v1/completions".
std::string_view request_path(Backend backend);

// Turns one response body, as it arrives, into a RequestOutput.
//   Streaming: server-sent events; `[DONE]` ends the stream. TTFT is the time of the first chunk
//   with text. sglang chunks carry the cumulative text and completion_tokens: each later chunk
//   adds (its time - the previous text chunk's time) / new tokens once per new token to the ITL
//   (a chunk without new tokens is skipped); openai chunks carry text deltas and add one ITL per
//   chunk. output_len is the last completion_tokens seen (meta_info or usage), else the
//   requested length. The latency is the time of the last event.
//   Not streaming: one JSON body; TTFT = latency, no ITL.
// A chunk that is not JSON or that carries an "error" fails the request.
class ResponseReader {
 public:
  ResponseReader(Backend backend, bool stream, int32_t requested_output_len, RequestOutput& out);

  void on_bytes(std::string_view bytes, double now);
  // The body ended at `now`: success unless something failed. A stream without any text chunk
  // gets TTFT = latency.
  void finish(double now);

 private:
  void on_event(const std::string& data, double now);
  void on_sglang_chunk(const nlohmann::json& chunk, double now);
  void on_openai_chunk(const nlohmann::json& chunk, double now);
  void fail(std::string error);

  Backend backend_;
  bool stream_;
  RequestOutput& out_;
  SseParser sse_;
  std::string body_;  // non-streaming: the whole body
  bool failed_ = false;
  bool done_ = false;  // [DONE] seen
  int64_t events_ = 0;
  bool first_text_seen_ = false;
  double last_text_time_ = 0;
  int32_t last_output_len_ = 0;
  double last_token_time_ = 0;  // the last chunk that brought tokens, text or not
  int32_t last_token_count_ = 0;
};

// Seconds since `origin` on the steady clock.
double seconds_since(std::chrono::steady_clock::time_point origin);

// Sends one request and reads its response; never throws. `origin` is the benchmark's zero.
RequestOutput send_request(const ClientOptions& options, const DatasetRow& row, int32_t output_len,
                           std::chrono::steady_clock::time_point origin);

// Sends rows[i] at arrival_times[i] seconds after `origin` (later when max_concurrency > 0
// requests are already in flight: they wait in order for a free slot) and returns the outputs
// in the order of `rows`.
std::vector<RequestOutput> run_requests(const ClientOptions& options,
                                        std::span<const DatasetRow> rows,
                                        std::span<const double> arrival_times,
                                        int32_t max_concurrency,
                                        std::chrono::steady_clock::time_point origin);

// GET <base_url><path> as JSON (server info, model list); kUnavailable when the server cannot
// be reached or answers with another status than 200.
Result<nlohmann::json> get_json(const std::string& base_url, const std::string& path,
                                double timeout_s = 30);
// POST <base_url><path> with an empty body; kUnavailable unless it answers 200.
Status post_empty(const std::string& base_url, const std::string& path, double timeout_s = 30);

}  // namespace kvserve::bench

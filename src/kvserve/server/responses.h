// Response bodies and stream chunks of the three generation APIs.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "kvserve/server/job.h"

namespace kvserve::server {

using ordered_json = nlohmann::ordered_json;

// "data: <json>\n\n"
std::string sse(const ordered_json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// SGLang's finish_reason object: {"type": "stop", "matched": ...} / {"type": "length", ...}.
ordered_json native_finish_reason(const OutputCollector& o);

// /generate
ordered_json native_item(const Job& job, const Choice& c, bool final);
// One streamed /generate event ("data: {...}\n\n"): native_item plus "index".
std::string native_stream_event(const Job& job, const Choice& c, size_t index);

// /v1/completions
ordered_json completion_response(const Job& job, const CompletionRequest& req,
                                 const std::string& id, const std::string& model,
                                 const tokenizer::Tokenizer* tok);
ordered_json completion_chunk(const std::string& id, const std::string& model, int64_t created,
                              size_t index, const std::string& text, const char* finish_reason);
// /v1/chat/completions
ordered_json chat_response(const Job& job, const ChatCompletionRequest& req, const std::string& id,
                           const std::string& model, const tokenizer::Tokenizer* tok);
ordered_json chat_chunk(const std::string& id, const std::string& model, int64_t created,
                        size_t index, const ordered_json& delta, const char* finish_reason,
                        const ordered_json& logprobs = nullptr);
ordered_json chat_logprobs(const tokenizer::Tokenizer* tok, const std::vector<int32_t>& ids,
                           const std::vector<float>& lps,
                           const std::vector<std::vector<std::pair<int32_t, float>>>& top,
                           size_t from);
// {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}
ordered_json usage(const Job& job);
// What ends an OpenAI stream: a chunk with the usage and no choices when asked for
// (stream_options.include_usage), then [DONE]. `object` is the chunks' object name.
std::string openai_stream_end(const Job& job, bool include_usage, const std::string& id,
                              const std::string& model, const char* object);

std::string new_id(const char* prefix);

// A request the engine failed (FinishKind::kError: e.g. its batch's forward could not grow a
// device buffer) as an OpenAI-style error (503 service_unavailable: the server goes on, a retry
// may succeed); null when no choice of `job` ended so.
std::optional<ApiError> job_error(const Job& job);
// The same for one finished stream event, and its SSE form ("data: {"error": {...}}\n\n").
ApiError engine_error(const engine::FinishReason& finish);
std::string sse_error(const ApiError& e);
// The raw bytes a token stands for (OpenAI's logprob "bytes"): its decoded text, or, when that
// is not UTF-8 on its own (a byte-level or byte-fallback token holding part of a character), the
// bytes of its vocabulary entry. Without a tokenizer: the id as text.
std::string token_bytes(const tokenizer::Tokenizer* tok, int32_t id);

}  // namespace kvserve::server

// Parsing and validating request bodies of the three generation APIs into engine submissions.
// Every problem is an ApiError naming the field (HTTP 400), never an exception.
//   /generate              SGLang's native API (text or input_ids, sampling_params, stream, ...)
//   /v1/completions        OpenAI completions (prompt: string | [string] | [int] | [[int]])
//   /v1/chat/completions   OpenAI chat (messages through the model's chat template)
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/engine/disagg_target.h"
#include "kvserve/engine/sampling_params.h"
#include "kvserve/server/errors.h"
#include "kvserve/tokenizer/chat_template.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::server {

// What the server needs to know about the model to validate a request.
struct ModelLimits {
  int32_t context_len = 0;  // max prompt + output tokens
  int32_t vocab_size = 0;
  const tokenizer::Tokenizer* tokenizer = nullptr;  // null: token ids only
  const tokenizer::ChatTemplate* chat_template = nullptr;
  // What a request leaves out: the model's generation_config.json values under SGLang's
  // --sampling-defaults model (the default), or the OpenAI API's under --sampling-defaults openai.
  engine::SamplingParams sampling_defaults;
};

// SGLang's --sampling-defaults model: temperature, top_p, top_k, min_p and repetition_penalty
// from generation_config.json where it sets them (do_sample is not consulted, as in SGLang).
engine::SamplingParams model_sampling_defaults(const checkpoint::GenerationConfig& g);

// One engine submission.
struct GenerationSpec {
  std::vector<int32_t> input_ids;
  std::string prompt_text;  // when the prompt was text (for echo)
  engine::SamplingParams sampling;
  std::vector<std::string> stop;
  int32_t logprob_start_len = -1;
  bool skip_special_tokens = true;
  // Disaggregated serving (docs/disaggregation.md): bootstrap_host, bootstrap_port and
  // bootstrap_room as SGLang's router sends them; one sequence per room.
  std::optional<engine::DisaggTarget> disagg;
};

struct NativeGenerateRequest {
  std::vector<GenerationSpec> items;
  bool batched = false;  // text/input_ids was a list: the response is a list
  bool stream = false;
  std::vector<std::string> rids;  // optional client-given ids, one per item
};

struct CompletionRequest {
  std::string model;
  std::vector<GenerationSpec> prompts;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;
  int32_t logprobs = -1;  // OpenAI completions: number of top logprobs (0..5), -1: none
};

struct ChatCompletionRequest {
  std::string model;
  GenerationSpec spec;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;
  int32_t top_logprobs = 0;
};

template <typename T>
using Parsed = std::variant<T, ApiError>;

// Request bodies nest at most this deep (arrays and objects); deeper is a 400 before parsing.
inline constexpr size_t kMaxJsonDepth = 64;
// The deepest nesting of arrays and objects in JSON text (strings skipped), counting stops once
// it passes `stop_above`. Used on bodies before parsing them; needs no valid JSON.
size_t json_nesting_depth(std::string_view text, size_t stop_above);

// Bounds the nesting depth (kMaxJsonDepth), then parses; a 400 unless a valid JSON object.
Parsed<nlohmann::json> parse_json_body(const std::string& body);
Parsed<NativeGenerateRequest> parse_generate(const nlohmann::json& body, const ModelLimits& m);
Parsed<CompletionRequest> parse_completion(const nlohmann::json& body, const ModelLimits& m);
Parsed<ChatCompletionRequest> parse_chat_completion(const nlohmann::json& body,
                                                    const ModelLimits& m);

}  // namespace kvserve::server

#include "kvserve/server/request_parsing.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <string_view>

#include "kvserve/tokenizer/utf8.h"

namespace kvserve::server {
namespace {

using json = nlohmann::json;

// Field readers: absent or null keeps the default; a wrong type or range is an ApiError.
using Error = std::optional<ApiError>;

#define KV_API_TRY(expr)                                 \
  do {                                                   \
    if (Error kv_api_err_ = (expr)) return *kv_api_err_; \
  } while (0)

Error read_bool(const json& o, const char* key, bool& out) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", key), key);
  out = it->get<bool>();
  return std::nullopt;
}

template <typename T>
Error read_int(const json& o, const char* key, int64_t lo, int64_t hi, T& out) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number_integer()) {
    return bad_request(fmt::format("'{}' must be an integer", key), key);
  }
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v), key);
  }
  out = static_cast<T>(v);
  return std::nullopt;
}

Error read_float(const json& o, const char* key, double lo, double hi, float& out) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) return bad_request(fmt::format("'{}' must be a number", key), key);
  const double v = it->get<double>();
  if (!(v >= lo && v <= hi)) {
    return bad_request(fmt::format("'{}' must be in [{}, {}], got {}", key, lo, hi, v), key);
  }
  out = static_cast<float>(v);
  return std::nullopt;
}

// bootstrap_room (a non-negative integer below 2^63) makes the request one half of a
// disaggregated pair; bootstrap_host / bootstrap_port say where its prefill server listens.
Error read_disagg(const json& o, std::optional<engine::DisaggTarget>& out) {
  const auto room = o.find("bootstrap_room");
  if (room == o.end() || room->is_null()) {
    for (const char* key : {"bootstrap_host", "bootstrap_port"}) {
      if (o.contains(key) && !o[key].is_null()) {
        return bad_request(fmt::format("'{}' needs 'bootstrap_room'", key), key);
      }
    }
    return std::nullopt;
  }
  const bool non_negative =
      room->is_number_unsigned() || (room->is_number_integer() && room->get<int64_t>() >= 0);
  if (!non_negative || room->get<uint64_t>() >= (uint64_t{1} << 63)) {
    return bad_request("'bootstrap_room' must be an integer in [0, 2^63)", "bootstrap_room");
  }
  engine::DisaggTarget t;
  t.room = room->get<uint64_t>();
  if (const auto it = o.find("bootstrap_host"); it != o.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'bootstrap_host' must be a string", "bootstrap_host");
    t.bootstrap_host = it->get<std::string>();
  }
  KV_API_TRY(read_int(o, "bootstrap_port", 1, 65535, t.bootstrap_port));
  out = t;
  return std::nullopt;
}

Error one_sequence_per_room(const std::optional<engine::DisaggTarget>& d, size_t sequences) {
  if (d && sequences != 1) {
    return bad_request("a 'bootstrap_room' carries one sequence: one prompt, n = 1",
                       "bootstrap_room");
  }
  return std::nullopt;
}

bool valid_utf8(const std::string& s) {
  return tokenizer::is_valid_utf8(s);
}

Error read_stop(const json& o, const char* key, std::vector<std::string>& out) {
  const auto it = o.find(key);
  if (it == o.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) {
    out = {it->get<std::string>()};
  } else if (it->is_array()) {
    for (const auto& s : *it) {
      if (!s.is_string()) return bad_request("'stop' must be a string or a list of strings", key);
      out.push_back(s.get<std::string>());
    }
  } else {
    return bad_request("'stop' must be a string or a list of strings", key);
  }
  for (const auto& s : out) {
    if (s.empty()) return bad_request("'stop' strings must not be empty", key);
    if (!valid_utf8(s)) return bad_request("'stop' is not valid UTF-8", key);
  }
  return std::nullopt;
}

Error read_token_ids(const json& v, const char* key, int32_t vocab, std::vector<int32_t>& out) {
  out.clear();
  for (const auto& t : v) {
    if (!t.is_number_integer())
      return bad_request(fmt::format("'{}' must hold token ids", key), key);
    const int64_t id = t.get<int64_t>();
    if (id < 0 || id >= vocab) {
      return bad_request(
          fmt::format("token id {} is outside the vocabulary (0..{})", id, vocab - 1), key);
    }
    out.push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

// The sampling fields shared by every API; `max_key` is max_tokens / max_new_tokens.
Error read_sampling(const json& o, const char* max_key, engine::SamplingParams& sp,
                    std::vector<std::string>& stop, bool& skip_special, int32_t vocab) {
  constexpr int64_t kMaxInt = std::numeric_limits<int32_t>::max();
  KV_API_TRY(read_int(o, max_key, 0, kMaxInt, sp.max_new_tokens));
  KV_API_TRY(read_float(o, "temperature", 0.0, 100.0, sp.temperature));
  KV_API_TRY(read_float(o, "top_p", 1e-9, 1.0, sp.top_p));
  KV_API_TRY(read_int(o, "top_k", -1, kMaxInt, sp.top_k));
  if (sp.top_k == 0) return bad_request("'top_k' must be -1 or positive", "top_k");
  KV_API_TRY(read_float(o, "min_p", 0.0, 1.0, sp.min_p));
  KV_API_TRY(read_float(o, "repetition_penalty", 1e-9, 2.0, sp.repetition_penalty));
  KV_API_TRY(read_float(o, "frequency_penalty", -2.0, 2.0, sp.frequency_penalty));
  KV_API_TRY(read_float(o, "presence_penalty", -2.0, 2.0, sp.presence_penalty));
  KV_API_TRY(read_int(o, "min_tokens", 0, kMaxInt, sp.min_new_tokens));
  KV_API_TRY(read_int(o, "min_new_tokens", 0, kMaxInt, sp.min_new_tokens));
  KV_API_TRY(read_bool(o, "ignore_eos", sp.ignore_eos));
  KV_API_TRY(read_bool(o, "skip_special_tokens", skip_special));
  for (const char* seed_key : {"seed", "sampling_seed"}) {
    const auto it = o.find(seed_key);
    if (it == o.end() || it->is_null()) continue;
    if (!it->is_number_integer())
      return bad_request(fmt::format("'{}' must be an integer", seed_key), seed_key);
    sp.seed = static_cast<uint64_t>(it->get<int64_t>());
  }
  KV_API_TRY(read_stop(o, "stop", stop));
  if (const auto it = o.find("stop_token_ids"); it != o.end() && !it->is_null()) {
    if (!it->is_array())
      return bad_request("'stop_token_ids' must be a list of token ids", "stop_token_ids");
    KV_API_TRY(read_token_ids(*it, "stop_token_ids", vocab, sp.stop_token_ids));
  }
  if (o.contains("logit_bias") && !o["logit_bias"].is_null() && !o["logit_bias"].empty()) {
    return ApiError{400, "'logit_bias' is not supported", "invalid_request_error", "logit_bias",
                    "unsupported"};
  }
  return std::nullopt;
}

Error check_fits(const GenerationSpec& g, const ModelLimits& m, bool max_given, const char* key) {
  const auto n = static_cast<int64_t>(g.input_ids.size());
  if (n == 0) return bad_request("the prompt is empty", "prompt");
  if (n >= m.context_len) {
    return bad_request(fmt::format("This model's maximum context length is {} tokens, but the "
                                   "prompt has {} tokens.",
                                   m.context_len, n),
                       "prompt");
  }
  if (max_given && n + g.sampling.max_new_tokens > m.context_len) {
    return bad_request(
        fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                    "tokens ({} in the prompt, {} for the completion).",
                    m.context_len, n + g.sampling.max_new_tokens, n, g.sampling.max_new_tokens),
        key);
  }
  return std::nullopt;
}

Error tokenize_text(const std::string& text, const ModelLimits& m, bool add_special,
                    GenerationSpec& g) {
  if (!valid_utf8(text)) return bad_request("the prompt is not valid UTF-8", "prompt");
  if (m.tokenizer == nullptr) {
    return bad_request("this model has no tokenizer: send token ids instead of text", "prompt");
  }
  g.prompt_text = text;
  g.input_ids = m.tokenizer->encode(text, add_special);
  return std::nullopt;
}

// OpenAI's message roles.
bool known_role(const std::string& role) {
  return role == "system" || role == "developer" || role == "user" || role == "assistant" ||
         role == "tool" || role == "function";
}

// One chat message, checked as OpenAI checks it (a known role; content a string, or a non-empty
// list of parts; null only for an assistant; tool messages name their call), with its content
// parts flattened to one string as SGLang does for text-only models: the text parts joined with
// spaces. Other part types (images, audio, files) need a multimodal model: 400.
Error normalize_message(const json& msg, size_t index, json& out) {
  const std::string where = fmt::format("messages[{}]", index);
  if (!msg.is_object()) return bad_request(fmt::format("'{}' must be an object", where), where);
  const auto role = msg.find("role");
  if (role == msg.end() || !role->is_string()) {
    return bad_request(fmt::format("'{}.role' must be a string", where), where + ".role");
  }
  const std::string r = role->get<std::string>();
  if (!known_role(r)) {
    return bad_request(fmt::format("'{}.role' must be one of 'system', 'developer', 'user', "
                                   "'assistant', 'tool' and 'function'",
                                   where),
                       where + ".role");
  }
  out = json::object();
  for (const auto& [key, value] : msg.items()) {
    if (!value.is_null()) out[key] = value;  // SGLang drops null fields
  }
  const std::string content_key = where + ".content";
  const auto c = msg.find("content");
  if (c == msg.end() || c->is_null()) {
    if (r != "assistant") {
      return bad_request(fmt::format("'{}' is required for role '{}'", content_key, r),
                         content_key);
    }
    return std::nullopt;
  }
  if (c->is_string()) {
    if (!valid_utf8(c->get<std::string>())) {
      return bad_request("message content is not valid UTF-8", content_key);
    }
  } else if (c->is_array()) {
    if (c->empty()) {
      return bad_request(fmt::format("'{}' must not be an empty list", content_key), content_key);
    }
    std::string text;
    for (size_t k = 0; k < c->size(); ++k) {
      const json& part = (*c)[k];
      const std::string part_key = fmt::format("{}[{}]", content_key, k);
      const auto type = part.is_object() ? part.find("type") : part.end();
      if (!part.is_object() || type == part.end() || !type->is_string()) {
        return bad_request(fmt::format("'{}' must be an object with a string 'type'", part_key),
                           part_key);
      }
      if (*type != "text") {
        return ApiError{400,
                        fmt::format("'{}.type' is '{}': this model takes text only", part_key,
                                    type->get<std::string>()),
                        "invalid_request_error", part_key + ".type", "unsupported"};
      }
      const auto t = part.find("text");
      if (t == part.end() || !t->is_string()) {
        return bad_request(fmt::format("'{}.text' must be a string", part_key), part_key + ".text");
      }
      if (!valid_utf8(t->get<std::string>())) {
        return bad_request("message content is not valid UTF-8", part_key + ".text");
      }
      if (k > 0) text += ' ';
      text += t->get<std::string>();
    }
    out["content"] = text;
  } else {
    return bad_request(fmt::format("'{}' must be a string or a list of content parts", content_key),
                       content_key);
  }
  if (r == "tool") {
    const auto id = msg.find("tool_call_id");
    if (id == msg.end() || !id->is_string()) {
      return bad_request(fmt::format("'{}.tool_call_id' must be a string", where),
                         where + ".tool_call_id");
    }
  }
  return std::nullopt;
}

// OpenAI's function name rule: 1-64 of a-z, A-Z, 0-9, '_' and '-'.
bool valid_function_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char ch) {
    return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
  });
}

// 'tools' as OpenAI checks it: a list of {"type": "function", "function": {"name", optional
// "description" string, optional "parameters" object, optional "strict" boolean}}.
Error validate_tools(const json& o) {
  const auto tools = o.find("tools");
  if (tools == o.end() || tools->is_null()) return std::nullopt;
  if (!tools->is_array()) return bad_request("'tools' must be a list", "tools");
  for (size_t i = 0; i < tools->size(); ++i) {
    const json& tool = (*tools)[i];
    const std::string where = fmt::format("tools[{}]", i);
    if (!tool.is_object()) return bad_request(fmt::format("'{}' must be an object", where), where);
    const auto type = tool.find("type");
    if (type == tool.end() || !type->is_string() || *type != "function") {
      return bad_request(fmt::format("'{}.type' must be 'function'", where), where + ".type");
    }
    const auto fn = tool.find("function");
    if (fn == tool.end() || !fn->is_object()) {
      return bad_request(fmt::format("'{}.function' must be an object", where),
                         where + ".function");
    }
    const auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || !valid_function_name(name->get<std::string>())) {
      return bad_request(
          fmt::format("'{}.function.name' must be 1-64 letters, digits, '_' or '-'", where),
          where + ".function.name");
    }
    const auto desc = fn->find("description");
    if (desc != fn->end() && !desc->is_null() && !desc->is_string()) {
      return bad_request(fmt::format("'{}.function.description' must be a string", where),
                         where + ".function.description");
    }
    const auto params = fn->find("parameters");
    if (params != fn->end() && !params->is_null() && !params->is_object()) {
      return bad_request(fmt::format("'{}.function.parameters' must be an object", where),
                         where + ".function.parameters");
    }
    const auto strict = fn->find("strict");
    if (strict != fn->end() && !strict->is_null() && !strict->is_boolean()) {
      return bad_request(fmt::format("'{}.function.strict' must be a boolean", where),
                         where + ".function.strict");
    }
  }
  return std::nullopt;
}

}  // namespace

size_t json_nesting_depth(std::string_view text, size_t stop_above) {
  size_t depth = 0;
  size_t deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > stop_above) return deepest;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

Parsed<json> parse_json_body(const std::string& body) {
  // Checked before parsing: the JSON library parses any depth, but copying, comparing, dumping
  // and the chat template recurse once per level (100,000 levels overflow the stack).
  if (json_nesting_depth(body, kMaxJsonDepth) > kMaxJsonDepth) {
    return bad_request(fmt::format(
        "the request body nests deeper than {} levels of arrays and objects", kMaxJsonDepth));
  }
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_request("the request body is not valid JSON");
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  return j;
}

Parsed<NativeGenerateRequest> parse_generate(const json& o, const ModelLimits& m) {
  NativeGenerateRequest req;
  GenerationSpec base;
  base.sampling = m.sampling_defaults;
  base.sampling.max_new_tokens = 128;  // SGLang's default
  const auto sp_it = o.find("sampling_params");
  if (sp_it != o.end() && !sp_it->is_null()) {
    if (!sp_it->is_object())
      return bad_request("'sampling_params' must be an object", "sampling_params");
    KV_API_TRY(read_sampling(*sp_it, "max_new_tokens", base.sampling, base.stop,
                             base.skip_special_tokens, m.vocab_size));
  }
  KV_API_TRY(read_bool(o, "stream", req.stream));
  KV_API_TRY(read_bool(o, "return_logprob", base.sampling.return_logprob));
  KV_API_TRY(read_int(o, "logprob_start_len", -1, std::numeric_limits<int32_t>::max(),
                      base.logprob_start_len));
  KV_API_TRY(read_int(o, "top_logprobs_num", 0, 20, base.sampling.top_logprobs_num));
  if (base.sampling.return_logprob && base.logprob_start_len < 0) base.logprob_start_len = -1;
  KV_API_TRY(read_disagg(o, base.disagg));
  const bool has_text = o.contains("text") && !o["text"].is_null();
  const bool has_ids = o.contains("input_ids") && !o["input_ids"].is_null();
  if (has_text == has_ids) return bad_request("give exactly one of 'text' and 'input_ids'");
  if (has_text) {
    const json& t = o["text"];
    std::vector<std::string> texts;
    if (t.is_string()) {
      texts = {t.get<std::string>()};
    } else if (t.is_array()) {
      req.batched = true;
      for (const auto& x : t) {
        if (!x.is_string())
          return bad_request("'text' must be a string or a list of strings", "text");
        texts.push_back(x.get<std::string>());
      }
    } else {
      return bad_request("'text' must be a string or a list of strings", "text");
    }
    for (const auto& text : texts) {
      GenerationSpec g = base;
      KV_API_TRY(tokenize_text(text, m, true, g));
      req.items.push_back(std::move(g));
    }
  } else {
    const json& ids = o["input_ids"];
    if (!ids.is_array()) return bad_request("'input_ids' must be a list", "input_ids");
    if (!ids.empty() && ids[0].is_array()) {
      req.batched = true;
      for (const auto& one : ids) {
        if (!one.is_array()) return bad_request("'input_ids' must be a list of lists", "input_ids");
        GenerationSpec g = base;
        KV_API_TRY(read_token_ids(one, "input_ids", m.vocab_size, g.input_ids));
        req.items.push_back(std::move(g));
      }
    } else {
      GenerationSpec g = base;
      KV_API_TRY(read_token_ids(ids, "input_ids", m.vocab_size, g.input_ids));
      req.items.push_back(std::move(g));
    }
  }
  if (req.items.empty()) return bad_request("no prompt given");
  const bool max_given =
      sp_it != o.end() && sp_it->is_object() && sp_it->contains("max_new_tokens");
  for (const auto& g : req.items)
    KV_API_TRY(check_fits(g, m, max_given, "max_new_tokens"));
  KV_API_TRY(one_sequence_per_room(base.disagg, req.items.size()));
  if (const auto it = o.find("rid"); it != o.end() && !it->is_null()) {
    if (it->is_string()) {
      req.rids = {it->get<std::string>()};
    } else if (it->is_array()) {
      for (const auto& r : *it) {
        if (!r.is_string())
          return bad_request("'rid' must be a string or a list of strings", "rid");
        req.rids.push_back(r.get<std::string>());
      }
    } else {
      return bad_request("'rid' must be a string or a list of strings", "rid");
    }
    if (req.rids.size() != req.items.size()) return bad_request("one 'rid' per prompt", "rid");
  }
  return req;
}

Parsed<CompletionRequest> parse_completion(const json& o, const ModelLimits& m) {
  CompletionRequest req;
  GenerationSpec base;
  base.sampling = m.sampling_defaults;
  base.sampling.max_new_tokens = 16;  // OpenAI's default for completions
  if (const auto it = o.find("model"); it != o.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'model' must be a string", "model");
    req.model = it->get<std::string>();
  }
  KV_API_TRY(read_sampling(o, "max_tokens", base.sampling, base.stop, base.skip_special_tokens,
                           m.vocab_size));
  KV_API_TRY(read_int(o, "n", 1, 128, req.n));
  KV_API_TRY(read_disagg(o, base.disagg));
  KV_API_TRY(read_bool(o, "stream", req.stream));
  KV_API_TRY(read_bool(o, "echo", req.echo));
  KV_API_TRY(read_int(o, "logprobs", 0, 5, req.logprobs));
  if (o.contains("best_of") && !o["best_of"].is_null() && o["best_of"] != 1) {
    return ApiError{400, "'best_of' is not supported", "invalid_request_error", "best_of",
                    "unsupported"};
  }
  if (o.contains("suffix") && !o["suffix"].is_null()) {
    return ApiError{400, "'suffix' is not supported", "invalid_request_error", "suffix",
                    "unsupported"};
  }
  if (const auto it = o.find("stream_options"); it != o.end() && !it->is_null()) {
    if (!it->is_object())
      return bad_request("'stream_options' must be an object", "stream_options");
    KV_API_TRY(read_bool(*it, "include_usage", req.include_usage));
  }
  if (req.logprobs >= 0) {
    base.sampling.return_logprob = true;
    base.sampling.top_logprobs_num = req.logprobs;
  }
  const auto p = o.find("prompt");
  if (p == o.end() || p->is_null()) return bad_request("'prompt' is required", "prompt");
  auto add_text = [&](const std::string& text) -> Error {
    GenerationSpec g = base;
    if (Error e = tokenize_text(text, m, true, g)) return e;
    req.prompts.push_back(std::move(g));
    return std::nullopt;
  };
  auto add_ids = [&](const json& ids) -> Error {
    GenerationSpec g = base;
    if (Error e = read_token_ids(ids, "prompt", m.vocab_size, g.input_ids)) return e;
    req.prompts.push_back(std::move(g));
    return std::nullopt;
  };
  if (p->is_string()) {
    KV_API_TRY(add_text(p->get<std::string>()));
  } else if (p->is_array() && !p->empty() && (*p)[0].is_string()) {
    for (const auto& x : *p) {
      if (!x.is_string()) return bad_request("'prompt' mixes strings and token ids", "prompt");
      KV_API_TRY(add_text(x.get<std::string>()));
    }
  } else if (p->is_array() && !p->empty() && (*p)[0].is_array()) {
    for (const auto& x : *p) {
      if (!x.is_array()) return bad_request("'prompt' mixes lists and token ids", "prompt");
      KV_API_TRY(add_ids(x));
    }
  } else if (p->is_array()) {
    KV_API_TRY(add_ids(*p));
  } else {
    return bad_request("'prompt' must be a string, a list of strings, or token ids", "prompt");
  }
  const bool max_given = o.contains("max_tokens") && !o["max_tokens"].is_null();
  for (auto& g : req.prompts) {
    if (!max_given) {
      g.sampling.max_new_tokens =
          std::min<int32_t>(g.sampling.max_new_tokens,
                            std::max<int32_t>(0, m.context_len - int32_t(g.input_ids.size())));
    }
    KV_API_TRY(check_fits(g, m, max_given, "max_tokens"));
  }
  if (req.prompts.size() * static_cast<size_t>(req.n) > 1024) {
    return bad_request("at most 1024 completions per request (prompts x n)", "n");
  }
  KV_API_TRY(one_sequence_per_room(base.disagg, req.prompts.size() * static_cast<size_t>(req.n)));
  return req;
}

Parsed<ChatCompletionRequest> parse_chat_completion(const json& o, const ModelLimits& m) {
  ChatCompletionRequest req;
  GenerationSpec& g = req.spec;
  g.sampling = m.sampling_defaults;
  g.sampling.max_new_tokens = std::numeric_limits<int32_t>::max();  // the context's remainder
  if (const auto it = o.find("model"); it != o.end() && !it->is_null()) {
    if (!it->is_string()) return bad_request("'model' must be a string", "model");
    req.model = it->get<std::string>();
  }
  KV_API_TRY(
      read_sampling(o, "max_tokens", g.sampling, g.stop, g.skip_special_tokens, m.vocab_size));
  const bool max_given =
      (o.contains("max_tokens") && !o["max_tokens"].is_null()) ||
      (o.contains("max_completion_tokens") && !o["max_completion_tokens"].is_null());
  KV_API_TRY(read_int(o, "max_completion_tokens", 0, std::numeric_limits<int32_t>::max(),
                      g.sampling.max_new_tokens));
  KV_API_TRY(read_int(o, "n", 1, 128, req.n));
  KV_API_TRY(read_disagg(o, g.disagg));
  KV_API_TRY(one_sequence_per_room(g.disagg, static_cast<size_t>(req.n)));
  KV_API_TRY(read_bool(o, "stream", req.stream));
  KV_API_TRY(read_bool(o, "logprobs", req.logprobs));
  KV_API_TRY(read_int(o, "top_logprobs", 0, 20, req.top_logprobs));
  if (const auto it = o.find("stream_options"); it != o.end() && !it->is_null()) {
    if (!it->is_object())
      return bad_request("'stream_options' must be an object", "stream_options");
    KV_API_TRY(read_bool(*it, "include_usage", req.include_usage));
  }
  if (const auto it = o.find("response_format"); it != o.end() && !it->is_null()) {
    const auto type = it->is_object() ? it->find("type") : it->end();
    if (!it->is_object() || type == it->end() || !type->is_string() || *type != "text") {
      return ApiError{400, "only response_format {\"type\": \"text\"} is supported",
                      "invalid_request_error", "response_format", "unsupported"};
    }
  }
  if (req.logprobs) {
    g.sampling.return_logprob = true;
    g.sampling.top_logprobs_num = req.top_logprobs;
  }
  const auto msgs = o.find("messages");
  if (msgs == o.end() || !msgs->is_array() || msgs->empty()) {
    return bad_request("'messages' must be a non-empty list", "messages");
  }
  json messages = json::array();
  for (size_t i = 0; i < msgs->size(); ++i) {
    json msg;
    KV_API_TRY(normalize_message((*msgs)[i], i, msg));
    messages.push_back(std::move(msg));
  }
  KV_API_TRY(validate_tools(o));
  if (m.tokenizer == nullptr || m.chat_template == nullptr) {
    return bad_request("this model has no chat template; use /v1/completions", "messages");
  }
  json context = json::object();
  const auto token_text = [&](std::optional<int32_t> id) -> json {
    if (!id) return nullptr;
    const auto t = m.tokenizer->id_to_token(*id);
    return t ? json(*t) : json(nullptr);
  };
  context["bos_token"] = token_text(m.tokenizer->bos_token_id());
  context["eos_token"] = token_text(m.tokenizer->eos_token_id());
  if (o.contains("tools") && !o["tools"].is_null()) context["tools"] = o["tools"];
  auto rendered = m.chat_template->render(messages, /*add_generation_prompt=*/true, context);
  if (!rendered.is_ok()) return bad_request(rendered.status().message(), "messages");
  g.prompt_text = *rendered;
  g.input_ids = m.tokenizer->encode(*rendered, /*add_special_tokens=*/false);
  if (!max_given) {
    g.sampling.max_new_tokens =
        std::max<int32_t>(0, m.context_len - static_cast<int32_t>(g.input_ids.size()));
  }
  KV_API_TRY(check_fits(g, m, max_given, "max_tokens"));
  return req;
}

engine::SamplingParams model_sampling_defaults(const checkpoint::GenerationConfig& g) {
  engine::SamplingParams sp;
  if (g.temperature) sp.temperature = static_cast<float>(*g.temperature);
  if (g.top_p) sp.top_p = static_cast<float>(*g.top_p);
  if (g.top_k && *g.top_k > 0) sp.top_k = *g.top_k;
  if (g.min_p) sp.min_p = static_cast<float>(*g.min_p);
  if (g.repetition_penalty) sp.repetition_penalty = static_cast<float>(*g.repetition_penalty);
  return sp;
}

}  // namespace kvserve::server

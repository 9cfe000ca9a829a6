#include "kvserve/server/responses.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <iterator>

#include <random>

#include "kvserve/tokenizer/byte_level.h"

namespace kvserve::server {
namespace {

std::string piece(const tokenizer::Tokenizer* tok, int32_t id) {
  if (tok == nullptr) return std::to_string(id);
  const int32_t one[1] = {id};
  return tok->decode(one, /*skip_special_tokens=*/false);
}

bool has_replacement_character(const std::string& s) {
  return s.find("\xEF\xBF\xBD") != std::string::npos;
}

ordered_json bytes_of(const std::string& s) {
  ordered_json b = ordered_json::array();
  for (const char c : s)
    b.push_back(static_cast<uint8_t>(c));
  return b;
}

}  // namespace

std::string token_bytes(const tokenizer::Tokenizer* tok, int32_t id) {
  std::string text = piece(tok, id);
  if (tok == nullptr || !has_replacement_character(text)) return text;
  // Decoding one token replaced bytes that are not UTF-8 by themselves (part of a character):
  // take them from the vocabulary entry, "<0xNN>" (byte fallback) or a byte-level string.
  const std::optional<std::string> token = tok->id_to_token(id);
  if (!token) return text;
  unsigned byte = 0;
  if (token->size() == 6 && token->starts_with("<0x") && token->back() == '>' &&
      std::sscanf(token->c_str() + 3, "%2x", &byte) == 1) {
    return std::string(1, static_cast<char>(byte));
  }
  std::string raw;
  tokenizer::append_bytes_of_token(raw, *token);
  return raw;
}

std::string sse(const ordered_json& j) {
  return "data: " + j.dump(-1, ' ', false, ordered_json::error_handler_t::replace) + "\n\n";
}

ApiError engine_error(const engine::FinishReason& finish) {
  return {503, finish.message, "service_unavailable", "", ""};
}

std::optional<ApiError> job_error(const Job& job) {
  for (const Choice& c : job.choices()) {
    if (c.output->finished() && c.output->finish().kind == engine::FinishKind::kError) {
      return engine_error(c.output->finish());
    }
  }
  return std::nullopt;
}

std::string sse_error(const ApiError& e) {
  return "data: " + e.body() + "\n\n";
}

std::string new_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{}-{:016x}{:08x}", prefix, rng(), static_cast<uint32_t>(rng()));
}

ordered_json native_finish_reason(const OutputCollector& o) {
  if (!o.finished()) return nullptr;
  const engine::FinishReason& f = o.finish();
  switch (f.kind) {
    case engine::FinishKind::kStopToken:
      return {{"type", "stop"}, {"matched", f.matched_token}};
    case engine::FinishKind::kStopString:
      return {{"type", "stop"}, {"matched", f.matched_string}};
    case engine::FinishKind::kLength:
      return {{"type", "length"}, {"length", o.completion_tokens()}};
    case engine::FinishKind::kAbort:
      return {{"type", "abort"}, {"message", f.message}};
    case engine::FinishKind::kError:
      return {{"type", "error"}, {"message", f.message}};
    case engine::FinishKind::kNone:
      break;
  }
  return nullptr;
}

ordered_json native_item(const Job& job, const Choice& c, bool final) {
  const OutputCollector& o = *c.output;
  ordered_json meta = {{"id", c.rid},
                       {"finish_reason", native_finish_reason(o)},
                       {"prompt_tokens", o.prompt_tokens()},
                       {"completion_tokens", o.completion_tokens()},
                       {"cached_tokens", o.cached_tokens()},
                       {"e2e_latency", job.seconds()}};
  const GenerationSpec& spec = job.specs()[c.spec];
  if (spec.sampling.return_logprob) {
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < o.logprobs().size(); ++i) {
      out.push_back({o.logprobs()[i], o.output_ids()[i], nullptr});
    }
    meta["output_token_logprobs"] = out;
    if (spec.logprob_start_len >= 0) {
      // [logprob, token, text] for prompt positions from logprob_start_len; the first has none.
      ordered_json in = ordered_json::array();
      const int32_t start = spec.logprob_start_len;
      in.push_back({nullptr, spec.input_ids[start], nullptr});
      for (size_t i = 0; i < o.input_logprobs().size(); ++i) {
        in.push_back({o.input_logprobs()[i], spec.input_ids[start + 1 + i], nullptr});
      }
      meta["input_token_logprobs"] = in;
    }
    if (spec.sampling.top_logprobs_num > 0) {
      ordered_json top = ordered_json::array();
      for (const auto& t : o.top_logprobs()) {
        ordered_json row = ordered_json::array();
        for (const auto& [id, lp] : t)
          row.push_back({lp, id, nullptr});
        top.push_back(row);
      }
      meta["output_top_logprobs"] = top;
    }
  }
  (void) final;
  return {{"text", o.text()}, {"output_ids", o.output_ids()}, {"meta_info", meta}};
}

std::string native_stream_event(const Job& job, const Choice& c, size_t index) {
  const GenerationSpec& spec = job.specs()[c.spec];
  if (spec.sampling.return_logprob) {
    ordered_json item = native_item(job, c, false);
    item["index"] = index;
    return sse(item);
  }
  // The same object as native_item + index, written directly: this runs once per token per
  // stream, and text and output_ids are cumulative (SGLang's format).
  const OutputCollector& o = *c.output;
  std::string out = "data: {\"text\":";
  out += ordered_json(o.text()).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  out += ",\"output_ids\":[";
  fmt::format_to(std::back_inserter(out), "{}", fmt::join(o.output_ids(), ","));
  out += "],\"meta_info\":{\"id\":";
  out += ordered_json(c.rid).dump();
  out += ",\"finish_reason\":";
  out += native_finish_reason(o).dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  fmt::format_to(std::back_inserter(out),
                 ",\"prompt_tokens\":{},\"completion_tokens\":{},\"cached_tokens\":{},"
                 "\"e2e_latency\":{}}},\"index\":{}}}\n\n",
                 o.prompt_tokens(), o.completion_tokens(), o.cached_tokens(), job.seconds(), index);
  return out;
}

ordered_json usage(const Job& job) {
  int64_t prompt = 0;
  int64_t completion = 0;
  int64_t cached = 0;
  std::vector<bool> counted(job.specs().size());
  for (const Choice& c : job.choices()) {
    completion += c.output->completion_tokens();
    if (!counted[c.spec]) {  // n choices share one prompt
      counted[c.spec] = true;
      prompt += static_cast<int64_t>(job.specs()[c.spec].input_ids.size());
      cached += c.output->cached_tokens();
    }
  }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion},
          {"prompt_tokens_details", {{"cached_tokens", cached}}}};
}

ordered_json completion_chunk(const std::string& id, const std::string& model, int64_t created,
                              size_t index, const std::string& text, const char* finish_reason) {
  return {
      {"id", id},
      {"object", "text_completion"},
      {"created", created},
      {"model", model},
      {"choices",
       {{{"index", index},
         {"text", text},
         {"logprobs", nullptr},
         {"finish_reason", finish_reason ? ordered_json(finish_reason) : ordered_json(nullptr)}}}}};
}

ordered_json completion_response(const Job& job, const CompletionRequest& req,
                                 const std::string& id, const std::string& model,
                                 const tokenizer::Tokenizer* tok) {
  ordered_json choices = ordered_json::array();
  for (size_t i = 0; i < job.choices().size(); ++i) {
    const Choice& c = job.choices()[i];
    const OutputCollector& o = *c.output;
    const GenerationSpec& spec = job.specs()[c.spec];
    std::string text = o.text();
    if (req.echo) text = spec.prompt_text + text;
    ordered_json lp = nullptr;
    if (req.logprobs >= 0) {
      ordered_json tokens = ordered_json::array(), lps = ordered_json::array(),
                   tops = ordered_json::array(), offsets = ordered_json::array();
      size_t offset = req.echo ? spec.prompt_text.size() : 0;
      for (size_t k = 0; k < o.output_ids().size(); ++k) {
        const std::string p = piece(tok, o.output_ids()[k]);
        tokens.push_back(p);
        lps.push_back(k < o.logprobs().size() ? ordered_json(o.logprobs()[k])
                                              : ordered_json(nullptr));
        ordered_json top = ordered_json::object();
        if (k < o.top_logprobs().size()) {
          for (const auto& [tid, v] : o.top_logprobs()[k])
            top[piece(tok, tid)] = v;
        }
        tops.push_back(top);
        offsets.push_back(offset);
        offset += p.size();
      }
      lp = {{"tokens", tokens},
            {"token_logprobs", lps},
            {"top_logprobs", tops},
            {"text_offset", offsets}};
    }
    choices.push_back({{"index", i},
                       {"text", text},
                       {"logprobs", lp},
                       {"finish_reason", o.finish().openai_name()}});
  }
  return {{"id", id},       {"object", "text_completion"}, {"created", job.created_unix()},
          {"model", model}, {"choices", choices},          {"usage", usage(job)}};
}

ordered_json chat_logprobs(const tokenizer::Tokenizer* tok, const std::vector<int32_t>& ids,
                           const std::vector<float>& lps,
                           const std::vector<std::vector<std::pair<int32_t, float>>>& top,
                           size_t from) {
  ordered_json content = ordered_json::array();
  for (size_t k = from; k < ids.size() && k < lps.size(); ++k) {
    const std::string p = piece(tok, ids[k]);
    ordered_json tops = ordered_json::array();
    if (k < top.size()) {
      for (const auto& [tid, v] : top[k]) {
        const std::string tp = piece(tok, tid);
        tops.push_back({{"token", tp}, {"logprob", v}, {"bytes", bytes_of(token_bytes(tok, tid))}});
      }
    }
    content.push_back({{"token", p},
                       {"logprob", lps[k]},
                       {"bytes", bytes_of(token_bytes(tok, ids[k]))},
                       {"top_logprobs", tops}});
  }
  return {{"content", content}};
}

ordered_json chat_chunk(const std::string& id, const std::string& model, int64_t created,
                        size_t index, const ordered_json& delta, const char* finish_reason,
                        const ordered_json& logprobs) {
  return {
      {"id", id},
      {"object", "chat.completion.chunk"},
      {"created", created},
      {"model", model},
      {"choices",
       {{{"index", index},
         {"delta", delta},
         {"logprobs", logprobs},
         {"finish_reason", finish_reason ? ordered_json(finish_reason) : ordered_json(nullptr)}}}}};
}

ordered_json chat_response(const Job& job, const ChatCompletionRequest& req, const std::string& id,
                           const std::string& model, const tokenizer::Tokenizer* tok) {
  ordered_json choices = ordered_json::array();
  for (size_t i = 0; i < job.choices().size(); ++i) {
    const OutputCollector& o = *job.choices()[i].output;
    choices.push_back({{"index", i},
                       {"message", {{"role", "assistant"}, {"content", o.text()}}},
                       {"logprobs", req.logprobs ? chat_logprobs(tok, o.output_ids(), o.logprobs(),
                                                                 o.top_logprobs(), 0)
                                                 : ordered_json(nullptr)},
                       {"finish_reason", o.finish().openai_name()}});
  }
  return {{"id", id},       {"object", "chat.completion"}, {"created", job.created_unix()},
          {"model", model}, {"choices", choices},          {"usage", usage(job)}};
}

std::string openai_stream_end(const Job& job, bool include_usage, const std::string& id,
                              const std::string& model, const char* object) {
  std::string tail;
  if (include_usage) {
    tail += sse({{"id", id},
                 {"object", object},
                 {"created", job.created_unix()},
                 {"model", model},
                 {"choices", ordered_json::array()},
                 {"usage", usage(job)}});
  }
  return tail + kSseDone;
}

}  // namespace kvserve::server

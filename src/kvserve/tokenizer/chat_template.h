// Chat templates: transformers' apply_chat_template(tokenize=False) in C++.
//
// A Hugging Face tokenizer_config.json carries a Jinja2 "chat_template" that turns a conversation
// into the prompt text. ChatTemplate parses that template once and renders conversations with
// jinja2's semantics as transformers configures them (ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks and loop controls; tojson without HTML escaping; raise_exception and
// strftime_now as globals; tools=None and documents=None unless given). The supported subset of
// Jinja and the known differences from Python's jinja2 are listed in
// tests/fixtures/chat_templates/README.md.
//
// Thread-safety: a parsed ChatTemplate is immutable; render() may run concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

namespace jinja {
struct Program;
}

// Bounds on one render, so that a hostile or broken template fails cleanly instead of hanging or
// exhausting memory.
struct ChatTemplateLimits {
  size_t max_output_bytes = size_t{64} << 20;  // the rendered prompt (and each macro's output)
  size_t max_work_bytes = size_t{256} << 20;   // all strings and lists built while rendering
  uint64_t max_steps = 50'000'000;             // expression and statement evaluations
  int max_call_depth = 64;                     // nested macro calls
};

class ChatTemplate {
 public:
  // kInvalidArgument naming the line/column for syntax errors (including unknown filters and
  // tests, which jinja2 also rejects when it compiles a template).
  static Result<ChatTemplate> parse(std::string_view source, const ChatTemplateLimits& limits = {});

  // messages: a JSON array of {"role": ..., "content": ...} objects (content may be a string,
  // null, or a list of {"type":"text","text":...} parts; they reach the template unchanged, as in
  // transformers); context adds variables such as bos_token, eos_token, tools, date_string;
  // add_generation_prompt as in transformers. Runtime errors (raise_exception(...) in the
  // template, type errors, undefined calls) are kInvalidArgument: raise_exception's message as
  // the template wrote it, other errors as "chat template error: <what> (chat template line L,
  // column C)".
  Result<std::string> render(const nlohmann::json& messages, bool add_generation_prompt,
                             const nlohmann::json& context = nlohmann::json::object()) const;
  // The same with ordered JSON: objects keep their key order, so tojson prints tools' keys in the
  // order the client sent them, as Python does (nlohmann::json sorts keys).
  Result<std::string> render(const nlohmann::ordered_json& messages, bool add_generation_prompt,
                             const nlohmann::ordered_json& context) const;

  const std::string& source() const { return source_; }

 private:
  template <typename Json>
  Result<std::string> render_impl(const Json& messages, bool add_generation_prompt,
                                  const Json& context) const;

  std::string source_;
  std::shared_ptr<const jinja::Program> program_;
  ChatTemplateLimits limits_;
};

}  // namespace kvserve::tokenizer

#include "kvserve/tokenizer/chat_template.h"

#include <new>

#include "kvserve/tokenizer/jinja_ast.h"
#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_interpreter.h"

namespace kvserve::tokenizer {

Result<ChatTemplate> ChatTemplate::parse(std::string_view source,
                                         const ChatTemplateLimits& limits) {
  KV_ASSIGN_OR_RETURN(std::shared_ptr<const jinja::Program> program, jinja::parse_program(source));
  ChatTemplate t;
  t.source_ = std::string(source);
  t.program_ = std::move(program);
  t.limits_ = limits;
  return t;
}

Result<std::string> ChatTemplate::render(const nlohmann::json& messages, bool add_generation_prompt,
                                         const nlohmann::json& context) const {
  return render_impl(messages, add_generation_prompt, context);
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         bool add_generation_prompt,
                                         const nlohmann::ordered_json& context) const {
  return render_impl(messages, add_generation_prompt, context);
}

template <typename Json>
Result<std::string> ChatTemplate::render_impl(const Json& messages, bool add_generation_prompt,
                                              const Json& context) const {
  KV_CHECK(program_ != nullptr, "render() of a ChatTemplate that was not parsed");
  if (!messages.is_array()) {
    return invalid_argument(
        "chat template: messages must be a JSON array of message objects, "
        "got {}",
        messages.type_name());
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    if (!messages[i].is_object()) {
      return invalid_argument("chat template: messages[{}] must be an object, got {}", i,
                              messages[i].type_name());
    }
  }
  if (!context.is_object() && !context.is_null()) {
    return invalid_argument("chat template: the context must be a JSON object, got {}",
                            context.type_name());
  }
  try {
    // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
    // **special_tokens_and_kwargs).
    jinja::Dict variables;
    variables.set("messages", jinja::Value::from_json(messages));
    variables.set("tools", jinja::Value::none());
    variables.set("documents", jinja::Value::none());
    variables.set("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) {
        if (it.key() == "messages" || it.key() == "add_generation_prompt") {
          return invalid_argument("chat template: the context must not set '{}'", it.key());
        }
        variables.set(it.key(), jinja::Value::from_json(it.value()));
      }
    }
    jinja::Interpreter interpreter(*program_, limits_, jinja::make_globals());
    return interpreter.render(variables);
  } catch (const jinja::JinjaError& e) {
    if (e.raised()) return Status(StatusCode::kInvalidArgument, e.what());
    return invalid_argument("chat template error: {}", e.what());
  } catch (const std::bad_alloc&) {
    return out_of_memory("chat template: out of memory while rendering");
  }
}

}  // namespace kvserve::tokenizer

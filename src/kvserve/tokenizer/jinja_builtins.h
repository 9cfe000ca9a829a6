// jinja2's filters, tests, globals and the Python methods that chat templates call on values.
#pragma once

#include <string_view>

#include "kvserve/tokenizer/jinja_value.h"

namespace kvserve::tokenizer::jinja {

// Names the parser accepts (jinja2 rejects unknown filters and tests when compiling).
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);
bool apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args);

// Attribute access as jinja2's sandboxed getattr: dict keys, methods of str/dict/list bound to
// the receiver, namespace attributes; Undefined (with jinja2's message) when there is none.
Value get_attribute(const Value& object, const std::string& name);

// range, namespace, dict, raise_exception, strftime_now.
Dict make_globals();

// Binds call arguments to named parameters (Python's rules for positional and keyword).
class ArgBinder {
 public:
  ArgBinder(std::string_view function, CallArgs& args,
            std::initializer_list<std::string_view> names);
  const Value* get(size_t index) const { return bound_[index]; }
  bool has(size_t index) const { return bound_[index] != nullptr; }
  const Value& get_or(size_t index, const Value& fallback) const {
    return bound_[index] != nullptr ? *bound_[index] : fallback;
  }

 private:
  std::vector<const Value*> bound_;
};

}  // namespace kvserve::tokenizer::jinja

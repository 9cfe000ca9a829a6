// Values of kvserve's Jinja interpreter (chat templates), with Python's semantics.
//
// Chat templates run in Python under jinja2, so values behave like the Python objects that
// transformers passes in: str (indexed by code point), int, float, bool, None, list, tuple,
// dict (insertion-ordered, string keys), jinja2's namespace, callables, and jinja2's default
// Undefined (prints as "", is falsy, iterates as empty; most other uses raise). Conversions to
// text follow str() and repr(); tojson follows json.dumps as transformers configures it.
//
// Errors inside the interpreter unwind as JinjaError; ChatTemplate::render turns them into a
// Status, so no exception leaves the tokenizer module.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvserve::tokenizer::jinja {

// A template runtime error. `raised` marks raise_exception(): its message is the template's own.
class JinjaError : public std::runtime_error {
 public:
  explicit JinjaError(const std::string& message, bool raised = false)
      : std::runtime_error(message), raised_(raised) {}
  bool raised() const { return raised_; }

 private:
  bool raised_;
};

// A template's runtime type error (jinja2's TypeError), as a JinjaError.
[[noreturn]] inline void type_error(const std::string& message) {
  throw JinjaError(message);
}

// `value` unless the arithmetic that produced it overflowed.
inline int64_t checked(bool overflow, int64_t value) {
  if (overflow) throw JinjaError("integer overflow (kvserve's template integers are 64-bit)");
  return value;
}

class Value;
class Interpreter;
using ValueList = std::vector<Value>;

// A Python dict restricted to string keys, in insertion order.
struct Dict {
  std::vector<std::pair<std::string, Value>> entries;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A callable: a global (range, namespace, raise_exception), a bound method or a macro.
struct Function {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> call;
  bool macro = false;  // prints as <Macro 'name'>
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,  // also tuples (tuple() is true): only repr tells them apart
    kDict,
    kNamespace,
    kFunction,
  };

  Value() : kind_(Kind::kUndefined) {}
  explicit Value(bool b) : kind_(Kind::kBool), int_(b) {}
  explicit Value(int64_t i) : kind_(Kind::kInt), int_(i) {}
  explicit Value(int i) : kind_(Kind::kInt), int_(i) {}
  explicit Value(double f) : kind_(Kind::kFloat), float_(f) {}
  explicit Value(std::string s);
  explicit Value(std::string_view s) : Value(std::string(s)) {}
  explicit Value(const char* s) : Value(std::string(s)) {}

  // `message` is what using the undefined value reports ("'x' is undefined").
  static Value undefined(std::string message);
  static Value none();
  static Value list(ValueList items, bool tuple = false);
  static Value dict(Dict d);
  static Value make_namespace(Dict d);
  static Value function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn,
                        bool macro = false);
  // JSON input (messages, tools, context) as Python objects: objects keep their key order.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt || kind_ == Kind::kBool; }  // bool is an int
  bool is_number() const { return is_int() || kind_ == Kind::kFloat; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_tuple() const { return kind_ == Kind::kList && tuple_; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_function() const { return kind_ == Kind::kFunction; }

  int64_t as_int() const { return int_; }  // kInt or kBool
  double as_double() const { return kind_ == Kind::kFloat ? float_ : static_cast<double>(int_); }
  const std::string& str() const { return *text_; }  // kString
  const ValueList& items() const { return *list_; }  // kList
  const Dict& dict() const { return *dict_; }        // kDict, kNamespace
  Dict& namespace_dict() const { return *dict_; }    // kNamespace (mutable)
  const Function& function() const { return *function_; }
  const std::string& undefined_message() const { return *text_; }

  // Python truthiness.
  bool truthy() const;
  // str(value) as jinja2 prints it ({{ x }}, ~, the string filter).
  std::string to_string() const;
  // repr(value), used inside containers.
  std::string repr() const;
  // "str", "int", "NoneType", ... for TypeError messages.
  std::string type_name() const;
  // jinja2's object_type_repr: "None", "dict object", ...
  std::string object_type_repr() const;

 private:
  Kind kind_;
  bool tuple_ = false;
  int depth_ = 0;  // list/dict nesting, bounded so that destruction and repr cannot overflow
  int64_t int_ = 0;
  double float_ = 0;
  std::shared_ptr<const std::string> text_;  // kString, kUndefined (its message)
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<Dict> dict_;  // mutable only through namespaces
  std::shared_ptr<const Function> function_;
};

// Python's ==, which never raises (different types compare unequal; 1 == 1.0 == True).
bool py_equal(const Value& a, const Value& b);
// Python's <; a TypeError (JinjaError) for types that do not order.
bool py_less(const Value& a, const Value& b);
// repr(float): the shortest round-trip digits, fixed for 1e-4 <= |x| < 1e16.
std::string python_float_repr(double x);
// repr(str).
std::string python_str_repr(std::string_view s);

struct JsonOptions {
  bool ensure_ascii = false;
  std::string indent;  // used when has_indent
  bool has_indent = false;
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
// json.dumps(value, ...) with transformers' defaults (ensure_ascii=False).
std::string to_python_json(const Value& value, const JsonOptions& options);

// Code-point helpers over UTF-8 (invalid bytes count as one character each).
std::vector<std::string_view> utf8_chars(std::string_view s);
size_t utf8_length(std::string_view s);
// Python's str.upper()/str.lower() for Latin (incl. ß -> SS), Greek, Cyrillic and fullwidth
// letters; other scripts pass through unchanged.
std::string unicode_upper(std::string_view s);
std::string unicode_lower(std::string_view s);
// Python's str.isspace() for one code point.
bool python_isspace(uint32_t code_point);
// Python's str.strip()/lstrip()/rstrip(): whitespace when `chars` is null, else those characters.
std::string python_strip(std::string_view s, const std::string* chars, bool left, bool right);

// Python's str.splitlines() (\n, \r\n, \r, \v, \f, \x1c-\x1e, \x85, \u2028, \u2029).
std::vector<std::string> splitlines(const std::string& s);
// Python's int(s, base) and float(s) on strings: whitespace, sign, underscores; false if invalid.
bool parse_python_int(std::string s, int64_t base, int64_t& out);
bool parse_python_float(const std::string& text, double& out);

}  // namespace kvserve::tokenizer::jinja

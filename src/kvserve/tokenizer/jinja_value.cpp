#include "kvserve/tokenizer/jinja_value.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer::jinja {
namespace {

// Containers nested deeper than this are refused by repr, ==, < and tojson (cycles through a
// namespace would otherwise recurse forever).
constexpr int kMaxNesting = 256;

void check_nesting(int depth) {
  if (depth > kMaxNesting) throw JinjaError("value nested too deeply (cyclic?)");
}

template <typename Json>
Value value_from_json(const Json& j, int depth) {
  check_nesting(depth);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      ValueList items;
      items.reserve(j.size());
      for (const auto& e : j)
        items.push_back(value_from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        d.entries.emplace_back(it.key(), value_from_json(it.value(), depth + 1));
      return Value::dict(std::move(d));
    }
    default:
      throw JinjaError("unsupported JSON value (binary) in the template's input");
  }
}

std::string repr_impl(const Value& v, int depth);

std::string container_repr(const Value& v, int depth) {
  check_nesting(depth);
  std::string out;
  if (v.is_list()) {
    out += v.is_tuple() ? '(' : '[';
    const ValueList& items = v.items();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += ", ";
      out += repr_impl(items[i], depth + 1);
    }
    if (v.is_tuple() && items.size() == 1) out += ',';
    out += v.is_tuple() ? ')' : ']';
    return out;
  }
  out += '{';
  bool first = true;
  for (const auto& [key, value] : v.dict().entries) {
    if (!first) out += ", ";
    first = false;
    out += python_str_repr(key);
    out += ": ";
    out += repr_impl(value, depth + 1);
  }
  out += '}';
  return out;
}

std::string repr_impl(const Value& v, int depth) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return python_str_repr(v.str());
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kList:
    case Value::Kind::kDict:
      return container_repr(v, depth);
    case Value::Kind::kNamespace: {
      check_nesting(depth);
      return "<Namespace " + container_repr(Value::dict(v.dict()), depth + 1) + ">";
    }
    default:
      return v.to_string();
  }
}

bool equal_impl(const Value& a, const Value& b, int depth) {
  check_nesting(depth);
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.str() == b.str();
    case Value::Kind::kList: {
      if (a.is_tuple() != b.is_tuple() || a.items().size() != b.items().size()) return false;
      for (size_t i = 0; i < a.items().size(); ++i) {
        if (!equal_impl(a.items()[i], b.items()[i], depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().entries.size() != b.dict().entries.size()) return false;
      for (const auto& [key, value] : a.dict().entries) {
        const Value* other = b.dict().find(key);
        if (other == nullptr || !equal_impl(value, *other, depth + 1)) return false;
      }
      return true;
    }
    case Value::Kind::kNamespace:
      return &a.dict() == &b.dict();
    case Value::Kind::kFunction:
      return &a.function() == &b.function();
    default:
      return false;
  }
}

bool less_impl(const Value& a, const Value& b, int depth) {
  check_nesting(depth);
  if (a.is_undefined()) throw JinjaError(a.undefined_message());
  if (b.is_undefined()) throw JinjaError(b.undefined_message());
  if (a.is_number() && b.is_number()) {
    if (a.is_int() && b.is_int()) return a.as_int() < b.as_int();
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 order = code points
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const ValueList& x = a.items();
    const ValueList& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equal_impl(x[i], y[i], depth + 1)) return less_impl(x[i], y[i], depth + 1);
    }
    return x.size() < y.size();
  }
  throw JinjaError(fmt::format("'<' not supported between instances of '{}' and '{}'",
                               a.type_name(), b.type_name()));
}

void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  size_t pos = 0;
  while (pos < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[pos]);
    if (c < 0x80) {
      ++pos;
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7f)) {
            out += fmt::format("\\u{:04x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    const size_t len = utf8_sequence_length(s, pos);
    if (!ensure_ascii || len == 0) {
      out.append(s.substr(pos, len == 0 ? 1 : len));
      pos += len == 0 ? 1 : len;
      continue;
    }
    uint32_t cp = decode_utf8(s, pos);
    if (cp >= 0x10000) {
      cp -= 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
  }
  out += '"';
}

void json_impl(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  check_nesting(depth);
  const auto newline = [&](int level) {
    if (!o.has_indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i)
      out += o.indent;
  };
  switch (v.kind()) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.as_int() != 0 ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.as_int());
      return;
    case Value::Kind::kFloat: {
      const double x = v.as_double();
      if (std::isnan(x)) {
        out += "NaN";
      } else if (std::isinf(x)) {
        out += x > 0 ? "Infinity" : "-Infinity";
      } else {
        out += python_float_repr(x);
      }
      return;
    }
    case Value::Kind::kString:
      append_json_string(out, v.str(), o.ensure_ascii);
      return;
    case Value::Kind::kList: {
      if (v.items().empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& item : v.items()) {
        if (!first) out += o.item_separator;
        first = false;
        newline(depth + 1);
        json_impl(out, item, o, depth + 1);
      }
      newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict().entries.empty()) {
        out += "{}";
        return;
      }
      std::vector<const std::pair<std::string, Value>*> entries;
      for (const auto& e : v.dict().entries)
        entries.push_back(&e);
      if (o.sort_keys) {
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto* x, const auto* y) { return x->first < y->first; });
      }
      out += '{';
      bool first = true;
      for (const auto* e : entries) {
        if (!first) out += o.item_separator;
        first = false;
        newline(depth + 1);
        append_json_string(out, e->first, o.ensure_ascii);
        out += o.key_separator;
        json_impl(out, e->second, o, depth + 1);
      }
      newline(depth);
      out += '}';
      return;
    }
    default:
      throw JinjaError(fmt::format("Object of type {} is not JSON serializable", v.type_name()));
  }
}

}  // namespace

const Value* Dict::find(std::string_view key) const {
  for (const auto& e : entries) {
    if (e.first == key) return &e.second;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& e : entries) {
    if (e.first == key) {
      e.second = std::move(value);
      return;
    }
  }
  entries.emplace_back(key, std::move(value));
}

Value::Value(std::string s)
    : kind_(Kind::kString), text_(std::make_shared<const std::string>(std::move(s))) {}

Value Value::undefined(std::string message) {
  Value v;
  v.text_ = std::make_shared<const std::string>(std::move(message));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::list(ValueList items, bool tuple) {
  Value v;
  v.kind_ = Kind::kList;
  v.tuple_ = tuple;
  for (const Value& item : items)
    v.depth_ = std::max(v.depth_, item.depth_ + 1);
  check_nesting(v.depth_);
  v.list_ = std::make_shared<const ValueList>(std::move(items));
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  for (const auto& entry : d.entries)
    v.depth_ = std::max(v.depth_, entry.second.depth_ + 1);
  check_nesting(v.depth_);
  v.dict_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::make_namespace(Dict d) {
  Value v = dict(std::move(d));
  v.kind_ = Kind::kNamespace;
  return v;
}

Value Value::function(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn,
                      bool macro) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.function_ = std::make_shared<const Function>(Function{std::move(name), std::move(fn), macro});
  return v;
}

Value Value::from_json(const nlohmann::json& j) {
  return value_from_json(j, 0);
}
Value Value::from_json(const nlohmann::ordered_json& j) {
  return value_from_json(j, 0);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return float_ != 0;
    case Kind::kString:
      return !text_->empty();
    case Kind::kList:
      return !list_->empty();
    case Kind::kDict:
      return !dict_->entries.empty();
    default:
      return true;
  }
}

std::string Value::to_string() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return int_ != 0 ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return python_float_repr(float_);
    case Kind::kString:
      return *text_;
    case Kind::kFunction:
      if (function_->macro) return "<Macro '" + function_->name + "'>";
      return "<function " + function_->name + ">";
    default:
      return repr_impl(*this, 0);
  }
}

std::string Value::repr() const {
  return repr_impl(*this, 0);
}

std::string Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return tuple_ ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

std::string Value::object_type_repr() const {
  if (kind_ == Kind::kNone) return "None";
  return type_name() + " object";
}

bool py_equal(const Value& a, const Value& b) {
  return equal_impl(a, b, 0);
}

bool py_less(const Value& a, const Value& b) {
  return less_impl(a, b, 0);
}

std::string to_python_json(const Value& value, const JsonOptions& options) {
  std::string out;
  json_impl(out, value, options, 0);
  return out;
}

}  // namespace kvserve::tokenizer::jinja

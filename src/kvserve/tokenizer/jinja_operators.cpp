// Operators, subscripts and slices of the Jinja interpreter, with Python's semantics and messages.
#include <fmt/format.h>

#include <cmath>

#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_interpreter.h"

namespace kvserve::tokenizer::jinja {
namespace {

// Python's floor division and modulo for ints.
int64_t floor_div(int64_t a, int64_t b) {
  if (b == -1) return checked(a == INT64_MIN, -a);
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t floor_mod(int64_t a, int64_t b) {
  if (b == -1) return 0;
  int64_t r = a % b;
  if (r != 0 && ((r < 0) != (b < 0))) r += b;
  return r;
}

Value repeat(Interpreter& in, const Value& seq, int64_t times) {
  if (times < 0) times = 0;
  if (seq.is_string()) {
    in.charge(seq.str().size() * static_cast<size_t>(times));
    std::string out;
    out.reserve(seq.str().size() * static_cast<size_t>(times));
    for (int64_t i = 0; i < times; ++i)
      out += seq.str();
    return Value(std::move(out));
  }
  in.charge(seq.items().size() * static_cast<size_t>(times) * sizeof(Value));
  ValueList out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), seq.items().begin(), seq.items().end());
  return Value::list(std::move(out), seq.is_tuple());
}

std::string unsupported(const std::string& op, const Value& a, const Value& b) {
  return fmt::format("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(),
                     b.type_name());
}

}  // namespace

Value Interpreter::eval_getitem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) throw JinjaError(obj.undefined_message());
  const auto no_element = [&] {
    return Value::undefined(
        fmt::format("{} has no element {}", obj.object_type_repr(), key.repr()));
  };
  if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    const bool text = obj.is_string();
    std::vector<std::string_view> chars;
    if (text) chars = utf8_chars(obj.str());
    const auto size = static_cast<int64_t>(text ? chars.size() : obj.items().size());
    int64_t i = key.as_int();
    if (i < 0) i += size;
    if (i < 0 || i >= size) return no_element();
    return text ? Value(std::string(chars[static_cast<size_t>(i)]))
                : obj.items()[static_cast<size_t>(i)];
  }
  if (obj.is_dict() && key.is_string()) {
    if (const Value* v = obj.dict().find(key.str())) return *v;
  }
  if (key.is_string()) return get_attribute(obj, key.str());
  return no_element();
}

Value Interpreter::eval_slice(const Expr& e) {
  const Value obj = eval(*e.args[0]);
  if (obj.is_undefined()) throw JinjaError(obj.undefined_message());
  int64_t bound[3] = {0, 0, 1};
  bool given[3] = {false, false, false};
  for (int k = 0; k < 3; ++k) {
    if (!e.args[static_cast<size_t>(k) + 1]) continue;
    const Value v = eval(*e.args[static_cast<size_t>(k) + 1]);
    if (v.is_none()) continue;
    if (!v.is_int())
      type_error("slice indices must be integers or None or have an __index__ method");
    bound[k] = v.as_int();
    given[k] = true;
  }
  if (!obj.is_list() && !obj.is_string()) {
    return Value::undefined(fmt::format("{} has no element slice", obj.object_type_repr()));
  }
  const int64_t step = bound[2];
  if (step == 0) throw JinjaError("slice step cannot be zero");
  std::vector<std::string_view> chars;
  if (obj.is_string()) chars = utf8_chars(obj.str());
  const auto len = static_cast<int64_t>(obj.is_string() ? chars.size() : obj.items().size());
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? len : len - 1;
  const auto clamp = [&](int64_t v) {
    return v < 0 ? std::max(v + len, lower) : std::min(v, upper);
  };
  const int64_t start = given[0] ? clamp(bound[0]) : (step > 0 ? lower : upper);
  const int64_t stop = given[1] ? clamp(bound[1]) : (step > 0 ? upper : lower);
  std::string text;
  ValueList items;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
    if (obj.is_string()) {
      text += chars[static_cast<size_t>(i)];
    } else {
      items.push_back(obj.items()[static_cast<size_t>(i)]);
    }
  }
  charge(text.size() + items.size() * sizeof(Value));
  if (obj.is_string()) return Value(std::move(text));
  return Value::list(std::move(items), obj.is_tuple());
}

Value Interpreter::eval_binary(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) throw JinjaError(a.undefined_message());
  if (b.is_undefined()) throw JinjaError(b.undefined_message());
  const bool ints = a.is_int() && b.is_int();
  const bool numbers = a.is_number() && b.is_number();
  int64_t r = 0;
  if (op == "+") {
    if (ints) {
      const bool overflow = __builtin_add_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(overflow, r));
    }
    if (numbers) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) {
      charge(a.str().size() + b.str().size());  // before building it
      return Value(a.str() + b.str());
    }
    if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
      ValueList items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      charge(items.size() * sizeof(Value));
      return Value::list(std::move(items), a.is_tuple());
    }
    if (a.is_string() || a.is_list()) {
      type_error(fmt::format("can only concatenate {} (not \"{}\") to {}", a.type_name(),
                             b.type_name(), a.type_name()));
    }
    type_error(unsupported("+", a, b));
  }
  if (op == "-") {
    if (ints) {
      const bool overflow = __builtin_sub_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(overflow, r));
    }
    if (numbers) return Value(a.as_double() - b.as_double());
    type_error(unsupported("-", a, b));
  }
  if (op == "*") {
    if (ints) {
      const bool overflow = __builtin_mul_overflow(a.as_int(), b.as_int(), &r);
      return Value(checked(overflow, r));
    }
    if (numbers) return Value(a.as_double() * b.as_double());
    if ((a.is_string() || a.is_list()) && b.is_int()) return repeat(*this, a, b.as_int());
    if (a.is_int() && (b.is_string() || b.is_list())) return repeat(*this, b, a.as_int());
    type_error(fmt::format("can't multiply sequence by non-int of type '{}'",
                           a.is_number() ? a.type_name() : b.type_name()));
  }
  if (op == "/") {
    if (!numbers) type_error(unsupported("/", a, b));
    if (b.as_double() == 0) throw JinjaError("division by zero");
    return Value(a.as_double() / b.as_double());
  }
  if (op == "//" || op == "%") {
    if (op == "%" && a.is_string()) {
      const std::string s = percent_format(a.str(), b);
      charge(s.size());
      return Value(s);
    }
    if (!numbers) type_error(unsupported(op, a, b));
    if (ints) {
      if (b.as_int() == 0) throw JinjaError("integer division or modulo by zero");
      return Value(op == "//" ? floor_div(a.as_int(), b.as_int())
                              : floor_mod(a.as_int(), b.as_int()));
    }
    const double x = a.as_double();
    const double y = b.as_double();
    if (y == 0) throw JinjaError(op == "//" ? "float floor division by zero" : "float modulo");
    // CPython's float_floor_div / float_rem.
    double m = std::fmod(x, y);
    double div = (x - m) / y;
    if (m != 0) {
      if ((y < 0) != (m < 0)) {
        m += y;
        div -= 1.0;
      }
    } else {
      m = std::copysign(0.0, y);
    }
    if (op == "%") return Value(m);
    if (div == 0) return Value(std::copysign(0.0, x / y));
    double floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
    return Value(floordiv);
  }
  if (op == "**") {
    if (!numbers) type_error(unsupported("** or pow()", a, b));
    if (ints && b.as_int() >= 0) {  // square and multiply, refusing overflow
      int64_t result = 1;
      int64_t base = a.as_int();
      bool overflow = false;
      for (int64_t e = b.as_int(); e > 0 && !overflow; e >>= 1) {
        if (e & 1) overflow = __builtin_mul_overflow(result, base, &result);
        if (e > 1 && !overflow) overflow = __builtin_mul_overflow(base, base, &base);
      }
      return Value(checked(overflow, result));
    }
    if (a.as_double() == 0 && b.as_double() < 0) {
      throw JinjaError("0.0 cannot be raised to a negative power");
    }
    return Value(std::pow(a.as_double(), b.as_double()));
  }
  type_error("unknown operator " + op);
}

bool Interpreter::eval_compare(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return py_equal(a, b);
  if (op == "!=") return !py_equal(a, b);
  if (op == "in") return contains(b, a);
  if (op == "notin") return !contains(b, a);
  try {
    if (op == "<") return py_less(a, b);
    if (op == ">") return py_less(b, a);
    if (op == "<=") return !py_less(b, a);
    return !py_less(a, b);  // >=
  } catch (const JinjaError& e) {
    std::string message = e.what();
    const size_t quote = message.find("'<'");
    if (quote != std::string::npos && !a.is_undefined() && !b.is_undefined()) {
      message = fmt::format("'{}' not supported between instances of '{}' and '{}'", op,
                            a.type_name(), b.type_name());
    }
    throw JinjaError(message);
  }
}

// --- helpers ------------------------------------------------------------------------------------

ValueList iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return {};
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kDict: {
      ValueList keys;
      keys.reserve(v.dict().entries.size());
      for (const auto& entry : v.dict().entries)
        keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      ValueList chars;
      for (std::string_view c : utf8_chars(v.str()))
        chars.emplace_back(c);
      return chars;
    }
    default:
      throw JinjaError(fmt::format("'{}' object is not iterable", v.type_name()));
  }
}

bool contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw JinjaError(
            fmt::format("'in <string>' requires string as left operand, not {}", item.type_name()));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (py_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if ((item.is_list() && !item.is_tuple()) || item.is_dict() || item.is_namespace()) {
        throw JinjaError(fmt::format("unhashable type: '{}'", item.type_name()));
      }
      return item.is_string() && container.dict().find(item.str()) != nullptr;
    default:
      throw JinjaError(fmt::format("argument of type '{}' is not iterable", container.type_name()));
  }
}

std::string percent_format(const std::string& format, const Value& args) {
  ValueList values = args.is_tuple() ? args.items() : ValueList{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) throw JinjaError("incomplete format");
    const Value* arg = nullptr;
    if (format[i] == '(') {
      const size_t close = format.find(')', i);
      if (close == std::string::npos || !args.is_dict())
        throw JinjaError("format requires a mapping");
      arg = args.dict().find(format.substr(i + 1, close - i - 1));
      if (arg == nullptr) throw JinjaError("KeyError: " + format.substr(i + 1, close - i - 1));
      i = close + 1;
      if (i >= format.size()) throw JinjaError("incomplete format");
    }
    int precision = -1;
    if (format[i] == '.') {
      precision = 0;
      while (++i < format.size() && format[i] >= '0' && format[i] <= '9')
        precision = precision * 10 + (format[i] - '0');
      if (i >= format.size()) throw JinjaError("incomplete format");
    }
    const char conv = format[i];
    if (conv == '%') {
      out += '%';
      continue;
    }
    if (arg == nullptr) {
      if (next >= values.size()) throw JinjaError("not enough arguments for format string");
      arg = &values[next++];
    }
    switch (conv) {
      case 's':
        out += arg->to_string();
        break;
      case 'r':
        out += arg->repr();
        break;
      case 'd':
      case 'i':
        if (!arg->is_number()) {
          throw JinjaError(
              fmt::format("%{} format: a real number is required, not {}", conv, arg->type_name()));
        }
        out += std::to_string(arg->is_int() ? arg->as_int()
                                            : static_cast<int64_t>(std::trunc(arg->as_double())));
        break;
      case 'f':
        if (!arg->is_number()) throw JinjaError("must be real number, not " + arg->type_name());
        out += fmt::format("{:.{}f}", arg->as_double(), precision < 0 ? 6 : precision);
        break;
      case 'x':
        if (!arg->is_int()) throw JinjaError("%x format: an integer is required");
        out += fmt::format("{:x}", arg->as_int());
        break;
      default:
        throw JinjaError(fmt::format("unsupported format character '{}'", conv));
    }
  }
  if (next < values.size() && !args.is_dict()) {
    throw JinjaError("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace kvserve::tokenizer::jinja

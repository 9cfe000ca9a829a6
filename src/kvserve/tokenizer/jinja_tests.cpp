// jinja2's builtin tests (jinja2/tests.py) and the argument binder of filters and methods.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_interpreter.h"

namespace kvserve::tokenizer::jinja {
namespace {

using TestFn = bool (*)(Interpreter&, const Value&, CallArgs&);

// --- tests --------------------------------------------------------------------------------------

const Value& test_arg(CallArgs& args, const char* name) {
  if (args.positional.empty()) {
    if (!args.keyword.empty()) return args.keyword[0].second;
    throw JinjaError(fmt::format("test '{}' needs an argument", name));
  }
  return args.positional[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) {
  return !v.is_undefined();
}
bool t_undefined(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined();
}
bool t_none(Interpreter&, const Value& v, CallArgs&) {
  return v.is_none();
}
bool t_boolean(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool();
}
bool t_true(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool() && v.as_int() != 0;
}
bool t_false(Interpreter&, const Value& v, CallArgs&) {
  return v.is_bool() && v.as_int() == 0;
}
bool t_integer(Interpreter&, const Value& v, CallArgs&) {
  return v.kind() == Value::Kind::kInt;
}
bool t_float(Interpreter&, const Value& v, CallArgs&) {
  return v.kind() == Value::Kind::kFloat;
}
bool t_number(Interpreter&, const Value& v, CallArgs&) {
  return v.is_number();
}
bool t_string(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string();
}
bool t_mapping(Interpreter&, const Value& v, CallArgs&) {
  return v.is_dict();
}
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_function() || v.is_undefined();
}
// Python's value % n == r over ints and floats.
bool modulo_is(const Value& v, const Value& n, int64_t r, const char* test) {
  if (!v.is_number() || !n.is_number()) {
    throw JinjaError(fmt::format("{}: unsupported operand type(s) for %: '{}' and '{}'", test,
                                 v.type_name(), n.type_name()));
  }
  if (v.is_int() && n.is_int()) {
    if (n.as_int() == 0) throw JinjaError("integer division or modulo by zero");
    int64_t m = n.as_int() == -1 ? 0 : v.as_int() % n.as_int();
    if (m != 0 && ((m < 0) != (n.as_int() < 0))) m += n.as_int();
    return m == r;
  }
  if (n.as_double() == 0) throw JinjaError("float modulo");
  double m = std::fmod(v.as_double(), n.as_double());
  if (m != 0 && ((m < 0) != (n.as_double() < 0))) m += n.as_double();
  return m == static_cast<double>(r);
}
bool t_odd(Interpreter&, const Value& v, CallArgs&) {
  return modulo_is(v, Value(int64_t{2}), 1, "odd");
}
bool t_even(Interpreter&, const Value& v, CallArgs&) {
  return modulo_is(v, Value(int64_t{2}), 0, "even");
}
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& args) {
  return modulo_is(v, test_arg(args, "divisibleby"), 0, "divisibleby");
}
bool t_eq(Interpreter&, const Value& v, CallArgs& args) {
  return py_equal(v, test_arg(args, "eq"));
}
bool t_ne(Interpreter&, const Value& v, CallArgs& args) {
  return !py_equal(v, test_arg(args, "ne"));
}
bool t_lt(Interpreter&, const Value& v, CallArgs& args) {
  return py_less(v, test_arg(args, "lt"));
}
bool t_le(Interpreter&, const Value& v, CallArgs& args) {
  return !py_less(test_arg(args, "le"), v);
}
bool t_gt(Interpreter&, const Value& v, CallArgs& args) {
  return py_less(test_arg(args, "gt"), v);
}
bool t_ge(Interpreter&, const Value& v, CallArgs& args) {
  return !py_less(v, test_arg(args, "ge"));
}
bool t_in(Interpreter&, const Value& v, CallArgs& args) {
  return contains(test_arg(args, "in"), v);
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& args) {
  const Value& other = test_arg(args, "sameas");
  if (v.kind() != other.kind()) return false;
  if (v.is_none() || v.is_undefined()) return v.is_none();  // distinct Undefined objects
  if (v.is_bool()) return v.as_int() == other.as_int();
  if (v.is_list()) return &v.items() == &other.items();
  if (v.is_dict() || v.is_namespace()) return &v.dict() == &other.dict();
  if (v.is_function()) return &v.function() == &other.function();
  return py_equal(v, other);  // small ints and interned strings: CPython happens to agree
}
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  const std::string s = v.str();
  return unicode_lower(s) == s && unicode_upper(s) != s;
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  if (!v.is_string()) return false;
  const std::string s = v.str();
  return unicode_upper(s) == s && unicode_lower(s) != s;
}
bool t_escaped(Interpreter&, const Value&, CallArgs&) {
  return false;
}
bool t_filter(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && is_known_filter(v.str());
}
bool t_test(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && is_known_test(v.str());
}

const std::map<std::string_view, TestFn>& tests() {
  static const std::map<std::string_view, TestFn> table = {
      {"!=", t_ne},
      {"<", t_lt},
      {"<=", t_le},
      {"==", t_eq},
      {">", t_gt},
      {">=", t_ge},
      {"boolean", t_boolean},
      {"callable", t_callable},
      {"defined", t_defined},
      {"divisibleby", t_divisibleby},
      {"eq", t_eq},
      {"equalto", t_eq},
      {"escaped", t_escaped},
      {"even", t_even},
      {"false", t_false},
      {"filter", t_filter},
      {"float", t_float},
      {"ge", t_ge},
      {"greaterthan", t_gt},
      {"gt", t_gt},
      {"in", t_in},
      {"integer", t_integer},
      {"iterable", t_iterable},
      {"le", t_le},
      {"lessthan", t_lt},
      {"lower", t_lower},
      {"lt", t_lt},
      {"mapping", t_mapping},
      {"ne", t_ne},
      {"none", t_none},
      {"number", t_number},
      {"odd", t_odd},
      {"sameas", t_sameas},
      {"sequence", t_sequence},
      {"string", t_string},
      {"test", t_test},
      {"true", t_true},
      {"undefined", t_undefined},
      {"upper", t_upper},
  };
  return table;
}

const std::set<std::string_view> kOneArgumentTests = {
    "!=", "<",           "<=", "==", ">",  ">=",       "divisibleby", "eq", "equalto",
    "ge", "greaterthan", "gt", "in", "le", "lessthan", "lt",          "ne", "sameas"};

}  // namespace

ArgBinder::ArgBinder(std::string_view function, CallArgs& args,
                     std::initializer_list<std::string_view> names)
    : bound_(names.size(), nullptr) {
  if (args.positional.size() > names.size()) {
    throw JinjaError(fmt::format("{}() takes at most {} argument(s) ({} given)", function,
                                 names.size(), args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i)
    bound_[i] = &args.positional[i];
  for (const auto& [key, value] : args.keyword) {
    const auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) {
      throw JinjaError(fmt::format("{}() got an unexpected keyword argument '{}'", function, key));
    }
    const auto index = static_cast<size_t>(it - names.begin());
    if (bound_[index] != nullptr) {
      throw JinjaError(fmt::format("{}() got multiple values for argument '{}'", function, key));
    }
    bound_[index] = &value;
  }
}

bool is_known_test(std::string_view name) {
  return tests().contains(name);
}

bool apply_test(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  in.step();
  const auto it = tests().find(name);
  if (it == tests().end()) throw JinjaError(fmt::format("No test named '{}'.", name));
  const size_t given = args.positional.size() + args.keyword.size();
  const size_t allowed = kOneArgumentTests.contains(name) ? 1 : 0;
  if (given > allowed) {
    throw JinjaError(fmt::format("test_{}() takes {} positional argument(s) but {} were given",
                                 name, allowed + 1, given + 1));
  }
  return it->second(in, input, args);
}

}  // namespace kvserve::tokenizer::jinja

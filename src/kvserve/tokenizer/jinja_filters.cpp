// jinja2's builtin filters and tests (jinja2/filters.py, jinja2/tests.py), with transformers'
// tojson (json.dumps with ensure_ascii=False, indent, separators, sort_keys).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_interpreter.h"

namespace kvserve::tokenizer::jinja {
namespace {

using FilterFn = Value (*)(Interpreter&, const Value&, CallArgs&);

// jinja2's soft_str: strings as they are, anything else through str().
std::string soft_str(const Value& v) {
  return v.is_string() ? v.str() : v.to_string();
}

std::string ascii_lower(std::string s) {
  for (char& c : s) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return s;
}
std::string ascii_upper(std::string s) {
  for (char& c : s) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

size_t length_of(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kUndefined:
      return 0;
    case Value::Kind::kString:
      return utf8_length(v.str());
    case Value::Kind::kList:
      return v.items().size();
    case Value::Kind::kDict:
      return v.dict().entries.size();
    default:
      throw JinjaError(fmt::format("object of type '{}' has no len()", v.type_name()));
  }
}

// jinja2's make_attrgetter: "a.b.0" looked up item by item (integers as indexes).
Value get_path(Interpreter& in, const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (v.is_undefined()) throw JinjaError(v.undefined_message());
    const bool index = !part.empty() && std::all_of(part.begin(), part.end(),
                                                    [](char c) { return c >= '0' && c <= '9'; });
    if (index && (v.is_list() || v.is_string())) {
      const ValueList items = iterate(v);
      const size_t i = std::stoul(part);
      v = i < items.size()
              ? items[i]
              : Value::undefined(fmt::format("{} has no element {}", v.object_type_repr(), part));
    } else if (v.is_dict() && v.dict().find(part) != nullptr) {
      v = *v.dict().find(part);
    } else {
      v = get_attribute(v, part);
    }
    in.step();
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(ascii_lower(v.str()));
  return v;
}

ValueList sorted(Interpreter& in, ValueList items, bool reverse, bool case_sensitive,
                 const Value* attribute) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    Value key = attribute != nullptr ? get_path(in, item, soft_str(*attribute)) : item;
    keyed.emplace_back(sort_key(key, case_sensitive), std::move(item));
  }
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? py_less(b.first, a.first) : py_less(a.first, b.first);
  });
  ValueList out;
  for (auto& [key, item] : keyed)
    out.push_back(std::move(item));
  return out;
}

// --- filters ------------------------------------------------------------------------------------

Value f_abs(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("abs", args, {});
  if (v.is_int()) return Value(v.as_int() < 0 ? -v.as_int() : v.as_int());
  if (v.is_number()) return Value(std::fabs(v.as_double()));
  throw JinjaError(fmt::format("bad operand type for abs(): '{}'", v.type_name()));
}

Value f_attr(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder b("attr", args, {"name"});
  if (!b.has(0)) throw JinjaError("attr() missing argument 'name'");
  if (v.is_undefined()) throw JinjaError(v.undefined_message());
  return get_attribute(v, soft_str(*b.get(0)));
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("capitalize", args, {});
  std::string s = ascii_lower(soft_str(v));
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return Value(std::move(s));
}

Value f_length(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("length", args, {});
  return Value(static_cast<int64_t>(length_of(v)));
}

Value f_default(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder b("default", args, {"default_value", "boolean"});
  const Value fallback = b.get_or(0, Value(""));
  const bool boolean = b.get_or(1, Value(false)).truthy();
  if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
  return v;
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!v.is_dict()) throw JinjaError("dictsort: you can only sort by either a mapping");
  const bool by_value = b.has(1) && soft_str(*b.get(1)) == "value";
  ValueList pairs;
  for (const auto& [key, value] : v.dict().entries)
    pairs.push_back(Value::list({Value(key), value}, true));
  const Value attr(by_value ? "1" : "0");
  return Value::list(sorted(in, std::move(pairs), b.get_or(2, Value(false)).truthy(),
                            b.get_or(0, Value(false)).truthy(), &attr));
}

Value f_escape(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("escape", args, {});
  std::string out;
  for (char c : soft_str(v)) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return Value(std::move(out));
}

Value f_first(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("first", args, {});
  const ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("last", args, {});
  const ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_int(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder b("int", args, {"default", "base"});
  const Value fallback = b.get_or(0, Value(int64_t{0}));
  if (v.is_undefined()) throw JinjaError(v.undefined_message());
  if (v.is_int()) return Value(v.as_int());
  if (v.kind() == Value::Kind::kFloat) {
    if (!std::isfinite(v.as_double())) return fallback;
    return Value(static_cast<int64_t>(std::trunc(v.as_double())));
  }
  if (v.is_string()) {
    int64_t i = 0;
    if (parse_python_int(v.str(), b.get_or(1, Value(int64_t{10})).as_int(), i)) return Value(i);
    double d = 0;
    if (parse_python_float(v.str(), d) && std::isfinite(d))
      return Value(static_cast<int64_t>(std::trunc(d)));
  }
  return fallback;
}

Value f_float(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder b("float", args, {"default"});
  if (v.is_undefined()) throw JinjaError(v.undefined_message());
  if (v.is_number()) return Value(v.as_double());
  double d = 0;
  if (v.is_string() && parse_python_float(v.str(), d)) return Value(d);
  return b.get_or(0, Value(0.0));
}

Value f_format(Interpreter& in, const Value& v, CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    throw JinjaError("can't handle positional and keyword arguments at the same time");
  }
  Value params;
  if (!args.keyword.empty()) {
    Dict d;
    for (auto& [key, value] : args.keyword)
      d.set(key, value);
    params = Value::dict(std::move(d));
  } else {
    params = Value::list(args.positional, true);
  }
  std::string s = percent_format(soft_str(v), params);
  in.charge(s.size());
  return Value(std::move(s));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("indent", args, {"width", "first", "blank"});
  const Value width = b.get_or(0, Value(int64_t{4}));
  const std::string pad =
      width.is_string()
          ? width.str()
          : std::string(static_cast<size_t>(std::max<int64_t>(0, width.as_int())), ' ');
  if (v.is_undefined()) throw JinjaError(v.undefined_message());
  if (v.is_list()) throw JinjaError("'list' object has no attribute 'splitlines'");
  if (!v.is_string()) {
    throw JinjaError(
        fmt::format("unsupported operand type(s) for +=: '{}' and 'str'", v.type_name()));
  }
  const std::vector<std::string> lines = splitlines(v.str() + "\n");
  std::string out;
  if (b.get_or(2, Value(false)).truthy()) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + pad;
      out += lines[i];
    }
  } else if (!lines.empty()) {
    out = lines[0];
    for (size_t i = 1; i < lines.size(); ++i)
      out += "\n" + (lines[i].empty() ? "" : pad + lines[i]);
  }
  if (b.get_or(1, Value(false)).truthy()) out = pad + out;
  in.charge(out.size());
  return Value(std::move(out));
}

Value f_items(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("items", args, {});
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) throw JinjaError("Can only get item pairs from a mapping.");
  ValueList pairs;
  for (const auto& [key, value] : v.dict().entries)
    pairs.push_back(Value::list({Value(key), value}, true));
  return Value::list(std::move(pairs));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("join", args, {"d", "attribute"});
  const std::string sep = soft_str(b.get_or(0, Value("")));
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += sep;
    first = false;
    out += soft_str(b.has(1) ? get_path(in, item, soft_str(*b.get(1))) : item);
    in.charge(out.size());
  }
  return Value(std::move(out));
}

Value f_list(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("list", args, {});
  return Value::list(iterate(v));
}

Value f_lower(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("lower", args, {});
  return Value(unicode_lower(soft_str(v)));
}

Value f_upper(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("upper", args, {});
  return Value(unicode_upper(soft_str(v)));
}

Value f_title(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("title", args, {});
  std::string s = soft_str(v);
  bool in_word = false;
  for (char& c : s) {
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (letter) {
      c = in_word ? ascii_lower(std::string(1, c))[0] : ascii_upper(std::string(1, c))[0];
    }
    in_word = letter || (c >= '0' && c <= '9') || static_cast<unsigned char>(c) >= 0x80;
  }
  return Value(std::move(s));
}

Value f_map(Interpreter& in, const Value& v, CallArgs& args) {
  ValueList out;
  if (!v.truthy()) return Value::list({});  // jinja2: `if value:` before anything else
  if (args.positional.empty()) {
    const Value* attribute = nullptr;
    Value fallback = Value::none();
    for (auto& [key, value] : args.keyword) {
      if (key == "attribute") {
        attribute = &value;
      } else if (key == "default") {
        fallback = value;
      } else {
        throw JinjaError(fmt::format("Unexpected keyword argument '{}'", key));
      }
    }
    if (attribute == nullptr) throw JinjaError("map requires a filter argument");
    for (const Value& item : iterate(v)) {
      Value x = get_path(in, item, soft_str(*attribute));
      out.push_back(x.is_undefined() && !fallback.is_none() ? fallback : x);
    }
    return Value::list(std::move(out));
  }
  const std::string name = soft_str(args.positional[0]);
  if (!is_known_filter(name)) throw JinjaError(fmt::format("No filter named '{}'.", name));
  for (const Value& item : iterate(v)) {
    CallArgs rest{{args.positional.begin() + 1, args.positional.end()}, args.keyword};
    out.push_back(apply_filter(in, name, item, rest));
  }
  return Value::list(std::move(out));
}

Value min_max(Interpreter& in, const Value& v, CallArgs& args, bool max) {
  ArgBinder b(max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const ValueList items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  const bool cs = b.get_or(0, Value(false)).truthy();
  const auto key = [&](const Value& x) {
    return sort_key(b.has(1) ? get_path(in, x, soft_str(*b.get(1))) : x, cs);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    if (max ? py_less(key(items[best]), key(items[i])) : py_less(key(items[i]), key(items[best])))
      best = i;
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, CallArgs& args) {
  return min_max(in, v, args, true);
}
Value f_min(Interpreter& in, const Value& v, CallArgs& args) {
  return min_max(in, v, args, false);
}

Value select_impl(Interpreter& in, const Value& v, CallArgs& args, bool reject, bool by_attr) {
  ValueList out;
  if (!v.truthy()) return Value::list({});
  size_t off = 0;
  std::string attr;
  if (by_attr) {
    if (args.positional.empty()) throw JinjaError("Missing parameter for attribute name");
    attr = soft_str(args.positional[0]);
    off = 1;
  }
  std::string test;
  if (args.positional.size() > off) {
    test = soft_str(args.positional[off]);
    if (!is_known_test(test)) throw JinjaError(fmt::format("No test named '{}'.", test));
  }
  for (const Value& item : iterate(v)) {
    const Value x = by_attr ? get_path(in, item, attr) : item;
    bool pass = false;
    if (test.empty()) {
      pass = x.truthy();
    } else {
      CallArgs rest{
          {args.positional.begin() + static_cast<std::ptrdiff_t>(off) + 1, args.positional.end()},
          args.keyword};
      pass = apply_test(in, test, x, rest);
    }
    if (pass != reject) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& args) {
  return select_impl(in, v, args, false, false);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& args) {
  return select_impl(in, v, args, true, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& args) {
  return select_impl(in, v, args, false, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& args) {
  return select_impl(in, v, args, true, true);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("replace", args, {"old", "new", "count"});
  if (!b.has(0) || !b.has(1)) throw JinjaError("replace() missing required arguments");
  CallArgs call{{Value(soft_str(*b.get(0))), Value(soft_str(*b.get(1)))}, {}};
  if (b.has(2) && !b.get(2)->is_none()) call.positional.push_back(*b.get(2));
  return in.call(get_attribute(Value(soft_str(v)), "replace"), call);
}

Value f_reverse(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("reverse", args, {});
  if (v.is_undefined()) throw JinjaError(v.undefined_message());
  ValueList items = iterate(v);
  std::reverse(items.begin(), items.end());
  if (!v.is_string()) return Value::list(std::move(items));
  std::string out;
  for (const Value& c : items)
    out += c.str();
  return Value(std::move(out));
}

Value f_round(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder b("round", args, {"precision", "method"});
  if (!v.is_number())
    throw JinjaError(fmt::format("type {} doesn't define __round__", v.type_name()));
  const int64_t precision = b.get_or(0, Value(int64_t{0})).as_int();
  const std::string method = soft_str(b.get_or(1, Value("common")));
  if (v.is_int() && method == "common") return Value(v.as_int());  // round(int) is an int
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = v.as_double() * scale;
  double r = 0;
  if (method == "common") {
    r = std::nearbyint(x);  // Python's round(): ties to even
  } else if (method == "ceil") {
    r = std::ceil(x);
  } else if (method == "floor") {
    r = std::floor(x);
  } else {
    throw JinjaError("method must be common, ceil or floor");
  }
  return Value(r / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("safe", args, {});
  return Value(soft_str(v));
}

Value f_sort(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("sort", args, {"reverse", "case_sensitive", "attribute"});
  return Value::list(sorted(in, iterate(v), b.get_or(0, Value(false)).truthy(),
                            b.get_or(1, Value(false)).truthy(), b.get(2)));
}

Value f_string(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder("string", args, {});
  return Value(soft_str(v));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("sum", args, {"attribute", "start"});
  Value total = b.get_or(1, Value(int64_t{0}));
  for (const Value& item : iterate(v)) {
    const Value x = b.has(0) ? get_path(in, item, soft_str(*b.get(0))) : item;
    if (!total.is_number() || !x.is_number()) {
      throw JinjaError(fmt::format("unsupported operand type(s) for +: '{}' and '{}'",
                                   total.type_name(), x.type_name()));
    }
    total = total.is_int() && x.is_int() ? Value(total.as_int() + x.as_int())
                                         : Value(total.as_double() + x.as_double());
  }
  return total;
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonOptions o;
  o.ensure_ascii = b.get_or(0, Value(false)).truthy();
  const Value indent = b.get_or(1, Value::none());
  if (indent.is_int()) {
    o.has_indent = true;
    o.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent.as_int())), ' ');
  } else if (indent.is_string()) {
    o.has_indent = true;
    o.indent = indent.str();
  } else if (!indent.is_none()) {
    throw JinjaError("tojson: indent must be an int, a string or None");
  }
  if (o.has_indent) o.item_separator = ",";
  const Value separators = b.get_or(2, Value::none());
  if (separators.is_list() && separators.items().size() == 2 && separators.items()[0].is_string() &&
      separators.items()[1].is_string()) {
    o.item_separator = separators.items()[0].str();
    o.key_separator = separators.items()[1].str();
  } else if (!separators.is_none()) {
    throw JinjaError("tojson: separators must be a pair of strings");
  }
  o.sort_keys = b.get_or(3, Value(false)).truthy();
  std::string s = to_python_json(v, o);
  in.charge(s.size());
  return Value(std::move(s));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& args) {
  ArgBinder b("trim", args, {"chars"});
  const Value chars = b.get_or(0, Value::none());
  const std::string chars_text = chars.is_none() ? std::string() : soft_str(chars);
  return Value(python_strip(soft_str(v), chars.is_none() ? nullptr : &chars_text, true, true));
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& args) {
  ArgBinder b("unique", args, {"case_sensitive", "attribute"});
  const bool cs = b.get_or(0, Value(false)).truthy();
  ValueList out;
  ValueList seen;
  for (const Value& item : iterate(v)) {
    const Value key = sort_key(b.has(1) ? get_path(in, item, soft_str(*b.get(1))) : item, cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
    in.step();
  }
  return Value::list(std::move(out));
}

const std::map<std::string_view, FilterFn>& filters() {
  static const std::map<std::string_view, FilterFn> table = {
      {"abs", f_abs},
      {"attr", f_attr},
      {"capitalize", f_capitalize},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"forceescape", f_escape},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", f_list},
      {"lower", f_lower},
      {"map", f_map},
      {"max", f_max},
      {"min", f_min},
      {"reject", f_reject},
      {"rejectattr", f_rejectattr},
      {"replace", f_replace},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", f_safe},
      {"select", f_select},
      {"selectattr", f_selectattr},
      {"sort", f_sort},
      {"string", f_string},
      {"sum", f_sum},
      {"title", f_title},
      {"tojson", f_tojson},
      {"trim", f_trim},
      {"unique", f_unique},
      {"upper", f_upper},
  };
  return table;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filters().contains(name);
}

Value apply_filter(Interpreter& in, std::string_view name, const Value& input, CallArgs& args) {
  in.step();
  const auto it = filters().find(name);
  if (it == filters().end()) throw JinjaError(fmt::format("No filter named '{}'.", name));
  return it->second(in, input, args);
}

}  // namespace kvserve::tokenizer::jinja

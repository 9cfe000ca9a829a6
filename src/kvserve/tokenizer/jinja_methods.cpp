// Attribute access (jinja2's sandboxed getattr), the Python methods of str, dict and list that
// chat templates call, and the globals transformers provides.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_interpreter.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer::jinja {
namespace {

using Method = Value (*)(Interpreter&, const Value& self, CallArgs&);

const std::string& str_arg(const Value* v, const char* method, const char* what = "str") {
  if (v == nullptr || !v->is_string()) {
    throw JinjaError(fmt::format("{}() argument must be {}, not {}", method, what,
                                 v == nullptr ? "nothing" : v->type_name()));
  }
  return v->str();
}

bool is_ws_at(std::string_view s, size_t pos, size_t& len) {
  len = utf8_sequence_length(s, pos);
  if (len == 0) {
    len = 1;
    return false;
  }
  size_t p = pos;
  return python_isspace(decode_utf8(s, p));
}

// str.split / str.rsplit.
ValueList split(const std::string& s, const Value* sep_value, int64_t maxsplit, bool from_right) {
  ValueList parts;
  if (sep_value == nullptr || sep_value->is_none()) {
    // Runs of whitespace; no empty strings.
    std::vector<std::pair<size_t, size_t>> words;
    size_t pos = 0;
    while (pos < s.size()) {
      size_t len = 0;
      if (is_ws_at(s, pos, len)) {
        pos += len;
        continue;
      }
      const size_t start = pos;
      while (pos < s.size() && !is_ws_at(s, pos, len))
        pos += len;
      words.emplace_back(start, pos);
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words)
        parts.emplace_back(s.substr(b, e - b));
      return parts;
    }
    const auto n = static_cast<size_t>(maxsplit);
    if (!from_right) {
      for (size_t i = 0; i < n; ++i)
        parts.emplace_back(s.substr(words[i].first, words[i].second - words[i].first));
      const std::string rest = s.substr(words[n].first);
      parts.emplace_back(python_strip(rest, nullptr, false, true));
      return parts;
    }
    const size_t first = words.size() - n;
    const std::string head = s.substr(0, words[first - 1].second);
    parts.emplace_back(python_strip(head, nullptr, true, false));
    for (size_t i = first; i < words.size(); ++i)
      parts.emplace_back(s.substr(words[i].first, words[i].second - words[i].first));
    return parts;
  }
  const std::string& sep = str_arg(sep_value, "split");
  if (sep.empty()) throw JinjaError("empty separator");
  std::vector<size_t> cuts;  // positions of separators used
  if (!from_right) {
    for (size_t p = s.find(sep); p != std::string::npos; p = s.find(sep, p + sep.size())) {
      if (maxsplit >= 0 && cuts.size() >= static_cast<size_t>(maxsplit)) break;
      cuts.push_back(p);
    }
  } else {
    size_t end = s.size();
    while (end >= sep.size()) {
      if (maxsplit >= 0 && cuts.size() >= static_cast<size_t>(maxsplit)) break;
      const size_t p = s.rfind(sep, end - sep.size());
      if (p == std::string::npos) break;
      cuts.push_back(p);
      end = p;
    }
    std::reverse(cuts.begin(), cuts.end());
  }
  size_t start = 0;
  for (size_t p : cuts) {
    parts.emplace_back(s.substr(start, p - start));
    start = p + sep.size();
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

// Python's optional start/end arguments of startswith/endswith/find/count, in code points.
std::string window(const std::string& s, const ArgBinder& b, size_t start_index) {
  if (!b.has(start_index) && !b.has(start_index + 1)) return s;
  const std::vector<std::string_view> chars = utf8_chars(s);
  const auto n = static_cast<int64_t>(chars.size());
  const auto bound = [&](size_t i, int64_t fallback) {
    if (!b.has(i) || b.get(i)->is_none()) return fallback;
    if (!b.get(i)->is_int()) throw JinjaError("slice indices must be integers or None");
    int64_t v = b.get(i)->as_int();
    if (v < 0) v = std::max<int64_t>(0, v + n);
    return std::min(v, n);
  };
  const int64_t begin = bound(start_index, 0);
  const int64_t end = bound(start_index + 1, n);
  std::string out;
  for (int64_t i = begin; i < end; ++i)
    out += chars[static_cast<size_t>(i)];
  return out;
}

Value affix(const Value& self, CallArgs& args, bool prefix) {
  const char* name = prefix ? "startswith" : "endswith";
  ArgBinder b(name, args, {"prefix", "start", "end"});
  const std::string s = window(self.str(), b, 1);
  if (!b.has(0)) throw JinjaError(fmt::format("{}() takes at least 1 argument (0 given)", name));
  ValueList options = b.get(0)->is_list() ? b.get(0)->items() : ValueList{*b.get(0)};
  for (const Value& option : options) {
    if (!option.is_string()) {
      throw JinjaError(fmt::format("{} first arg must be str or a tuple of str, not {}", name,
                                   option.type_name()));
    }
    if (prefix ? s.starts_with(option.str()) : s.ends_with(option.str())) return Value(true);
  }
  return Value(false);
}

std::string map_ascii(std::string s, int mode) {  // 0 lower, 1 upper, 2 swapcase
  for (char& c : s) {
    const bool lower = c >= 'a' && c <= 'z';
    const bool upper = c >= 'A' && c <= 'Z';
    if (upper && (mode == 0 || mode == 2)) c = static_cast<char>(c - 'A' + 'a');
    if (lower && (mode == 1 || mode == 2)) c = static_cast<char>(c - 'a' + 'A');
  }
  return s;
}

Value str_method(Interpreter& in, const std::string& name, const Value& self, CallArgs& args) {
  const std::string& s = self.str();
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    ArgBinder b(name, args, {"chars"});
    const Value* chars = b.has(0) && !b.get(0)->is_none() ? b.get(0) : nullptr;
    const std::string* set = chars != nullptr ? &str_arg(chars, name.c_str()) : nullptr;
    return Value(python_strip(s, set, name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    ArgBinder b(name, args, {"sep", "maxsplit"});
    const int64_t maxsplit = b.has(1) ? b.get(1)->as_int() : -1;
    ValueList parts = split(s, b.get(0), maxsplit, name == "rsplit");
    in.charge(s.size() + parts.size() * sizeof(Value));
    return Value::list(std::move(parts));
  }
  if (name == "splitlines") {
    ArgBinder b(name, args, {"keepends"});
    ValueList lines;
    size_t start = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\n' && s[i] != '\r') continue;
      size_t end = i;
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      lines.emplace_back(
          s.substr(start, (b.get_or(0, Value(false)).truthy() ? i + 1 : end) - start));
      start = i + 1;
    }
    if (start < s.size()) lines.emplace_back(s.substr(start));
    return Value::list(std::move(lines));
  }
  if (name == "startswith" || name == "endswith") return affix(self, args, name == "startswith");
  if (name == "upper" || name == "lower" || name == "swapcase") {
    ArgBinder b(name, args, {});
    if (name == "lower") return Value(unicode_lower(s));
    if (name == "upper") return Value(unicode_upper(s));
    return Value(map_ascii(s, 2));
  }
  if (name == "title" || name == "capitalize") {
    return apply_filter(in, name, self, args);
  }
  if (name == "replace") {
    ArgBinder b(name, args, {"old", "new", "count"});
    const std::string& from = str_arg(b.get(0), "replace");
    const std::string& to = str_arg(b.get(1), "replace");
    int64_t count = b.has(2) ? b.get(2)->as_int() : -1;
    std::string out;
    if (from.empty()) {  // inserts `to` around every character
      const std::vector<std::string_view> chars = utf8_chars(s);
      for (size_t i = 0; i <= chars.size(); ++i) {
        if (count < 0 || static_cast<int64_t>(i) < count) out += to;
        if (i < chars.size()) out += chars[i];
        in.charge(to.size() + 4);
      }
      return Value(std::move(out));
    }
    size_t start = 0;
    for (size_t p = s.find(from); p != std::string::npos && count != 0; p = s.find(from, start)) {
      out.append(s, start, p - start);
      out += to;
      start = p + from.size();
      --count;
      in.charge(to.size());
    }
    out.append(s, start);
    in.charge(out.size());
    return Value(std::move(out));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    ArgBinder b(name, args, {"sub", "start", "end"});
    const std::string& sub = str_arg(b.get(0), name.c_str());
    const std::string w = window(s, b, 1);
    if (name == "count") {
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(w) + 1));
      int64_t n = 0;
      for (size_t p = w.find(sub); p != std::string::npos; p = w.find(sub, p + sub.size()))
        ++n;
      return Value(n);
    }
    const size_t p = name[0] == 'r' ? w.rfind(sub) : w.find(sub);
    if (p == std::string::npos) {
      if (name == "index" || name == "rindex") throw JinjaError("substring not found");
      return Value(int64_t{-1});
    }
    int64_t offset = 0;
    if (b.has(1) && b.get(1)->is_int()) {
      int64_t start = b.get(1)->as_int();
      const auto n = static_cast<int64_t>(utf8_length(s));
      offset = start < 0 ? std::max<int64_t>(0, start + n) : std::min(start, n);
    }
    return Value(offset + static_cast<int64_t>(utf8_length(w.substr(0, p))));
  }
  if (name == "join") {
    ArgBinder b(name, args, {"iterable"});
    if (!b.has(0)) throw JinjaError("join() takes exactly one argument (0 given)");
    std::string out;
    size_t i = 0;
    for (const Value& item : iterate(*b.get(0))) {
      if (!item.is_string()) {
        throw JinjaError(
            fmt::format("sequence item {}: expected str instance, {} found", i, item.type_name()));
      }
      if (i++ > 0) out += s;
      out += item.str();
      in.charge(out.size());
    }
    return Value(std::move(out));
  }
  if (name.starts_with("is")) {
    ArgBinder b(name, args, {});
    if (s.empty()) return Value(false);
    bool cased = false;
    for (size_t pos = 0; pos < s.size();) {
      size_t len = 0;
      const bool ws = is_ws_at(s, pos, len);
      const char c = s[pos];
      pos += len;
      const bool digit = c >= '0' && c <= '9';
      const bool lower = c >= 'a' && c <= 'z';
      const bool upper = c >= 'A' && c <= 'Z';
      cased = cased || lower || upper;
      if (name == "isspace" && !ws) return Value(false);
      if ((name == "isdigit" || name == "isdecimal" || name == "isnumeric") && !digit)
        return Value(false);
      if (name == "isalpha" && !(lower || upper)) return Value(false);
      if (name == "isalnum" && !(lower || upper || digit)) return Value(false);
      if (name == "islower" && upper) return Value(false);
      if (name == "isupper" && lower) return Value(false);
    }
    return Value(name == "islower" || name == "isupper" ? cased : true);
  }
  if (name == "format") {
    std::string out;
    size_t next = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      if ((s[i] == '{' || s[i] == '}') && i + 1 < s.size() && s[i + 1] == s[i]) {
        out += s[i++];
        continue;
      }
      if (s[i] != '{') {
        out += s[i];
        continue;
      }
      const size_t close = s.find('}', i);
      if (close == std::string::npos) throw JinjaError("Single '{' encountered in format string");
      const std::string field = s.substr(i + 1, close - i - 1);
      const Value* v = nullptr;
      if (field.empty()) {
        if (next >= args.positional.size()) throw JinjaError("Replacement index out of range");
        v = &args.positional[next++];
      } else if (std::all_of(field.begin(), field.end(),
                             [](char c) { return c >= '0' && c <= '9'; })) {
        const size_t k = std::stoul(field);
        if (k >= args.positional.size()) throw JinjaError("Replacement index out of range");
        v = &args.positional[k];
      } else {
        for (const auto& [key, value] : args.keyword) {
          if (key == field) v = &value;
        }
        if (v == nullptr) throw JinjaError(fmt::format("KeyError: '{}'", field));
      }
      out += v->to_string();
      i = close;
    }
    in.charge(out.size());
    return Value(std::move(out));
  }
  throw JinjaError(fmt::format("'str object' has no attribute '{}'", name));
}

bool is_str_method(const std::string& name) {
  static const char* const kNames[] = {
      "strip",      "lstrip",   "rstrip",  "split",   "rsplit",    "splitlines",
      "startswith", "endswith", "upper",   "lower",   "swapcase",  "title",
      "capitalize", "replace",  "find",    "rfind",   "index",     "rindex",
      "count",      "join",     "isspace", "isdigit", "isdecimal", "isnumeric",
      "isalpha",    "isalnum",  "islower", "isupper", "format"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

Value dict_method(const std::string& name, const Value& self, CallArgs& args) {
  if (name == "get") {
    ArgBinder b(name, args, {"key", "default"});
    if (!b.has(0)) throw JinjaError("get expected at least 1 argument, got 0");
    if (b.get(0)->is_string()) {
      if (const Value* v = self.dict().find(b.get(0)->str())) return *v;
    }
    return b.get_or(1, Value::none());
  }
  ArgBinder b(name, args, {});
  ValueList out;
  for (const auto& [key, value] : self.dict().entries) {
    if (name == "keys") {
      out.emplace_back(key);
    } else if (name == "values") {
      out.push_back(value);
    } else {
      out.push_back(Value::list({Value(key), value}, true));
    }
  }
  return Value::list(std::move(out));
}

Value list_method(const std::string& name, const Value& self, CallArgs& args) {
  ArgBinder b(name, args, {"value"});
  if (!b.has(0)) throw JinjaError(fmt::format("{}() takes exactly one argument (0 given)", name));
  int64_t count = 0;
  for (size_t i = 0; i < self.items().size(); ++i) {
    if (!py_equal(self.items()[i], *b.get(0))) continue;
    if (name == "index") return Value(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") throw JinjaError(fmt::format("{} is not in list", b.get(0)->repr()));
  return Value(count);
}

Value bind(const Value& self, const std::string& name,
           Value (*method)(const std::string&, const Value&, CallArgs&)) {
  return Value::function(name, [self, name, method](Interpreter&, CallArgs& args) {
    return method(name, self, args);
  });
}

Value unsafe(const Value& self, const std::string& name) {
  return Value::undefined(
      fmt::format("access to attribute '{}' of '{}' object is unsafe.", name, self.type_name()));
}

Value no_attribute(const Value& self, const std::string& name) {
  std::string type = self.object_type_repr();
  if (self.is_namespace()) type = "jinja2.utils.Namespace object";
  return Value::undefined(fmt::format("'{}' has no attribute {}", type, python_str_repr(name)));
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name) {
  switch (object.kind()) {
    case Value::Kind::kUndefined:
      throw JinjaError(object.undefined_message());
    case Value::Kind::kString:
      if (is_str_method(name)) {
        return Value::function(name, [object, name](Interpreter& in, CallArgs& args) {
          return str_method(in, name, object, args);
        });
      }
      return no_attribute(object, name);
    case Value::Kind::kDict:
      if (name == "items" || name == "keys" || name == "values" || name == "get") {
        return bind(object, name, dict_method);
      }
      if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
          name == "clear") {
        return unsafe(object, name);
      }
      if (const Value* v = object.dict().find(name)) return *v;
      return no_attribute(object, name);
    case Value::Kind::kList:
      if (name == "index" || name == "count") return bind(object, name, list_method);
      if (!object.is_tuple() &&
          (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
           name == "remove" || name == "reverse" || name == "sort" || name == "clear")) {
        return unsafe(object, name);
      }
      return no_attribute(object, name);
    case Value::Kind::kNamespace:
      if (const Value* v = object.dict().find(name)) return *v;
      return no_attribute(object, name);
    default:
      return no_attribute(object, name);
  }
}

Dict make_globals() {
  Dict g;
  g.set("range", Value::function("range", [](Interpreter& in, CallArgs& args) {
          ArgBinder b("range", args, {"start", "stop", "step"});
          for (size_t i = 0; i < 3; ++i) {
            if (b.has(i) && !b.get(i)->is_int()) {
              throw JinjaError(fmt::format("'{}' object cannot be interpreted as an integer",
                                           b.get(i)->type_name()));
            }
          }
          if (!b.has(0)) throw JinjaError("range expected at least 1 argument, got 0");
          int64_t start = 0;
          int64_t stop = b.get(0)->as_int();
          int64_t step = 1;
          if (b.has(1)) {
            start = stop;
            stop = b.get(1)->as_int();
          }
          if (b.has(2)) step = b.get(2)->as_int();
          if (step == 0) throw JinjaError("range() arg 3 must not be zero");
          // Python's range length, charged before anything is built.
          const double span =
              (static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step);
          const double count = span <= 0 ? 0 : std::ceil(span);
          in.charge(static_cast<size_t>(std::min(count, 1e15)) * sizeof(Value));
          ValueList out;
          out.reserve(static_cast<size_t>(count));
          for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
            out.emplace_back(i);
            if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
          }
          return Value::list(std::move(out));
        }));
  g.set("namespace", Value::function("namespace", [](Interpreter& in, CallArgs& args) {
          Dict d;
          if (args.positional.size() > 1) throw JinjaError("namespace() takes at most 1 argument");
          if (!args.positional.empty()) {
            if (!args.positional[0].is_dict()) throw JinjaError("namespace() needs a mapping");
            d = args.positional[0].dict();
          }
          for (auto& [key, value] : args.keyword)
            d.set(key, value);
          Value ns = Value::make_namespace(std::move(d));
          in.track_namespace(ns);
          return ns;
        }));
  g.set("dict", Value::function("dict", [](Interpreter&, CallArgs& args) {
          Dict d;
          if (args.positional.size() > 1) throw JinjaError("dict expected at most 1 argument");
          if (!args.positional.empty()) {
            if (!args.positional[0].is_dict()) throw JinjaError("dict() needs a mapping");
            d = args.positional[0].dict();
          }
          for (auto& [key, value] : args.keyword)
            d.set(key, value);
          return Value::dict(std::move(d));
        }));
  g.set("raise_exception", Value::function("raise_exception", [](Interpreter&, CallArgs& args) {
          ArgBinder b("raise_exception", args, {"message"});
          throw JinjaError(b.has(0) ? b.get(0)->to_string() : std::string(), true);
          return Value();
        }));
  g.set("strftime_now", Value::function("strftime_now", [](Interpreter&, CallArgs& args) {
          ArgBinder b("strftime_now", args, {"format"});
          if (!b.has(0) || !b.get(0)->is_string()) throw JinjaError("strftime_now needs a format");
          const std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          char buf[512];
          const size_t n = std::strftime(buf, sizeof(buf), b.get(0)->str().c_str(), &local);
          return Value(std::string(buf, n));
        }));
  return g;
}

}  // namespace kvserve::tokenizer::jinja

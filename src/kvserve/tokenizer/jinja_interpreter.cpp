#include "kvserve/tokenizer/jinja_interpreter.h"

#include <fmt/format.h>

#include <cmath>

#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_lexer.h"

namespace kvserve::tokenizer::jinja {
namespace {

[[noreturn]] void type_error(const std::string& message) {
  throw JinjaError(message);
}

int64_t checked(bool overflow, int64_t value) {
  if (overflow) throw JinjaError("integer overflow (kvserve's template integers are 64-bit)");
  return value;
}

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

Value* Interpreter::Scope::find(std::string_view name) {
  for (auto& [key, value] : vars) {
    if (key == name) return &value;
  }
  return nullptr;
}

void Interpreter::Scope::set(const std::string& name, Value value) {
  if (Value* v = find(name)) {
    *v = std::move(value);
  } else {
    vars.emplace_back(name, std::move(value));
  }
}

Interpreter::Interpreter(const Program& program, const Limits& limits, Dict globals)
    : program_(program), limits_(limits), globals_(std::move(globals)) {}

Interpreter::~Interpreter() {
  // Namespaces may hold themselves (set ns.self = ns): clear them so nothing leaks.
  for (Value& ns : namespaces_)
    ns.namespace_dict().entries.clear();
}

std::string Interpreter::render(const Dict& variables) {
  for (const auto& [name, value] : variables.entries)
    root_.set(name, value);
  std::string out;
  exec(program_.body, out);
  return out;
}

void Interpreter::step() {
  if (++steps_ > limits_.max_steps) {
    throw JinjaError(fmt::format("chat template exceeded {} evaluation steps", limits_.max_steps));
  }
}

void Interpreter::charge(size_t bytes) {
  work_bytes_ += bytes;
  if (work_bytes_ > limits_.max_work_bytes || bytes > limits_.max_work_bytes) {
    throw JinjaError(
        fmt::format("chat template built more than {} bytes of values", limits_.max_work_bytes));
  }
}

void Interpreter::emit(std::string& out, std::string_view text) {
  if (out.size() + text.size() > limits_.max_output_bytes) {
    throw JinjaError(
        fmt::format("rendered chat template exceeds {} bytes", limits_.max_output_bytes));
  }
  charge(text.size());
  out.append(text);
}

std::string Interpreter::position(size_t offset) const {
  return describe_position(program_.source, offset);
}

// --- statements ---------------------------------------------------------------------------------

Interpreter::Flow Interpreter::exec(const StmtList& body, std::string& out) {
  for (const auto& s : body) {
    const Flow flow = exec_stmt(*s, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::exec_stmt(const Stmt& s, std::string& out) {
  step();
  try {
    switch (s.kind) {
      case StmtKind::kText:
        emit(out, s.text);
        break;
      case StmtKind::kOutput: {
        const Value v = eval(*s.expr);
        if (v.is_string()) {
          emit(out, v.str());
        } else {
          emit(out, v.to_string());
        }
        break;
      }
      case StmtKind::kIf: {
        for (const auto& [test, body] : s.branches) {
          if (eval(*test).truthy()) return exec(body, out);
        }
        return exec(s.else_body, out);
      }
      case StmtKind::kFor:
        exec_for(s, out);
        break;
      case StmtKind::kSet:
      case StmtKind::kSetBlock:
        exec_set(s);
        break;
      case StmtKind::kMacro: {
        const Stmt* macro = &s;
        scope_->set(s.name, Value::function(
                                s.name,
                                [macro](Interpreter& in, CallArgs& args) {
                                  return in.call_macro(*macro, args);
                                },
                                true));
        break;
      }
      case StmtKind::kFilterBlock: {
        const Value body(render_block(s.body));
        const Value v = eval_filter(*s.filter, &body);
        emit(out, v.to_string());
        break;
      }
      case StmtKind::kWith: {
        Scope scope{scope_, {}};
        for (size_t i = 0; i < s.targets.size(); ++i)
          scope.set(s.targets[i], eval(*s.values[i]));
        Scope* saved = scope_;
        scope_ = &scope;
        const Flow flow = exec(s.body, out);
        scope_ = saved;
        return flow;
      }
      case StmtKind::kScope:
        return exec(s.body, out);
      case StmtKind::kBreak:
        return Flow::kBreak;
      case StmtKind::kContinue:
        return Flow::kContinue;
    }
  } catch (const JinjaError& e) {
    // The innermost statement names the place; raise_exception keeps the template's message.
    if (e.raised() || std::string_view(e.what()).find(" (chat template line ") != std::string::npos)
      throw;
    throw JinjaError(fmt::format("{} (chat template {})", e.what(), position(s.offset)));
  }
  return Flow::kNormal;
}

void Interpreter::assign(const Stmt& s, const Value& value) {
  if (!s.unpack) {
    scope_->set(s.targets[0], value);
    return;
  }
  const ValueList items = iterate(value);
  if (items.size() != s.targets.size()) {
    if (items.size() > s.targets.size()) {
      type_error(fmt::format("too many values to unpack (expected {})", s.targets.size()));
    }
    type_error(fmt::format("not enough values to unpack (expected {}, got {})", s.targets.size(),
                           items.size()));
  }
  for (size_t i = 0; i < items.size(); ++i)
    scope_->set(s.targets[i], items[i]);
}

void Interpreter::exec_for(const Stmt& s, std::string& out) {
  ValueList items = iterate(eval(*s.expr));
  Scope* const saved = scope_;
  if (s.filter) {
    ValueList kept;
    for (Value& item : items) {
      step();
      Scope scope{saved, {}};
      scope_ = &scope;
      assign(s, item);
      const bool keep = eval(*s.filter).truthy();
      scope_ = saved;
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    Scope scope{saved, {}};
    scope_ = &scope;
    exec(s.else_body, out);
    scope_ = saved;
    return;
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step();
    Scope scope{saved, {}};
    scope_ = &scope;
    Dict loop;
    loop.entries.reserve(12);
    loop.set("index", Value(i + 1));
    loop.set("index0", Value(i));
    loop.set("revindex", Value(n - i));
    loop.set("revindex0", Value(n - i - 1));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(int64_t{1}));
    loop.set("depth0", Value(int64_t{0}));
    loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)]
                               : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < n ? items[static_cast<size_t>(i + 1)]
                                   : Value::undefined("there is no next item"));
    loop.set("cycle", Value::function("cycle", [i](Interpreter&, CallArgs& args) {
               if (args.positional.empty()) throw JinjaError("no items for cycling given");
               return args.positional[static_cast<size_t>(i) % args.positional.size()];
             }));
    scope.set("loop", Value::dict(std::move(loop)));
    assign(s, items[static_cast<size_t>(i)]);
    Flow flow = Flow::kNormal;
    try {
      flow = exec(s.body, out);
    } catch (...) {
      scope_ = saved;
      throw;
    }
    scope_ = saved;
    if (flow == Flow::kBreak) break;
  }
}

void Interpreter::exec_set(const Stmt& s) {
  Value value;
  if (s.kind == StmtKind::kSetBlock) {
    value = Value(render_block(s.body));
    if (s.filter) value = eval_filter(*s.filter, &value);
  } else {
    value = eval(*s.expr);
  }
  if (s.attr.empty()) {
    assign(s, value);
    return;
  }
  const Value ns = lookup(s.targets[0]);
  if (!ns.is_namespace()) type_error("cannot assign attribute on non-namespace object");
  ns.namespace_dict().set(s.attr, std::move(value));
}

std::string Interpreter::render_block(const StmtList& body) {
  Scope scope{scope_, {}};
  Scope* saved = scope_;
  scope_ = &scope;
  std::string out;
  try {
    exec(body, out);
  } catch (...) {
    scope_ = saved;
    throw;
  }
  scope_ = saved;
  return out;
}

Value Interpreter::call_macro(const Stmt& macro, CallArgs& args) {
  if (call_depth_ >= limits_.max_call_depth) {
    throw JinjaError(fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
  }
  if (args.positional.size() > macro.params.size()) {
    type_error(fmt::format("macro '{}' takes not more than {} argument(s)", macro.name,
                           macro.params.size()));
  }
  Scope scope{&root_, {}};
  for (size_t i = 0; i < macro.params.size(); ++i) {
    if (i < args.positional.size()) scope.set(macro.params[i], args.positional[i]);
  }
  for (auto& [key, value] : args.keyword) {
    const auto it = std::find(macro.params.begin(), macro.params.end(), key);
    if (it == macro.params.end()) {
      type_error(fmt::format("macro '{}' takes no keyword argument '{}'", macro.name, key));
    }
    if (static_cast<size_t>(it - macro.params.begin()) < args.positional.size()) {
      type_error(fmt::format("macro '{}' got multiple values for argument '{}'", macro.name, key));
    }
    scope.set(key, value);
  }
  Scope* saved = scope_;
  scope_ = &scope;
  ++call_depth_;
  std::string out;
  try {
    for (size_t i = 0; i < macro.params.size(); ++i) {
      if (scope.find(macro.params[i]) != nullptr) continue;
      scope.set(macro.params[i], macro.values[i]
                                     ? eval(*macro.values[i])
                                     : Value::undefined(fmt::format(
                                           "parameter '{}' was not provided", macro.params[i])));
    }
    exec(macro.body, out);
  } catch (...) {
    scope_ = saved;
    --call_depth_;
    throw;
  }
  scope_ = saved;
  --call_depth_;
  return Value(std::move(out));
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) throw JinjaError(callee.undefined_message());
  if (!callee.is_function())
    type_error(fmt::format("'{}' object is not callable", callee.type_name()));
  return callee.function().call(*this, args);
}

// --- expressions --------------------------------------------------------------------------------

Value Interpreter::lookup(const std::string& name) {
  for (Scope* s = scope_; s != nullptr; s = s->parent) {
    if (Value* v = s->find(name)) return *v;
  }
  if (const Value* v = globals_.find(name)) return *v;
  return Value::undefined(fmt::format("'{}' is undefined", name));
}

CallArgs Interpreter::eval_args(const Expr& e, size_t first) {
  CallArgs args;
  for (size_t i = first; i < e.args.size(); ++i)
    args.positional.push_back(eval(*e.args[i]));
  for (const auto& [key, value] : e.kwargs)
    args.keyword.emplace_back(key, eval(*value));
  return args;
}

Value Interpreter::eval_filter(const Expr& e, const Value* block_input) {
  const Value input =
      e.args[0] ? (e.args[0]->kind == ExprKind::kFilter ? eval_filter(*e.args[0], block_input)
                                                        : eval(*e.args[0]))
                : *block_input;
  CallArgs args = eval_args(e, 1);
  return apply_filter(*this, e.name, input, args);
}

Value Interpreter::eval(const Expr& e) {
  step();
  switch (e.kind) {
    case ExprKind::kConst:
      return e.constant;
    case ExprKind::kName:
      return lookup(e.name);
    case ExprKind::kList:
    case ExprKind::kTuple: {
      ValueList items;
      items.reserve(e.args.size());
      for (const auto& a : e.args)
        items.push_back(eval(*a));
      charge(items.size() * sizeof(Value));
      return Value::list(std::move(items), e.kind == ExprKind::kTuple);
    }
    case ExprKind::kDict: {
      Dict d;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = eval(*e.args[i]);
        if (!key.is_string()) type_error("dict literal keys must be strings in chat templates");
        d.set(key.str(), eval(*e.args[i + 1]));
      }
      charge(d.entries.size() * sizeof(Value));
      return Value::dict(std::move(d));
    }
    case ExprKind::kGetAttr: {
      const Value obj = eval(*e.args[0]);
      if (obj.is_undefined()) throw JinjaError(obj.undefined_message());
      return get_attribute(obj, e.name);
    }
    case ExprKind::kGetItem:
      return eval_getitem(eval(*e.args[0]), eval(*e.args[1]));
    case ExprKind::kSlice:
      return eval_slice(e);
    case ExprKind::kCall: {
      const Value callee = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      return call(callee, args);
    }
    case ExprKind::kFilter:
      return eval_filter(e, nullptr);
    case ExprKind::kTest: {
      const Value input = eval(*e.args[0]);
      CallArgs args = eval_args(e, 1);
      return Value(apply_test(*this, e.name, input, args));
    }
    case ExprKind::kNot:
      return Value(!eval(*e.args[0]).truthy());
    case ExprKind::kNeg:
    case ExprKind::kPos: {
      const Value v = eval(*e.args[0]);
      if (v.is_undefined()) throw JinjaError(v.undefined_message());
      if (!v.is_number()) {
        type_error(fmt::format("bad operand type for unary {}: '{}'",
                               e.kind == ExprKind::kNeg ? '-' : '+', v.type_name()));
      }
      if (e.kind == ExprKind::kPos) return v.is_bool() ? Value(v.as_int()) : v;
      if (v.is_int()) return Value(checked(v.as_int() == INT64_MIN, -v.as_int()));
      return Value(-v.as_double());
    }
    case ExprKind::kBinary:
      return eval_binary(e.name, eval(*e.args[0]), eval(*e.args[1]));
    case ExprKind::kAnd: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? eval(*e.args[1]) : left;
    }
    case ExprKind::kOr: {
      Value left = eval(*e.args[0]);
      return left.truthy() ? left : eval(*e.args[1]);
    }
    case ExprKind::kConcat: {
      std::string out;
      for (const auto& a : e.args) {
        const Value v = eval(*a);
        out += v.is_string() ? v.str() : v.to_string();
        charge(out.size());
      }
      return Value(std::move(out));
    }
    case ExprKind::kCompare: {
      Value left = eval(*e.args[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.args[i + 1]);
        if (!eval_compare(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case ExprKind::kCond: {
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      if (e.args[2]) return eval(*e.args[2]);
      return Value::undefined(fmt::format(
          "the inline if-expression at {} evaluated to false and no else section was defined",
          position(e.offset)));
    }
  }
  return Value();
}

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
      charge(a.str().size() + b.str().size());
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
    if (ints && b.as_int() >= 0) {
      int64_t result = 1;
      int64_t base = a.as_int();
      for (int64_t e = b.as_int(); e > 0; --e) {
        if (__builtin_mul_overflow(result, base, &result))
          throw JinjaError("integer overflow (kvserve's template integers are 64-bit)");
        if (result == 0 || result == 1) break;
      }
      return Value(result);
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

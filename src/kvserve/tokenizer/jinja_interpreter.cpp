#include "kvserve/tokenizer/jinja_interpreter.h"

#include <fmt/format.h>

#include <cmath>

#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_lexer.h"

namespace kvserve::tokenizer::jinja {

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
      std::vector<Value> parts;
      size_t size = 0;
      for (const auto& a : e.args) {
        const Value v = eval(*a);
        parts.push_back(v.is_string() ? v : Value(v.to_string()));
        size += parts.back().str().size();
      }
      charge(size);
      std::string out;
      out.reserve(size);
      for (const Value& part : parts)
        out += part.str();
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

}  // namespace kvserve::tokenizer::jinja

// The evaluator of kvserve's Jinja subset: statements into text, expressions into values, with
// jinja2's scoping (each for-loop iteration, macro call and with-block is a scope; set writes the
// innermost one; namespace() objects are shared) and bounded resources.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/tokenizer/chat_template.h"
#include "kvserve/tokenizer/jinja_ast.h"
#include "kvserve/tokenizer/jinja_value.h"

namespace kvserve::tokenizer::jinja {

using Limits = ChatTemplateLimits;

class Interpreter {
 public:
  Interpreter(const Program& program, const Limits& limits, Dict globals);
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders the program with these top-level variables; throws JinjaError.
  std::string render(const Dict& variables);

  // For builtins: calling values (macros, methods, globals), budgets and rendering helpers.
  Value call(const Value& callee, CallArgs& args);
  void charge(size_t bytes);  // counts towards max_work_bytes
  void step();                // counts towards max_steps
  const Limits& limits() const { return limits_; }
  // Keeps a namespace alive until the render ends (then breaks reference cycles through it).
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }

 private:
  struct Scope {
    Scope* parent = nullptr;
    std::vector<std::pair<std::string, Value>> vars;
    Value* find(std::string_view name);
    void set(const std::string& name, Value value);
  };
  enum class Flow { kNormal, kBreak, kContinue };

  Flow exec(const StmtList& body, std::string& out);
  Flow exec_stmt(const Stmt& s, std::string& out);
  void exec_for(const Stmt& s, std::string& out);
  void exec_set(const Stmt& s);
  std::string render_block(const StmtList& body);
  Value call_macro(const Stmt& macro, CallArgs& args);
  void assign(const Stmt& s, const Value& value);
  void emit(std::string& out, std::string_view text);

  Value eval(const Expr& e);
  Value lookup(const std::string& name);
  Value eval_filter(const Expr& e, const Value* block_input);
  CallArgs eval_args(const Expr& e, size_t first);
  Value eval_getitem(const Value& obj, const Value& key);
  Value eval_slice(const Expr& e);
  Value eval_binary(const std::string& op, const Value& a, const Value& b);
  bool eval_compare(const std::string& op, const Value& a, const Value& b);
  std::string position(size_t offset) const;

  const Program& program_;
  Limits limits_;
  Dict globals_;
  Scope root_;
  Scope* scope_ = &root_;
  uint64_t steps_ = 0;
  size_t work_bytes_ = 0;
  int call_depth_ = 0;
  std::vector<Value> namespaces_;
};

// The elements a for-loop visits: list items, dict keys, string characters; nothing for
// Undefined; a TypeError for the rest.
ValueList iterate(const Value& v);
// Python's `item in container`.
bool contains(const Value& container, const Value& item);
// Python's `format % args` for %s %r %d %i %f %x %% (and %(name)s with a dict).
std::string percent_format(const std::string& format, const Value& args);

}  // namespace kvserve::tokenizer::jinja

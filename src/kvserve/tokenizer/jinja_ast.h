// The syntax tree of kvserve's Jinja subset and its parser (jinja2's grammar and precedence).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/tokenizer/jinja_value.h"

namespace kvserve::tokenizer::jinja {

enum class ExprKind : uint8_t {
  kConst,    // constant
  kName,     // name
  kList,     // args: items
  kTuple,    // args: items
  kDict,     // args: key0, value0, key1, value1, ...
  kGetAttr,  // args[0].name
  kGetItem,  // args[0][args[1]]
  kSlice,    // args[0][args[1]:args[2]:args[3]] (each bound may be null)
  kCall,     // args[0](args[1..], kwargs)
  kFilter,   // args[0] | name(args[1..], kwargs); args[0] is null in filter blocks
  kTest,     // args[0] is name(args[1..], kwargs)
  kNot,      // not args[0]
  kNeg,      // -args[0]
  kPos,      // +args[0]
  kBinary,   // args[0] name args[1] for + - * / // % **
  kAnd,      // args[0] and args[1]
  kOr,       // args[0] or args[1]
  kConcat,   // args[0] ~ args[1] ~ ...
  kCompare,  // args[0] ops[0] args[1] ops[1] args[2] ... (==, !=, <, <=, >, >=, in, notin)
  kCond,     // args[0] if args[1] else args[2] (args[2] may be null)
};

struct Expr {
  ExprKind kind = ExprKind::kConst;
  size_t offset = 0;  // in the normalised source
  int height = 1;     // of this subtree (the parser bounds it, so evaluation recursion is bounded)
  Value constant;
  std::string name;
  std::vector<std::unique_ptr<Expr>> args;
  std::vector<std::pair<std::string, std::unique_ptr<Expr>>> kwargs;
  std::vector<std::string> ops;
};
using ExprPtr = std::unique_ptr<Expr>;

enum class StmtKind : uint8_t {
  kText,         // text
  kOutput,       // {{ expr }}
  kIf,           // branches, else_body
  kFor,          // for targets in expr [if filter]: body, else else_body
  kSet,          // set targets = expr / set targets[0].attr = expr (attr non-empty)
  kSetBlock,     // set targets[0] [| filter]: body endset
  kMacro,        // macro name(params = defaults): body
  kFilterBlock,  // filter <filter>: body endfilter
  kWith,         // with targets[i] = values[i]: body
  kScope,        // generation ... endgeneration: body as it is
  kBreak,
  kContinue,
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  StmtKind kind = StmtKind::kText;
  size_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body;
  StmtList else_body;
  std::vector<std::string> targets;
  bool unpack = false;  // targets form a tuple
  std::string attr;     // set ns.attr
  std::string name;     // macro name
  std::vector<std::string> params;
  std::vector<ExprPtr> values;  // macro defaults (null when none), with-values
};

struct Program {
  std::string source;  // normalised (offsets refer to it)
  StmtList body;
};

// Parses a template; errors are kInvalidArgument naming the line and column.
Result<std::shared_ptr<const Program>> parse_program(std::string_view source);

}  // namespace kvserve::tokenizer::jinja

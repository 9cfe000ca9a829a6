// The expression grammar of kvserve's Jinja parser (jinja2/parser.py's parse_* functions).
#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_parser.h"

namespace kvserve::tokenizer::jinja {

ExprPtr ExpressionParser::parse_tuple(bool with_condexpr,
                                      std::initializer_list<std::string_view> extra_ends,
                                      bool explicit_parens) {
  const size_t offset = cur().offset;
  std::vector<ExprPtr> items;
  bool is_tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    const Token& t = cur();
    if (t.kind == TokenKind::kVarEnd || t.kind == TokenKind::kBlockEnd || t.is_op(")") ||
        (t.kind == TokenKind::kName &&
         std::find(extra_ends.begin(), extra_ends.end(), t.text) != extra_ends.end()))
      break;
    items.push_back(parse_expression(with_condexpr));
    if (cur().is_op(",")) {
      is_tuple = true;
    } else {
      break;
    }
  }
  if (!is_tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parens) fail(fmt::format("expected an expression, got {}", describe(cur())));
  }
  ExprPtr e = node(ExprKind::kTuple, offset);
  for (ExprPtr& item : items)
    add(*e, std::move(item));
  return e;
}

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  if (!with_condexpr) return parse_or();
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    ExprPtr test = parse_or();
    ExprPtr otherwise;
    if (skip_name("else")) {
      Guard guard(*this);  // a chain of elses nests
      otherwise = parse_expression(true);
    }
    ExprPtr e = node(ExprKind::kCond, expr->offset);
    add(*e, std::move(expr));
    add(*e, std::move(test));
    add(*e, std::move(otherwise));
    expr = std::move(e);
  }
  return expr;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (skip_name("or"))
    left = binary(ExprKind::kOr, "or", std::move(left), parse_and());
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (skip_name("and"))
    left = binary(ExprKind::kAnd, "and", std::move(left), parse_not());
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (cur().is_name("not")) {
    Guard guard(*this);
    ExprPtr e = node(ExprKind::kNot, cur().offset);
    advance();
    add(*e, parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  ExprPtr first = parse_math1();
  ExprPtr cmp;
  while (true) {
    std::string op;
    const Token& t = cur();
    if (t.kind == TokenKind::kOperator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                           t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      advance();
    } else if (t.is_name("in")) {
      op = "in";
      advance();
    } else if (t.is_name("not") && look().is_name("in")) {
      op = "notin";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) {
      cmp = node(ExprKind::kCompare, first->offset);
      add(*cmp, std::move(first));
    }
    cmp->ops.push_back(op);
    add(*cmp, parse_math1());
  }
  return cmp ? std::move(cmp) : std::move(first);
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (cur().is_op("+") || cur().is_op("-")) {
    std::string op = cur().text;
    advance();
    left = binary(ExprKind::kBinary, op, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  ExprPtr first = parse_math2();
  if (!cur().is_op("~")) return first;
  ExprPtr e = node(ExprKind::kConcat, first->offset);
  add(*e, std::move(first));
  while (skip_op("~"))
    add(*e, parse_math2());
  return e;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (cur().is_op("*") || cur().is_op("/") || cur().is_op("//") || cur().is_op("%")) {
    std::string op = cur().text;
    advance();
    left = binary(ExprKind::kBinary, op, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (skip_op("**"))
    left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true));
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  Guard guard(*this);
  ExprPtr e;
  if (cur().is_op("-") || cur().is_op("+")) {
    e = node(cur().is_op("-") ? ExprKind::kNeg : ExprKind::kPos, cur().offset);
    advance();
    add(*e, parse_unary(false));
  } else {
    e = parse_primary();
  }
  e = parse_postfix(std::move(e));
  if (with_filter) e = parse_filter_expr(std::move(e));
  return e;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = cur();
  ExprPtr e = node(ExprKind::kConst, t.offset);
  if (t.kind == TokenKind::kName) {
    if (t.text == "true" || t.text == "True") {
      e->constant = Value(true);
    } else if (t.text == "false" || t.text == "False") {
      e->constant = Value(false);
    } else if (t.text == "none" || t.text == "None") {
      e->constant = Value::none();
    } else {
      e->kind = ExprKind::kName;
      e->name = t.text;
    }
    advance();
  } else if (t.kind == TokenKind::kString) {
    std::string s;
    while (cur().kind == TokenKind::kString) {  // adjacent literals concatenate
      s += cur().text;
      advance();
    }
    e->constant = Value(std::move(s));
  } else if (t.kind == TokenKind::kInteger) {
    e->constant = Value(t.int_value);
    advance();
  } else if (t.kind == TokenKind::kFloat) {
    e->constant = Value(t.float_value);
    advance();
  } else if (t.is_op("(")) {
    advance();
    e = parse_tuple(true, {}, true);
    expect_op(")");
  } else if (t.is_op("[")) {
    e->kind = ExprKind::kList;
    advance();
    while (!cur().is_op("]")) {
      if (!e->args.empty()) expect_op(",");
      if (cur().is_op("]")) break;
      add(*e, parse_expression(true));
    }
    expect_op("]");
  } else if (t.is_op("{")) {
    e->kind = ExprKind::kDict;
    advance();
    while (!cur().is_op("}")) {
      if (!e->args.empty()) expect_op(",");
      if (cur().is_op("}")) break;
      add(*e, parse_expression(true));
      expect_op(":");
      add(*e, parse_expression(true));
    }
    expect_op("}");
  } else {
    fail(fmt::format("unexpected {}", describe(t)));
  }
  return e;
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr e) {
  while (true) {
    if (cur().is_op(".") || cur().is_op("[")) {
      e = parse_subscript(std::move(e));
    } else if (cur().is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr e) {
  while (true) {
    if (cur().is_op("|")) {
      e = parse_filter(std::move(e), false);
    } else if (cur().is_name("is")) {
      e = parse_test(std::move(e));
    } else if (cur().is_op("(")) {
      e = parse_call(std::move(e));
    } else {
      return e;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr obj) {
  const size_t offset = cur().offset;
  if (skip_op(".")) {
    const Token& t = cur();
    if (t.kind == TokenKind::kName) {
      ExprPtr e = node(ExprKind::kGetAttr, offset);
      e->name = t.text;
      add(*e, std::move(obj));
      advance();
      return e;
    }
    if (t.kind != TokenKind::kInteger) fail("expected name or number");
    ExprPtr e = node(ExprKind::kGetItem, offset);
    add(*e, std::move(obj));
    ExprPtr key = node(ExprKind::kConst, t.offset);
    key->constant = Value(t.int_value);
    add(*e, std::move(key));
    advance();
    return e;
  }
  expect_op("[");
  ExprPtr e = node(ExprKind::kGetItem, offset);
  add(*e, std::move(obj));
  // [a], [a:b], [a:b:c] with any part optional.
  ExprPtr start;
  if (!cur().is_op(":")) {
    start = parse_expression(true);
    if (!cur().is_op(":")) {
      if (cur().is_op(",")) fail("tuple subscripts are not supported");
      add(*e, std::move(start));
      expect_op("]");
      return e;
    }
  }
  e->kind = ExprKind::kSlice;
  add(*e, std::move(start));
  expect_op(":");
  add(*e, cur().is_op(":") || cur().is_op("]") ? nullptr : parse_expression(true));
  ExprPtr step;
  if (skip_op(":") && !cur().is_op("]")) step = parse_expression(true);
  add(*e, std::move(step));
  expect_op("]");
  return e;
}

void ExpressionParser::parse_call_args(Expr& e) {
  expect_op("(");
  bool need_comma = false;
  while (!cur().is_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (cur().is_op(")")) break;
    }
    if (cur().is_op("*") || cur().is_op("**")) fail("*args and **kwargs are not supported");
    if (cur().kind == TokenKind::kName && look().is_op("=")) {
      std::string key = cur().text;
      advance();
      advance();
      ExprPtr value = parse_expression(true);
      e.height = std::max(e.height, value->height + 1);
      e.kwargs.emplace_back(std::move(key), std::move(value));
    } else {
      if (!e.kwargs.empty()) fail("invalid syntax for function call expression");
      add(e, parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(")");
}

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  ExprPtr e = node(ExprKind::kCall, cur().offset);
  add(*e, std::move(callee));
  parse_call_args(*e);
  return e;
}

std::string ExpressionParser::dotted_name() {
  std::string name = expect_name();
  while (skip_op("."))
    name += "." + expect_name();
  return name;
}

// "| name(args) | ...": input is null for filter blocks and block sets.
ExprPtr ExpressionParser::parse_filter(ExprPtr input, bool start_inline) {
  while (cur().is_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const size_t offset = cur().offset;
    ExprPtr e = node(ExprKind::kFilter, offset);
    e->name = dotted_name();
    if (!is_known_filter(e->name)) fail_at(offset, fmt::format("no filter named '{}'", e->name));
    add(*e, std::move(input));
    if (cur().is_op("(")) parse_call_args(*e);
    input = std::move(e);
  }
  return input;
}

ExprPtr ExpressionParser::parse_test(ExprPtr input) {
  advance();  // is
  const bool negated = skip_name("not");
  const size_t offset = cur().offset;
  ExprPtr e = node(ExprKind::kTest, offset);
  e->name = dotted_name();
  if (!is_known_test(e->name)) fail_at(offset, fmt::format("no test named '{}'", e->name));
  add(*e, std::move(input));
  const Token& t = cur();
  if (t.is_op("(")) {
    parse_call_args(*e);
  } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString ||
              t.kind == TokenKind::kInteger || t.kind == TokenKind::kFloat || t.is_op("[") ||
              t.is_op("{")) &&
             !t.is_name("else") && !t.is_name("or") && !t.is_name("and")) {
    if (t.is_name("is")) fail("you cannot chain multiple tests with is");
    add(*e, parse_postfix(parse_primary()));
  }
  if (!negated) return e;
  ExprPtr n = node(ExprKind::kNot, offset);
  add(*n, std::move(e));
  return n;
}

}  // namespace kvserve::tokenizer::jinja

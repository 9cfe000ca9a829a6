// kvserve's Jinja parser, internal: the token cursor and the expression grammar (jinja2's
// precedence: condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary > filters and
// tests > postfix > primary). The statement parser (jinja_parser.cpp) extends it.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/tokenizer/jinja_ast.h"
#include "kvserve/tokenizer/jinja_lexer.h"

namespace kvserve::tokenizer::jinja {

inline constexpr int kMaxNesting = 200;     // parser recursion: parentheses, unary chains, blocks
inline constexpr int kMaxExprHeight = 512;  // tree height, e.g. a long chain of + (evaluation)

struct SyntaxError {
  size_t offset;
  std::string message;
};

class ExpressionParser {
 public:
  explicit ExpressionParser(const std::vector<Token>& tokens) : toks_(tokens) {}

 protected:
  struct Guard {
    explicit Guard(ExpressionParser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.fail("template nested too deeply");
    }
    ~Guard() { --parser.depth_; }
    ExpressionParser& parser;
  };

  const Token& cur() const { return toks_[pos_]; }
  const Token& look() const { return toks_[std::min(pos_ + 1, toks_.size() - 1)]; }
  void advance() {
    if (pos_ + 1 < toks_.size()) ++pos_;
  }
  [[noreturn]] void fail(std::string message) const { fail_at(cur().offset, std::move(message)); }
  [[noreturn]] static void fail_at(size_t offset, std::string message) {
    throw SyntaxError{offset, std::move(message)};
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kText:
        return "template data";
      case TokenKind::kVarBegin:
        return "'{{'";
      case TokenKind::kVarEnd:
        return "end of print statement";
      case TokenKind::kBlockBegin:
        return "'{%'";
      case TokenKind::kBlockEnd:
        return "end of statement block";
      case TokenKind::kEof:
        return "end of template";
      case TokenKind::kString:
        return "string";
      case TokenKind::kInteger:
        return "integer";
      case TokenKind::kFloat:
        return "float";
      default:
        return "'" + t.text + "'";
    }
  }
  bool skip_op(std::string_view op) {
    if (!cur().is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!cur().is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail(fmt::format("expected '{}', got {}", op, describe(cur())));
  }
  std::string expect_name() {
    if (cur().kind != TokenKind::kName)
      fail(fmt::format("expected a name, got {}", describe(cur())));
    std::string name = cur().text;
    advance();
    return name;
  }
  void expect(TokenKind kind) {
    if (cur().kind != kind) {
      Token want;
      want.kind = kind;
      fail(fmt::format("expected {}, got {}", describe(want), describe(cur())));
    }
    advance();
  }

  ExprPtr node(ExprKind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }
  void add(Expr& parent, ExprPtr child) {
    if (child) {
      parent.height = std::max(parent.height, child->height + 1);
      if (parent.height > kMaxExprHeight) fail_at(parent.offset, "expression nested too deeply");
    }
    parent.args.push_back(std::move(child));
  }
  ExprPtr binary(ExprKind kind, std::string op, ExprPtr left, ExprPtr right) {
    ExprPtr e = node(kind, left->offset);
    e->name = std::move(op);
    add(*e, std::move(left));
    add(*e, std::move(right));
    return e;
  }

  // --- expressions (jinja_expression_parser.cpp) ----------------------------------------------

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
                      bool explicit_parens);
  ExprPtr parse_expression(bool with_condexpr);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr e);
  ExprPtr parse_filter_expr(ExprPtr e);
  ExprPtr parse_subscript(ExprPtr obj);
  void parse_call_args(Expr& e);
  ExprPtr parse_call(ExprPtr callee);
  std::string dotted_name();
  ExprPtr parse_filter(ExprPtr input, bool start_inline);
  ExprPtr parse_test(ExprPtr input);

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace kvserve::tokenizer::jinja

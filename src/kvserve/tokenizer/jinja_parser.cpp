// jinja2's parser (jinja2/parser.py) for the statements and expressions chat templates use.
#include <algorithm>
#include <initializer_list>

#include "kvserve/tokenizer/jinja_ast.h"
#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_lexer.h"

namespace kvserve::tokenizer::jinja {
namespace {

constexpr int kMaxNesting = 128;     // parser recursion: parentheses, unary chains, blocks
constexpr int kMaxExprHeight = 512;  // tree height, e.g. a long chain of + (evaluation recursion)

struct SyntaxError {
  size_t offset;
  std::string message;
};

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : toks_(tokens) {}

  StmtList parse_template() {
    StmtList body = subparse({}, nullptr);
    if (cur().kind != TokenKind::kEof) fail("unexpected tokens after the template");
    return body;
  }

 private:
  struct Guard {
    explicit Guard(Parser& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) parser.fail("template nested too deeply");
    }
    ~Guard() { --parser.depth_; }
    Parser& parser;
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

  // --- statements -----------------------------------------------------------------------------

  // Statements until a "{% <end> ..." with <end> in `ends`; stops on that name (which `found`
  // receives). Without ends, parses to the end of the template.
  StmtList subparse(std::initializer_list<std::string_view> ends, std::string* found) {
    StmtList body;
    while (true) {
      const Token& t = cur();
      if (t.kind == TokenKind::kEof) {
        if (ends.size() > 0) {
          fail(fmt::format("unexpected end of template; expected {}", join_names(ends)));
        }
        return body;
      }
      if (t.kind == TokenKind::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kText;
        s->offset = t.offset;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
      } else if (t.kind == TokenKind::kVarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::kOutput;
        s->offset = t.offset;
        advance();
        s->expr = parse_tuple(true, {}, false);
        expect(TokenKind::kVarEnd);
        body.push_back(std::move(s));
      } else if (t.kind == TokenKind::kBlockBegin) {
        advance();
        if (cur().kind == TokenKind::kName &&
            std::find(ends.begin(), ends.end(), cur().text) != ends.end()) {
          *found = cur().text;
          return body;
        }
        body.push_back(parse_statement(ends));
        expect(TokenKind::kBlockEnd);
      } else {
        fail(fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  static std::string join_names(std::initializer_list<std::string_view> names) {
    std::string out;
    for (std::string_view n : names) {
      if (!out.empty()) out += " or ";
      out += "'" + std::string(n) + "'";
    }
    return out;
  }

  // After the statement's header: optional ':' then '%}', then the body up to one of `ends`
  // (consumed when drop is true).
  StmtList statements(std::initializer_list<std::string_view> ends, std::string* found) {
    skip_op(":");
    expect(TokenKind::kBlockEnd);
    std::string end;
    StmtList body = subparse(ends, &end);
    if (found != nullptr) *found = end;
    advance();  // the end name
    return body;
  }

  std::unique_ptr<Stmt> parse_statement(std::initializer_list<std::string_view> outer_ends) {
    Guard guard(*this);
    const Token& t = cur();
    if (t.kind != TokenKind::kName) fail("tag name expected");
    auto s = std::make_unique<Stmt>();
    s->offset = t.offset;
    const std::string tag = t.text;
    advance();
    if (tag == "for") {
      parse_for(*s);
    } else if (tag == "if") {
      parse_if(*s);
    } else if (tag == "set") {
      parse_set(*s);
    } else if (tag == "macro") {
      parse_macro(*s);
    } else if (tag == "filter") {
      s->kind = StmtKind::kFilterBlock;
      s->filter = parse_filter(nullptr, true);
      s->body = statements({"endfilter"}, nullptr);
    } else if (tag == "with") {
      parse_with(*s);
    } else if (tag == "generation") {  // transformers' AssistantTracker: renders its body
      s->kind = StmtKind::kScope;
      s->body = statements({"endgeneration"}, nullptr);
    } else if (tag == "print") {
      s->kind = StmtKind::kOutput;
      s->expr = parse_tuple(true, {}, false);
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(s->offset, fmt::format("'{}' outside loop", tag));
      s->kind = tag == "break" ? StmtKind::kBreak : StmtKind::kContinue;
    } else if (tag == "block" || tag == "extends" || tag == "include" || tag == "import" ||
               tag == "from" || tag == "call" || tag == "autoescape") {
      fail_at(s->offset, fmt::format("the '{}' tag is not supported in chat templates", tag));
    } else {
      std::string message = fmt::format("encountered unknown tag '{}'", tag);
      if (outer_ends.size() > 0) message += "; expected " + join_names(outer_ends);
      fail_at(s->offset, message);
    }
    return s;
  }

  // Names, "a, b" or "(a, b)": what for/set assign to.
  void parse_targets(Stmt& s, std::string_view end_name) {
    const bool paren = skip_op("(");
    while (true) {
      if (cur().kind != TokenKind::kName || cur().text == "true" || cur().text == "false" ||
          cur().text == "none" || cur().text == "True" || cur().text == "False" ||
          cur().text == "None") {
        fail(fmt::format("can't assign to {}", describe(cur())));
      }
      s.targets.push_back(cur().text);
      advance();
      if (!skip_op(",")) break;
      s.unpack = true;
      if ((paren && cur().is_op(")")) || cur().is_name(end_name) || cur().is_op("=") ||
          cur().kind == TokenKind::kBlockEnd)
        break;
    }
    if (paren) expect_op(")");
  }

  void parse_for(Stmt& s) {
    s.kind = StmtKind::kFor;
    parse_targets(s, "in");
    if (!skip_name("in")) fail(fmt::format("expected 'in', got {}", describe(cur())));
    s.expr = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) s.filter = parse_expression(true);
    if (cur().is_name("recursive")) fail("recursive loops are not supported");
    std::string end;
    ++loop_depth_;
    s.body = statements({"endfor", "else"}, &end);
    --loop_depth_;
    if (end == "else") s.else_body = statements({"endfor"}, nullptr);
  }

  void parse_if(Stmt& s) {
    s.kind = StmtKind::kIf;
    while (true) {
      ExprPtr test = parse_tuple(false, {}, false);
      std::string end;
      StmtList body = statements({"elif", "else", "endif"}, &end);
      s.branches.emplace_back(std::move(test), std::move(body));
      if (end == "elif") continue;
      if (end == "else") s.else_body = statements({"endif"}, nullptr);
      return;
    }
  }

  void parse_set(Stmt& s) {
    if (cur().kind == TokenKind::kName && look().is_op(".")) {
      s.targets.push_back(cur().text);
      advance();
      advance();
      s.attr = expect_name();
    } else {
      parse_targets(s, "");
    }
    if (skip_op("=")) {
      s.kind = StmtKind::kSet;
      s.expr = parse_tuple(true, {}, false);
      return;
    }
    if (s.unpack || !s.attr.empty()) fail("a block set assigns to a single name");
    s.kind = StmtKind::kSetBlock;
    if (cur().is_op("|")) s.filter = parse_filter(nullptr, false);
    s.body = statements({"endset"}, nullptr);
  }

  void parse_macro(Stmt& s) {
    s.kind = StmtKind::kMacro;
    s.name = expect_name();
    expect_op("(");
    while (!cur().is_op(")")) {
      if (!s.params.empty()) expect_op(",");
      if (cur().is_op(")")) break;
      s.params.push_back(expect_name());
      if (skip_op("=")) {
        s.values.push_back(parse_expression(true));
      } else {
        if (std::any_of(s.values.begin(), s.values.end(), [](const ExprPtr& e) { return !!e; }))
          fail("non-default argument follows default argument");
        s.values.push_back(nullptr);
      }
    }
    expect_op(")");
    const int loops = loop_depth_;
    loop_depth_ = 0;
    s.body = statements({"endmacro"}, nullptr);
    loop_depth_ = loops;
  }

  void parse_with(Stmt& s) {
    s.kind = StmtKind::kWith;
    while (cur().kind != TokenKind::kBlockEnd) {
      if (!s.targets.empty()) expect_op(",");
      s.targets.push_back(expect_name());
      expect_op("=");
      s.values.push_back(parse_expression(true));
    }
    s.body = statements({"endwith"}, nullptr);
  }

  // --- expressions ----------------------------------------------------------------------------

  ExprPtr parse_tuple(bool with_condexpr, std::initializer_list<std::string_view> extra_ends,
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

  ExprPtr parse_expression(bool with_condexpr) {
    Guard guard(*this);
    if (!with_condexpr) return parse_or();
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression(true) : nullptr;
      ExprPtr e = node(ExprKind::kCond, expr->offset);
      add(*e, std::move(expr));
      add(*e, std::move(test));
      add(*e, std::move(otherwise));
      expr = std::move(e);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (skip_name("or"))
      left = binary(ExprKind::kOr, "or", std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (skip_name("and"))
      left = binary(ExprKind::kAnd, "and", std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    Guard guard(*this);
    if (cur().is_name("not")) {
      ExprPtr e = node(ExprKind::kNot, cur().offset);
      advance();
      add(*e, parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (cur().is_op("+") || cur().is_op("-")) {
      std::string op = cur().text;
      advance();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr first = parse_math2();
    if (!cur().is_op("~")) return first;
    ExprPtr e = node(ExprKind::kConcat, first->offset);
    add(*e, std::move(first));
    while (skip_op("~"))
      add(*e, parse_math2());
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (cur().is_op("*") || cur().is_op("/") || cur().is_op("//") || cur().is_op("%")) {
      std::string op = cur().text;
      advance();
      left = binary(ExprKind::kBinary, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (skip_op("**"))
      left = binary(ExprKind::kBinary, "**", std::move(left), parse_unary(true));
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr e) {
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

  ExprPtr parse_filter_expr(ExprPtr e) {
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

  ExprPtr parse_subscript(ExprPtr obj) {
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

  void parse_call_args(Expr& e) {
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

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = node(ExprKind::kCall, cur().offset);
    add(*e, std::move(callee));
    parse_call_args(*e);
    return e;
  }

  std::string dotted_name() {
    std::string name = expect_name();
    while (skip_op("."))
      name += "." + expect_name();
    return name;
  }

  // "| name(args) | ...": input is null for filter blocks and block sets.
  ExprPtr parse_filter(ExprPtr input, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr input) {
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

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Program>> parse_program(std::string_view source) {
  KV_ASSIGN_OR_RETURN(LexedTemplate lexed, lex(source));
  auto program = std::make_shared<Program>();
  try {
    Parser parser(lexed.tokens);
    program->body = parser.parse_template();
  } catch (const SyntaxError& e) {
    return invalid_argument("chat template syntax error at {}: {}",
                            describe_position(lexed.source, e.offset), e.message);
  }
  program->source = std::move(lexed.source);
  return std::shared_ptr<const Program>(std::move(program));
}

}  // namespace kvserve::tokenizer::jinja

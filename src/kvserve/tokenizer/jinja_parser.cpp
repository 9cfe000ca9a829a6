// jinja2's parser (jinja2/parser.py) for the statements and expressions chat templates use.
#include <algorithm>
#include <initializer_list>

#include "kvserve/tokenizer/jinja_ast.h"
#include "kvserve/tokenizer/jinja_builtins.h"
#include "kvserve/tokenizer/jinja_lexer.h"
#include "kvserve/tokenizer/jinja_parser.h"

namespace kvserve::tokenizer::jinja {
namespace {

// The statements (jinja2's parse_for, parse_if, parse_set, ...) over the expression parser.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  StmtList parse_template() {
    StmtList body = subparse({}, nullptr);
    if (cur().kind != TokenKind::kEof) fail("unexpected tokens after the template");
    return body;
  }

 private:
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

// The lexer of kvserve's Jinja subset: template source into text and tag tokens.
//
// It follows jinja2's lexer as transformers configures it (trim_blocks=True, lstrip_blocks=True,
// keep_trailing_newline=False): newlines normalised to "\n" and one trailing newline dropped;
// "{%-"/"{{-"/"{#-" strip all whitespace before the tag and "-%}"/"-}}"/"-#}" all after it; a
// block or comment tag alone on its line loses the spaces and tabs before it (unless "{%+");
// "%}" and "#}" swallow one following newline (unless "+%}"); "{% raw %}" is literal text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer::jinja {

enum class TokenKind : uint8_t {
  kText,        // literal template text (after whitespace control)
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,    // text holds the unescaped value
  kInteger,   // int_value
  kFloat,     // float_value
  kOperator,  // text holds the operator: + - * / // % ** ~ == != < <= > >= = . : | , ( ) [ ] { }
  kEof,
};

struct Token {
  TokenKind kind = TokenKind::kEof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  size_t offset = 0;  // in the normalised source, for line/column

  bool is_op(std::string_view op) const { return kind == TokenKind::kOperator && text == op; }
  bool is_name(std::string_view name) const { return kind == TokenKind::kName && text == name; }
};

// The normalised source (what offsets refer to) and its tokens, ending with kEof.
struct LexedTemplate {
  std::string source;
  std::vector<Token> tokens;
};

Result<LexedTemplate> lex(std::string_view source);

// "line L, column C" (both from 1; columns count characters) of an offset in `source`.
std::string describe_position(std::string_view source, size_t offset);

}  // namespace kvserve::tokenizer::jinja

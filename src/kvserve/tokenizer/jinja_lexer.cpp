#include "kvserve/tokenizer/jinja_lexer.h"

#include <charconv>
#include <cstdlib>

#include "kvserve/tokenizer/jinja_value.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer::jinja {
namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}
bool is_digit(char c) {
  return c >= '0' && c <= '9';
}
bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool is_name_char(char c) {
  return is_name_start(c) || is_digit(c);
}

// Python's str.rstrip() over ASCII and Unicode whitespace.
size_t rstrip_end(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    if (is_space(s[end - 1])) {
      --end;
      continue;
    }
    // A multi-byte whitespace character ends here?
    size_t start = end - 1;
    while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    if (utf8_sequence_length(s, start) != end - start) break;
    size_t pos = start;
    if (!python_isspace(decode_utf8(s, pos))) break;
    end = start;
  }
  return end;
}

// Python's unicode-escape decoding of a string literal's body (what jinja2 applies).
Status unescape(std::string_view body, std::string& out) {
  out.clear();
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 == body.size()) {
      out += c;
      continue;
    }
    const char e = body[++i];
    const auto hex = [&](size_t digits) -> Status {
      uint32_t cp = 0;
      for (size_t k = 1; k <= digits; ++k) {
        if (i + k >= body.size()) {
          return invalid_argument("truncated \\{} escape in a string literal", e);
        }
        const char h = body[i + k];
        const int v = (h >= '0' && h <= '9')   ? h - '0'
                      : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                      : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                               : -1;
        if (v < 0) return invalid_argument("truncated \\{} escape in a string literal", e);
        cp = cp * 16 + static_cast<uint32_t>(v);
      }
      if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        return invalid_argument("\\{} escape out of range in a string literal", e);
      }
      append_utf8(out, cp);
      i += digits;
      return Status::ok();
    };
    switch (e) {
      case '\n':
        break;  // line continuation
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'v':
        out += '\v';
        break;
      case 'x':
        KV_RETURN_IF_ERROR(hex(2));
        break;
      case 'u':
        KV_RETURN_IF_ERROR(hex(4));
        break;
      case 'U':
        KV_RETURN_IF_ERROR(hex(8));
        break;
      case 'N':
        return invalid_argument("\\N{{...}} escapes are not supported in string literals");
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int k = 0; k < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7';
               ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          append_utf8(out, cp);
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return Status::ok();
}

class Lexer {
 public:
  explicit Lexer(std::string source) { result_.source = std::move(source); }

  Result<LexedTemplate> run() {
    const std::string_view src = result_.source;
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src.size()) {
      const size_t start = find_tag(pos);
      if (start == std::string_view::npos) {
        emit_text(src.substr(pos), pos);
        break;
      }
      const char kind = src[start + 1];  // '{', '%' or '#'
      size_t after = start + 2;
      char sign = 0;
      if (after < src.size() && (src[after] == '-' || src[after] == '+')) sign = src[after++];
      size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(after, raw_body);
      std::string_view text = src.substr(pos, start - pos);
      text = control_text(text, sign, kind != '{', line_starting);
      emit_text(text, pos);
      if (raw) {
        KV_RETURN_IF_ERROR(lex_raw(start, raw_body, pos, line_starting));
      } else if (kind == '#') {
        KV_RETURN_IF_ERROR(lex_comment(start, after, pos, line_starting));
      } else {
        KV_RETURN_IF_ERROR(lex_tag(start, after, kind == '%', pos, line_starting));
      }
    }
    push(TokenKind::kEof, "", src.size());
    return std::move(result_);
  }

 private:
  size_t find_tag(size_t from) const {
    const std::string_view src = result_.source;
    for (size_t p = src.find('{', from); p != std::string_view::npos; p = src.find('{', p + 1)) {
      if (p + 1 < src.size() && (src[p + 1] == '{' || src[p + 1] == '%' || src[p + 1] == '#'))
        return p;
    }
    return std::string_view::npos;
  }

  // Whitespace control on the text before a tag: "-" strips it all; lstrip_blocks drops the
  // spaces/tabs between the last newline (or a line start) and a block or comment tag.
  static std::string_view control_text(std::string_view text, char sign, bool block_or_comment,
                                       bool line_starting) {
    if (sign == '-') return text.substr(0, rstrip_end(text));
    if (sign == '+' || !block_or_comment) return text;
    const size_t nl = text.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return text;
    for (size_t i = l_pos; i < text.size(); ++i) {
      if (text[i] != ' ' && text[i] != '\t') return text;
    }
    return text.substr(0, l_pos);
  }

  // "{%[-+]\s*raw\s*(-%}\s*|%})": sets body to the offset after it.
  bool match_raw_begin(size_t p, size_t& body) const {
    const std::string_view src = result_.source;
    while (p < src.size() && is_space(src[p]))
      ++p;
    if (src.substr(p, 3) != "raw") return false;
    p += 3;
    while (p < src.size() && is_space(src[p]))
      ++p;
    if (src.substr(p, 3) == "-%}") {
      p += 3;
      while (p < src.size() && is_space(src[p]))
        ++p;
    } else if (src.substr(p, 2) == "%}") {
      p += 2;
    } else {
      return false;
    }
    body = p;
    return true;
  }

  Status lex_raw(size_t start, size_t body, size_t& pos, bool& line_starting) {
    const std::string_view src = result_.source;
    for (size_t p = src.find("{%", body); p != std::string_view::npos; p = src.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src.size() && (src[q] == '-' || src[q] == '+')) sign = src[q++];
      while (q < src.size() && is_space(src[q]))
        ++q;
      if (src.substr(q, 6) != "endraw") continue;
      q += 6;
      while (q < src.size() && is_space(src[q]))
        ++q;
      size_t end = 0;
      if (!match_block_end(q, end)) continue;
      const bool raw_line_starting = src[body - 1] == '\n';
      emit_text(control_text(src.substr(body, p - body), sign, true, raw_line_starting), body);
      pos = end;
      line_starting = src[end - 1] == '\n';
      return Status::ok();
    }
    return error(start, "missing end of raw directive");
  }

  Status lex_comment(size_t start, size_t after, size_t& pos, bool& line_starting) {
    const std::string_view src = result_.source;
    const size_t close = src.find("#}", after);
    if (close == std::string_view::npos) return error(start, "missing end of comment tag");
    size_t end = close + 2;
    if (close > after && src[close - 1] == '-') {
      while (end < src.size() && is_space(src[end]))
        ++end;
    } else if (!(close > after && src[close - 1] == '+') && end < src.size() && src[end] == '\n') {
      ++end;  // trim_blocks
    }
    pos = end;
    line_starting = src[end - 1] == '\n';
    return Status::ok();
  }

  // A block end at p ("+%}", "-%}\s*", "%}\n?"); sets end past it.
  bool match_block_end(size_t p, size_t& end) const {
    const std::string_view src = result_.source;
    if (src.substr(p, 3) == "+%}") {
      end = p + 3;
      return true;
    }
    if (src.substr(p, 3) == "-%}") {
      end = p + 3;
      while (end < src.size() && is_space(src[end]))
        ++end;
      return true;
    }
    if (src.substr(p, 2) == "%}") {
      end = p + 2;
      if (end < src.size() && src[end] == '\n') ++end;
      return true;
    }
    return false;
  }

  bool match_var_end(size_t p, size_t& end) const {
    const std::string_view src = result_.source;
    if (src.substr(p, 3) == "-}}") {
      end = p + 3;
      while (end < src.size() && is_space(src[end]))
        ++end;
      return true;
    }
    if (src.substr(p, 2) == "}}") {
      end = p + 2;
      return true;
    }
    return false;
  }

  Status lex_tag(size_t start, size_t p, bool block, size_t& pos, bool& line_starting) {
    const std::string_view src = result_.source;
    push(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", start);
    std::string brackets;  // jinja2's balancing stack: ends only match when it is empty
    while (true) {
      if (p >= src.size()) {
        return error(start, block ? "unexpected end of template: '{%' not closed by '%}'"
                                  : "unexpected end of template: '{{' not closed by '}}'");
      }
      size_t end = 0;
      if (brackets.empty() && (block ? match_block_end(p, end) : match_var_end(p, end))) {
        push(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", p);
        pos = end;
        line_starting = src[end - 1] == '\n';
        return Status::ok();
      }
      const char c = src[p];
      if (is_space(c)) {
        ++p;
      } else if (is_digit(c)) {
        KV_RETURN_IF_ERROR(lex_number(p));
      } else if (is_name_start(c)) {
        const size_t b = p;
        while (p < src.size() && is_name_char(src[p]))
          ++p;
        push(TokenKind::kName, std::string(src.substr(b, p - b)), b);
      } else if (c == '\'' || c == '"') {
        KV_RETURN_IF_ERROR(lex_string(p));
      } else {
        KV_RETURN_IF_ERROR(lex_operator(p, brackets));
      }
    }
  }

  Status lex_number(size_t& p) {
    const std::string_view src = result_.source;
    const size_t b = p;
    const auto digits = [&] {
      while (p < src.size() && (is_digit(src[p]) || (src[p] == '_' && p + 1 < src.size() &&
                                                     is_digit(src[p + 1]) && is_digit(src[p - 1]))))
        ++p;
    };
    digits();
    // jinja2's float rule does not apply right after a '.' (x.0.1 is attribute access).
    const bool after_dot = b > 0 && src[b - 1] == '.';
    bool is_float = false;
    if (!after_dot && p + 1 < src.size() && src[p] == '.' && is_digit(src[p + 1])) {
      ++p;
      digits();
      is_float = true;
    }
    if (!after_dot && p < src.size() && (src[p] == 'e' || src[p] == 'E')) {
      size_t q = p + 1;
      if (q < src.size() && (src[q] == '+' || src[q] == '-')) ++q;
      if (q < src.size() && is_digit(src[q])) {
        p = q;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (char c : src.substr(b, p - b)) {
      if (c != '_') text += c;
    }
    Token t;
    t.offset = b;
    if (is_float) {
      t.kind = TokenKind::kFloat;
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      t.kind = TokenKind::kInteger;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), t.int_value);
      if (r.ec != std::errc()) return error(b, "integer literal too large");
    }
    t.text = std::move(text);
    result_.tokens.push_back(std::move(t));
    return Status::ok();
  }

  Status lex_string(size_t& p) {
    const std::string_view src = result_.source;
    const char quote = src[p];
    const size_t b = p;
    size_t q = p + 1;
    while (q < src.size() && src[q] != quote) {
      q += src[q] == '\\' ? 2 : 1;
    }
    if (q >= src.size()) return error(b, "unterminated string literal");
    std::string value;
    Status s = unescape(src.substr(b + 1, q - b - 1), value);
    if (!s.is_ok()) return error(b, s.message());
    push(TokenKind::kString, std::move(value), b);
    p = q + 1;
    return Status::ok();
  }

  Status lex_operator(size_t& p, std::string& brackets) {
    const std::string_view src = result_.source;
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src.substr(p, 2) == op) {
        push(TokenKind::kOperator, std::string(op), p);
        p += 2;
        return Status::ok();
      }
    }
    const char c = src[p];
    if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos) {
      return error(p, fmt::format("unexpected char '{}'", utf8_chars(src.substr(p, 4))[0]));
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) return error(p, fmt::format("unexpected '{}'", c));
      if (brackets.back() != c) {
        return error(p, fmt::format("unexpected '{}', expected '{}'", c, brackets.back()));
      }
      brackets.pop_back();
    }
    push(TokenKind::kOperator, std::string(1, c), p);
    ++p;
    return Status::ok();
  }

  void emit_text(std::string_view text, size_t offset) {
    if (!text.empty()) push(TokenKind::kText, std::string(text), offset);
  }

  void push(TokenKind kind, std::string text, size_t offset) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.offset = offset;
    result_.tokens.push_back(std::move(t));
  }

  Status error(size_t offset, std::string_view message) const {
    return invalid_argument("chat template syntax error at {}: {}",
                            describe_position(result_.source, offset), message);
  }

  LexedTemplate result_;
};

}  // namespace

Result<LexedTemplate> lex(std::string_view source) {
  // Newlines normalised to "\n"; one trailing newline dropped (keep_trailing_newline=False).
  std::string normalized;
  normalized.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      normalized += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      normalized += source[i];
    }
  }
  if (!normalized.empty() && normalized.back() == '\n') normalized.pop_back();
  return Lexer(std::move(normalized)).run();
}

std::string describe_position(std::string_view source, size_t offset) {
  offset = std::min(offset, source.size());
  int line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset; ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  const size_t column = utf8_length(source.substr(line_start, offset - line_start)) + 1;
  return fmt::format("line {}, column {}", line, column);
}

}  // namespace kvserve::tokenizer::jinja

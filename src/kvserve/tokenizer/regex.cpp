#include "kvserve/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <cctype>
#include <nlohmann/json.hpp>

#include "kvserve/core/check.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Oniguruma's and Rust regex's \s is Unicode White_Space, which also holds U+0085 (NEL); PCRE2's
// \s under UCP does not. Rewrites \s / \S (outside and inside character classes) to include it.
std::string translate_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      ++i;
      if (e == 's') {
        out += in_class ? "\\s\\x{85}" : "[\\s\\x{85}]";
      } else if (e == 'S' && !in_class) {
        out += "[^\\s\\x{85}]";
      } else {
        out.push_back('\\');
        out.push_back(e);
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out.push_back(c);
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out.push_back(pattern[++i]);
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out.push_back(pattern[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

std::string escape_literal(std::string_view literal) {
  // Every ASCII punctuation character is escaped (PCRE2 takes "\\<punct>" as that character);
  // letters, digits and non-ASCII bytes stand for themselves.
  std::string out;
  out.reserve(literal.size() * 2);
  for (const char c : literal) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x80 && !std::isalnum(b)) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

}  // namespace

Result<Regex> Regex::compile(std::string_view pattern, std::string_view what) {
  const std::string translated = translate_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                    PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return invalid_argument("{}: cannot compile regex '{}' at offset {}: {}", what, pattern, offset,
                            reinterpret_cast<const char*>(message));
  }
  auto holder = std::make_shared<Code>();
  holder->code = code;
  holder->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(holder);
  regex.pattern_ = std::string(pattern);
  return regex;
}

Result<Regex> Regex::literal(std::string_view literal, std::string_view what) {
  // An empty string matches nothing in Hugging Face (not the empty string everywhere).
  KV_ASSIGN_OR_RETURN(Regex regex,
                      compile(literal.empty() ? "(*FAIL)" : escape_literal(literal), what));
  regex.pattern_ = std::string(literal);
  return regex;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  KV_CHECK(code_ != nullptr, "find_all on a default-constructed Regex");
  pcre2_match_data* data = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  KV_CHECK(data != nullptr, "pcre2_match_data_create_from_pattern failed");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = code_->jit
                 ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, data, nullptr)
                 : -1;
    if (!code_->jit || rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    KV_CHECK(rc > 0, "PCRE2 match of '{}' failed with code {}", pattern_, rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t s = ovector[0], e = ovector[1];
    matches.emplace_back(s, e);
    if (e > s) {
      start = e;
    } else {
      if (e >= text.size()) break;
      const size_t len = utf8_sequence_length(text, e);
      start = e + (len == 0 ? 1 : len);
    }
  }
  pcre2_match_data_free(data);
}

Result<Regex> make_pattern(const nlohmann::json& pattern, std::string_view what) {
  if (pattern.is_object() && pattern.contains("String")) {
    return Regex::literal(pattern.at("String").get<std::string>(), what);
  }
  if (pattern.is_object() && pattern.contains("Regex")) {
    return Regex::compile(pattern.at("Regex").get<std::string>(), what);
  }
  return invalid_argument("{}: a pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}, got {}",
                          what, pattern.dump());
}

std::string regex_replace_all(const Regex& regex, std::string_view text, std::string_view content) {
  std::vector<std::pair<size_t, size_t>> matches;
  regex.find_all(text, matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size());
  size_t prev = 0;
  for (const auto& [s, e] : matches) {
    out.append(text.substr(prev, s - prev));
    out.append(content);
    prev = e;
  }
  out.append(text.substr(prev));
  return out;
}

}  // namespace kvserve::tokenizer

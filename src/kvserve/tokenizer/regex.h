// A compiled PCRE2 regular expression (UTF + UCP, JIT when available) for the patterns of
// tokenizer.json files (\p{L}, \p{N}, lookaheads, (?i:...)). Thread-safe: matching allocates
// its own match data.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

class Regex {
 public:
  // `what` names the pattern's owner in error messages (e.g. "Split pre-tokenizer in <file>").
  static Result<Regex> compile(std::string_view pattern, std::string_view what);
  // A pattern that matches `literal` exactly.
  static Result<Regex> literal(std::string_view literal, std::string_view what);

  // Appends the [start, end) byte ranges of all non-overlapping matches in `text` (valid UTF-8),
  // left to right. An empty match advances the search by one character.
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string pattern_;
};

// A tokenizer.json pattern: {"String": "..."} (a literal) or {"Regex": "..."}.
Result<Regex> make_pattern(const nlohmann::json& pattern, std::string_view what);

// Replaces every match of `regex` in `text` with `content`.
std::string regex_replace_all(const Regex& regex, std::string_view text, std::string_view content);

}  // namespace kvserve::tokenizer

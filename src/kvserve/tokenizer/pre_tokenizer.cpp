#include "kvserve/tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "kvserve/tokenizer/byte_level.h"
#include "kvserve/tokenizer/regex.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

using nlohmann::json;
using Ranges = std::vector<std::pair<size_t, size_t>>;

// GPT-2's pre-tokenization regex (ByteLevel with use_regex).
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Splits every piece with `regex` and `behavior`.
void split_all(std::vector<PreToken>& pieces, const Regex& regex, bool invert,
               SplitBehavior behavior) {
  std::vector<PreToken> out;
  out.reserve(pieces.size() * 4);
  Ranges matches;
  for (const PreToken& piece : pieces) {
    matches.clear();
    regex.find_all(piece.text, matches);
    split_pieces(piece, matches, invert, behavior, out);
  }
  pieces = std::move(out);
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Regex regex, SplitBehavior behavior, bool invert)
      : regex_(std::move(regex)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    split_all(pieces, regex_, invert_, behavior_);
  }

 private:
  Regex regex_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::optional<Regex> regex)
      : add_prefix_space_(add_prefix_space), regex_(std::move(regex)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    if (add_prefix_space_) {
      for (PreToken& p : pieces) {
        if (!p.text.starts_with(' ')) p.text.insert(0, " ");
      }
    }
    if (regex_.has_value()) split_all(pieces, *regex_, false, SplitBehavior::kIsolated);
    std::string mapped;
    for (PreToken& p : pieces) {
      mapped.clear();
      append_byte_level(mapped, p.text);
      p.text.swap(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::optional<Regex> regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> children)
      : children_(std::move(children)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (const auto& c : children_)
      c->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> children_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(std::string replacement, PrependScheme scheme, bool split, Regex space,
                        Regex replacement_regex)
      : replacement_(std::move(replacement)),
        scheme_(scheme),
        split_(split),
        space_(std::move(space)),
        replacement_regex_(std::move(replacement_regex)) {}
  void pre_tokenize(std::vector<PreToken>& pieces) const override {
    for (PreToken& p : pieces) {
      p.text = regex_replace_all(space_, p.text, replacement_);
      const bool prepend =
          scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_start);
      if (prepend && !p.text.starts_with(replacement_)) p.text.insert(0, replacement_);
    }
    if (split_) split_all(pieces, replacement_regex_, false, SplitBehavior::kMergedWithNext);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
  bool split_;
  Regex space_;
  Regex replacement_regex_;
};

Result<SplitBehavior> parse_behavior(const json& j, std::string_view file) {
  const std::string b = j.get<std::string>();
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return invalid_argument("{}: unknown split behavior '{}'", file, b);
}

std::unique_ptr<PreTokenizer> regex_splitter(Result<Regex> regex, SplitBehavior behavior,
                                             bool invert) {
  KV_CHECK(regex.is_ok(), "built-in pattern: {}", regex.status().to_string());
  return std::make_unique<SplitPreTokenizer>(std::move(regex).value(), behavior, invert);
}

}  // namespace

void split_pieces(const PreToken& piece, const Ranges& matches, bool invert, SplitBehavior behavior,
                  std::vector<PreToken>& out) {
  const std::string& text = piece.text;
  if (text.empty()) return;
  // (start, end, is_delimiter) covering the text.
  struct Part {
    size_t start, end;
    bool is_match;
  };
  std::vector<Part> parts;
  parts.reserve(matches.size() * 2 + 1);
  size_t prev = 0;
  for (const auto& [s, e] : matches) {
    if (prev != s) parts.push_back({prev, s, invert});
    parts.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != text.size()) parts.push_back({prev, text.size(), invert});

  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(parts.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Part& p : parts)
        kept.emplace_back(p.start, p.end);
      break;
    case SplitBehavior::kRemoved:
      for (const Part& p : parts) {
        if (!p.is_match) kept.emplace_back(p.start, p.end);
      }
      break;
    case SplitBehavior::kContiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.start, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().second = p.end;
        } else {
          kept.emplace_back(p.start, p.end);
        }
        previous_match = p.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = parts.size(); i-- > 0;) {
        const Part& p = parts[i];
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().first = p.start;
        } else {
          kept.emplace_back(p.start, p.end);
        }
        previous_match = p.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [s, e] : kept) {
    if (s == e) continue;
    out.push_back(PreToken{text.substr(s, e - s), piece.at_start && s == 0});
  }
}

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const json& j, std::string_view file) {
  using Ptr = std::unique_ptr<PreTokenizer>;
  if (j.is_null()) return Ptr();
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<Ptr> children;
    for (const json& child : j.at("pretokenizers")) {
      KV_ASSIGN_OR_RETURN(Ptr c, make_pre_tokenizer(child, file));
      if (c != nullptr) children.push_back(std::move(c));
    }
    return Ptr(std::make_unique<SequencePreTokenizer>(std::move(children)));
  }
  if (type == "ByteLevel") {
    std::optional<Regex> regex;
    if (j.value("use_regex", true)) {
      KV_ASSIGN_OR_RETURN(Regex r, Regex::compile(kGpt2Pattern, "ByteLevel pre-tokenizer"));
      regex = std::move(r);
    }
    return Ptr(std::make_unique<ByteLevelPreTokenizer>(j.value("add_prefix_space", true),
                                                       std::move(regex)));
  }
  if (type == "Split") {
    const std::string what = fmt::format("Split pre-tokenizer in {}", file);
    KV_ASSIGN_OR_RETURN(Regex regex, make_pattern(j.at("pattern"), what));
    KV_ASSIGN_OR_RETURN(SplitBehavior behavior, parse_behavior(j.at("behavior"), file));
    return Ptr(
        std::make_unique<SplitPreTokenizer>(std::move(regex), behavior, j.value("invert", false)));
  }
  if (type == "Metaspace") {
    const std::string replacement = j.value("replacement", std::string("\u2581"));
    if (replacement.empty() || utf8_sequence_length(replacement, 0) != replacement.size()) {
      return invalid_argument("{}: Metaspace replacement must be one character, got '{}'", file,
                              replacement);
    }
    PrependScheme scheme = PrependScheme::kAlways;
    if (j.contains("prepend_scheme")) {
      const std::string s = j.at("prepend_scheme").get<std::string>();
      if (s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return invalid_argument("{}: unknown Metaspace prepend_scheme '{}'", file, s);
      }
    } else if (j.contains("add_prefix_space")) {
      scheme =
          j.at("add_prefix_space").get<bool>() ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    KV_ASSIGN_OR_RETURN(Regex space, Regex::literal(" ", "Metaspace"));
    KV_ASSIGN_OR_RETURN(Regex rep, Regex::literal(replacement, "Metaspace"));
    return Ptr(std::make_unique<MetaspacePreTokenizer>(replacement, scheme, j.value("split", true),
                                                       std::move(space), std::move(rep)));
  }
  if (type == "Digits") {
    // char::is_numeric: one piece per digit, or runs of digits.
    return regex_splitter(
        Regex::compile(R"(\p{N})", "Digits"),
        j.value("individual_digits", false) ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
        false);
  }
  if (type == "Punctuation") {
    SplitBehavior behavior = SplitBehavior::kIsolated;
    if (j.contains("behavior")) {
      KV_ASSIGN_OR_RETURN(behavior, parse_behavior(j.at("behavior"), file));
    }
    return regex_splitter(Regex::compile(R"([\p{P}!-/:-@\[-`{-~])", "Punctuation"), behavior,
                          false);
  }
  if (type == "Whitespace") {
    // Rust regex's Unicode \w: Alphabetic, marks, decimal digits, connector punctuation, joiners.
    constexpr std::string_view kWord = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])";
    const std::string pattern =
        fmt::format("{0}+|[^\\s{1}]+", kWord, kWord.substr(1, kWord.size() - 2));
    return regex_splitter(Regex::compile(pattern, "Whitespace"), SplitBehavior::kRemoved, true);
  }
  if (type == "WhitespaceSplit") {
    return regex_splitter(Regex::compile(R"(\s+)", "WhitespaceSplit"), SplitBehavior::kRemoved,
                          false);
  }
  return make_status(StatusCode::kUnimplemented,
                     "{}: pre_tokenizer type '{}' is not supported (supported: ByteLevel, Split, "
                     "Sequence, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit)",
                     file, type);
}

}  // namespace kvserve::tokenizer

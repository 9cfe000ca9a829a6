// Pre-tokenizers of tokenizer.json ("pre_tokenizer"): ByteLevel, Split (regex or string; every
// split behavior; invert), Sequence, Metaspace, Digits, Punctuation, Whitespace, WhitespaceSplit.
// Others (BertPreTokenizer, CharDelimiterSplit, UnicodeScripts, ...) are kUnimplemented.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

struct PreToken {
  std::string text;
  // The piece begins at the start of the whole input (Metaspace's prepend_scheme "first").
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces (empty pieces are dropped).
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// How a piece is cut around the matches of a pattern (Hugging Face's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` into pieces around `matches` (sorted, non-overlapping byte ranges); with `invert`
// the matches are the kept parts and the gaps the delimiters. Appends non-empty pieces to `out`.
void split_pieces(const PreToken& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                  bool invert, SplitBehavior behavior, std::vector<PreToken>& out);

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& json,
                                                         std::string_view file);

}  // namespace kvserve::tokenizer

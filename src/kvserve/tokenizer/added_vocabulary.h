// Added tokens of tokenizer.json ("added_tokens"): matched in the text before the model runs,
// leftmost-longest, as Hugging Face's AddedVocabulary. Tokens with normalized=false are found in
// the raw text; tokens with normalized=true in the normalized text (their content normalized the
// same way). single_word, lstrip and rstrip behave as in Hugging Face.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "kvserve/tokenizer/bpe.h"
#include "kvserve/tokenizer/regex.h"

namespace kvserve::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class AddedVocabulary {
 public:
  AddedVocabulary();
  // Replaces the tokens (later duplicates of a content win).
  void build(std::vector<AddedToken> tokens, const Normalizer* normalizer);

  // A piece of the text: an added token (id >= 0) or plain text (id == -1), as byte offsets.
  struct Segment {
    size_t begin;
    size_t end;
    int32_t id;
  };
  // Splits `text` with the raw (normalized=false) or the normalized (normalized=true) tokens.
  void split(std::string_view text, bool normalized_tokens, std::vector<Segment>& out) const;

  std::optional<int32_t> token_to_id(std::string_view content) const;
  const AddedToken* find(int32_t id) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  struct Trie {
    struct Node {
      std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
      int32_t token = -1;                                 // index into tokens_
    };
    std::vector<Node> nodes{1};
    void insert(std::string_view key, int32_t token);
    // The longest key starting at text[pos]: (token, length), or token -1.
    std::pair<int32_t, size_t> longest(std::string_view text, size_t pos) const;
  };

  bool is_word_char_at_end(std::string_view s) const;
  bool is_word_char_at_start(std::string_view s) const;

  std::vector<AddedToken> tokens_;
  StringMap<int32_t> content_to_id_;
  std::unordered_map<int32_t, size_t> id_to_index_;
  Trie raw_trie_;
  Trie normalized_trie_;
  Regex word_char_;
};

}  // namespace kvserve::tokenizer

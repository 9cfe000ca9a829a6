#include "kvserve/tokenizer/added_vocabulary.h"

#include <algorithm>

#include "kvserve/tokenizer/normalizer.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

// Rust regex's Unicode \w, which Hugging Face uses for single_word.
constexpr std::string_view kWordChar = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])";

Regex compile_word_char() {
  auto r = Regex::compile(kWordChar, "added-token word characters");
  KV_CHECK(r.is_ok(), "{}", r.status().to_string());
  return std::move(r).value();
}

// Start of the last character of non-empty valid UTF-8.
size_t last_char_start(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80)
    --i;
  return i;
}

}  // namespace

AddedVocabulary::AddedVocabulary() : word_char_(compile_word_char()) {}

void AddedVocabulary::Trie::insert(std::string_view key, int32_t token) {
  int32_t node = 0;
  for (const char c : key) {
    const auto b = static_cast<uint8_t>(c);
    auto& children = nodes[static_cast<size_t>(node)].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, uint8_t v) { return child.first < v; });
    if (it != children.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const auto next = static_cast<int32_t>(nodes.size());
    children.insert(it, {b, next});
    nodes.emplace_back();
    node = next;
  }
  nodes[static_cast<size_t>(node)].token = token;
}

std::pair<int32_t, size_t> AddedVocabulary::Trie::longest(std::string_view text, size_t pos) const {
  std::pair<int32_t, size_t> best{-1, 0};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto b = static_cast<uint8_t>(text[i]);
    const auto& children = nodes[static_cast<size_t>(node)].children;
    auto it = std::lower_bound(children.begin(), children.end(), b,
                               [](const auto& child, uint8_t v) { return child.first < v; });
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes[static_cast<size_t>(node)].token >= 0) {
      best = {nodes[static_cast<size_t>(node)].token, i + 1 - pos};
    }
  }
  return best;
}

void AddedVocabulary::build(std::vector<AddedToken> tokens, const Normalizer* normalizer) {
  tokens_ = std::move(tokens);
  content_to_id_.clear();
  id_to_index_.clear();
  raw_trie_ = Trie();
  normalized_trie_ = Trie();
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const AddedToken& t = tokens_[i];
    content_to_id_[t.content] = t.id;
    id_to_index_[t.id] = i;
    if (t.content.empty()) continue;
    if (t.normalized && normalizer != nullptr) {
      std::string normalized = t.content;
      normalizer->normalize(normalized);
      if (!normalized.empty()) normalized_trie_.insert(normalized, static_cast<int32_t>(i));
    } else if (t.normalized) {
      normalized_trie_.insert(t.content, static_cast<int32_t>(i));
    } else {
      raw_trie_.insert(t.content, static_cast<int32_t>(i));
    }
  }
}

bool AddedVocabulary::is_word_char_at_end(std::string_view s) const {
  if (s.empty()) return false;
  std::vector<std::pair<size_t, size_t>> m;
  word_char_.find_all(s.substr(last_char_start(s)), m);
  return !m.empty();
}

bool AddedVocabulary::is_word_char_at_start(std::string_view s) const {
  if (s.empty()) return false;
  const size_t len = utf8_sequence_length(s, 0);
  std::vector<std::pair<size_t, size_t>> m;
  word_char_.find_all(s.substr(0, len == 0 ? 1 : len), m);
  return !m.empty();
}

void AddedVocabulary::split(std::string_view text, bool normalized_tokens,
                            std::vector<Segment>& out) const {
  const Trie& trie = normalized_tokens ? normalized_trie_ : raw_trie_;
  if (trie.nodes.size() == 1) {
    if (!text.empty()) out.push_back({0, text.size(), -1});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [index, length] = trie.longest(text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[static_cast<size_t>(index)];
    size_t start = pos, stop = pos + length;
    pos = stop;  // the next search starts after this match, taken or not
    if (token.single_word) {
      const bool start_space = start == 0 || !is_word_char_at_end(text.substr(0, start));
      const bool stop_space = stop == text.size() || !is_word_char_at_start(text.substr(stop));
      if (!start_space || !stop_space) continue;
    }
    if (token.lstrip) {
      size_t s = start;
      while (s > 0) {
        const size_t c = last_char_start(text.substr(0, s));
        size_t p = c;
        if (!is_unicode_whitespace(decode_utf8(text, p))) break;
        s = c;
      }
      start = std::max(s, start_offset);
    }
    if (token.rstrip) {
      while (stop < text.size()) {
        size_t p = stop;
        if (!is_unicode_whitespace(decode_utf8(text, p))) break;
        stop = p;
      }
    }
    if (stop <= start_offset) continue;  // inside what an rstrip already took
    start = std::max(start, start_offset);
    if (start_offset < start) out.push_back({start_offset, start, -1});
    out.push_back({start, stop, token.id});
    start_offset = stop;
  }
  if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
  const auto it = content_to_id_.find(content);
  if (it == content_to_id_.end()) return std::nullopt;
  return it->second;
}

const AddedToken* AddedVocabulary::find(int32_t id) const {
  const auto it = id_to_index_.find(id);
  return it == id_to_index_.end() ? nullptr : &tokens_[it->second];
}

}  // namespace kvserve::tokenizer

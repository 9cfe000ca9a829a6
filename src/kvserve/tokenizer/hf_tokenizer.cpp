#include "kvserve/tokenizer/hf_tokenizer.h"

#include <algorithm>

#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {

HfTokenizer::HfTokenizer(HfTokenizerParts parts) : parts_(std::move(parts)) {
  KV_CHECK(parts_.model != nullptr, "a tokenizer needs a model");
  vocab_size_ = parts_.model->vocab_size();
  for (const AddedToken& t : parts_.added_tokens)
    vocab_size_ = std::max(vocab_size_, t.id + 1);
  added_.build(std::move(parts_.added_tokens), parts_.normalizer.get());
  parts_.added_tokens.clear();
}

std::vector<int32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  // Input that is not UTF-8 is read as from_utf8_lossy would.
  std::string repaired;
  if (!is_valid_utf8(text)) {
    repaired = utf8_lossy(text);
    text = repaired;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<AddedVocabulary::Segment> segments, sub_segments;
  added_.split(text, /*normalized_tokens=*/false, segments);
  std::vector<PreToken> pieces;
  std::string normalized;
  for (const auto& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
      continue;
    }
    normalized.assign(text.substr(seg.begin, seg.end - seg.begin));
    if (parts_.normalizer != nullptr) parts_.normalizer->normalize(normalized);
    if (normalized.empty()) continue;
    sub_segments.clear();
    added_.split(normalized, /*normalized_tokens=*/true, sub_segments);
    for (const auto& sub : sub_segments) {
      if (sub.id >= 0) {
        ids.push_back(sub.id);
        continue;
      }
      pieces.clear();
      pieces.push_back(PreToken{normalized.substr(sub.begin, sub.end - sub.begin),
                                seg.begin == 0 && sub.begin == 0});
      if (parts_.pre_tokenizer != nullptr) parts_.pre_tokenizer->pre_tokenize(pieces);
      for (const PreToken& p : pieces)
        parts_.model->tokenize(p.text, ids);
    }
  }
  if (add_special_tokens) parts_.special_template.apply(ids);
  return ids;
}

std::string HfTokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    if (const AddedToken* added = added_.find(id)) {
      if (!(skip_special_tokens && added->special)) tokens.push_back(added->content);
    } else if (const std::string* token = parts_.model->id_to_token(id)) {
      tokens.push_back(*token);
    }
  }
  std::string out;
  if (parts_.decoder != nullptr) {
    parts_.decoder->decode_chain(tokens);
    for (const std::string& t : tokens)
      out += t;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
  }
  return out;
}

std::optional<int32_t> HfTokenizer::token_to_id(std::string_view token) const {
  if (auto id = added_.token_to_id(token)) return id;
  return parts_.model->token_to_id(token);
}

std::optional<std::string> HfTokenizer::id_to_token(int32_t id) const {
  if (const AddedToken* added = added_.find(id)) return added->content;
  if (const std::string* token = parts_.model->id_to_token(id)) return *token;
  return std::nullopt;
}

bool HfTokenizer::is_special(int32_t id) const {
  const AddedToken* added = added_.find(id);
  return added != nullptr && added->special;
}

}  // namespace kvserve::tokenizer

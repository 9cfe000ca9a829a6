// IncrementalDetokenizer: SGLang's / TGI's surr_offset + read_offset streaming scheme.
#include "kvserve/tokenizer/tokenizer.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  auto decode = [&](size_t end) {
    return tokenizer_.decode(all.subspan(prefix_offset_, end - prefix_offset_),
                             skip_special_tokens_);
  };
  // The text already emitted for ids[prefix, read) and the text with the new ids, decoded in the
  // same window so that context-dependent decoders (a stripped leading space) agree on both.
  const std::string prefix_text = decode(read_offset_);
  const std::string new_text = decode(ids_.size());
  if (new_text.size() <= prefix_text.size()) return {};
  size_t settle = ids_.size();
  std::string settled = new_text;
  // A trailing U+FFFD is an incomplete character: wait for the bytes that complete it. A
  // character has at most 4 bytes, so once kMaxPendingTokens tokens wait, the window holds bytes
  // that will never complete (a model emitting invalid UTF-8): settle at the last token boundary
  // that ends on a whole character, so the window (and the cost of each push) stays bounded.
  if (ends_with_replacement(new_text)) {
    if (ids_.size() - read_offset_ < kMaxPendingTokens) return {};
    settle = ids_.size() - 1;
    for (; settle > read_offset_; --settle) {
      settled = decode(settle);
      if (!ends_with_replacement(settled) && settled.size() > prefix_text.size()) break;
    }
    if (settle == read_offset_) {  // invalid bytes all the way: keep only a possible lead byte
      settle = ids_.size() - 1;
      settled = decode(settle);
      if (settled.size() <= prefix_text.size()) return {};
    }
  }
  std::string delta = settled.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = settle;
  return delta;
}

std::string IncrementalDetokenizer::finish() {
  const std::span<const int32_t> all(ids_);
  const std::string prefix_text = tokenizer_.decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_tokens_);
  prefix_offset_ = read_offset_ = ids_.size();
  if (new_text.size() <= prefix_text.size()) return {};
  return new_text.substr(prefix_text.size());
}

}  // namespace kvserve::tokenizer

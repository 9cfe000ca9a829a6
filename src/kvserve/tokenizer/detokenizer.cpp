// IncrementalDetokenizer: SGLang's / TGI's surr_offset + read_offset streaming scheme.
#include "kvserve/tokenizer/tokenizer.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  ids_.push_back(id);
  const std::span<const int32_t> all(ids_);
  // The text already emitted for ids[prefix, read) and the text with the new ids, decoded in the
  // same window so that context-dependent decoders (a stripped leading space) agree on both.
  const std::string prefix_text = tokenizer_.decode(
      all.subspan(prefix_offset_, read_offset_ - prefix_offset_), skip_special_tokens_);
  const std::string new_text = tokenizer_.decode(all.subspan(prefix_offset_), skip_special_tokens_);
  // A trailing U+FFFD is an incomplete character: wait for the bytes that complete it.
  if (new_text.size() <= prefix_text.size() || ends_with_replacement(new_text)) return {};
  std::string delta = new_text.substr(prefix_text.size());
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
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

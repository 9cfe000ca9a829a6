// The Tokenizer built from a tokenizer.json: added tokens -> normalizer -> pre-tokenizer -> BPE
// -> post-processor template, and the decoder chain back (Hugging Face's pipeline).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/tokenizer/added_vocabulary.h"
#include "kvserve/tokenizer/bpe.h"
#include "kvserve/tokenizer/decoder.h"
#include "kvserve/tokenizer/normalizer.h"
#include "kvserve/tokenizer/post_processor.h"
#include "kvserve/tokenizer/pre_tokenizer.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::tokenizer {

struct HfTokenizerParts {
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::vector<AddedToken> added_tokens;
  SpecialTokenTemplate special_template;
  std::unique_ptr<Decoder> decoder;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> eos_token_id;
  std::string chat_template;
};

class HfTokenizer final : public Tokenizer {
 public:
  explicit HfTokenizer(HfTokenizerParts parts);

  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const override;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens) const override;
  int32_t vocab_size() const override { return vocab_size_; }
  std::optional<int32_t> token_to_id(std::string_view token) const override;
  std::optional<std::string> id_to_token(int32_t id) const override;
  bool is_special(int32_t id) const override;
  std::optional<int32_t> bos_token_id() const override { return parts_.bos_token_id; }
  std::optional<int32_t> eos_token_id() const override { return parts_.eos_token_id; }
  const std::string& chat_template() const override { return parts_.chat_template; }

 private:
  HfTokenizerParts parts_;
  AddedVocabulary added_;
  int32_t vocab_size_ = 0;
};

}  // namespace kvserve::tokenizer

// Tokenizers from Hugging Face tokenizer.json files (+ tokenizer_config.json).
//
// Supported models: BPE with a byte-level pre-tokenizer (GPT-2, Llama-3, Qwen2: split by the
// model's regex, bytes mapped to unicode, merges by rank) and SentencePiece-style BPE (Llama-2,
// Mistral: "▁" for spaces, byte fallback <0xNN>), plus added/special tokens matched before the
// model, and the normalizers / pre-tokenizers / decoders those files use. Regexes run on PCRE2.
// Anything else in a tokenizer.json is a clear kUnimplemented error naming the component.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::tokenizer {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Loads <dir>/tokenizer.json and, when present, <dir>/tokenizer_config.json (bos/eos,
  // add_bos_token, chat_template).
  static Result<std::unique_ptr<Tokenizer>> from_directory(const std::filesystem::path& dir);
  static Result<std::unique_ptr<Tokenizer>> from_files(
      const std::filesystem::path& tokenizer_json,
      const std::optional<std::filesystem::path>& tokenizer_config_json);

  // add_special_tokens: the template's special tokens (e.g. Llama's BOS) are added as the
  // tokenizer.json post_processor / tokenizer_config.json says.
  virtual std::vector<int32_t> encode(std::string_view text,
                                      bool add_special_tokens = true) const = 0;
  // Concatenates the pieces; invalid UTF-8 produced by byte tokens becomes U+FFFD as in HF.
  virtual std::string decode(std::span<const int32_t> ids,
                             bool skip_special_tokens = true) const = 0;

  virtual int32_t vocab_size() const = 0;  // including added tokens
  virtual std::optional<int32_t> token_to_id(std::string_view token) const = 0;
  virtual std::optional<std::string> id_to_token(int32_t id) const = 0;
  virtual bool is_special(int32_t id) const = 0;

  virtual std::optional<int32_t> bos_token_id() const = 0;
  virtual std::optional<int32_t> eos_token_id() const = 0;
  // tokenizer_config.json's chat_template (empty when absent).
  virtual const std::string& chat_template() const = 0;
};

// Streaming detokenization (SGLang's surr_offset / read_offset scheme): feed ids one at a time and
// get only the text that is final. Never emits half a UTF-8 character; the text of a token that
// might still change with the next tokens is held back until it cannot.
class IncrementalDetokenizer {
 public:
  IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true);
  // The new final text after appending `id`.
  std::string push(int32_t id);
  // Whatever is still held back (at end of stream), with incomplete UTF-8 replaced by U+FFFD.
  std::string finish();

  // More tokens than a UTF-8 character has bytes: text still incomplete after this many pending
  // tokens is invalid, and is emitted (with U+FFFD) instead of held back.
  static constexpr size_t kMaxPendingTokens = 6;
  size_t pending_tokens() const { return ids_.size() - read_offset_; }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;
  size_t prefix_offset_ = 0;  // ids before this are fully emitted and no longer decoded
  size_t read_offset_ = 0;    // text of ids[prefix_offset_, read_offset_) was emitted
};

}  // namespace kvserve::tokenizer

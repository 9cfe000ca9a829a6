// The tokenizer of make-model's checkpoints: GPT-2's first 4096 merges (byte-level BPE, 4352
// tokens) plus the special tokens of the model family it imitates, written as a modern
// tokenizer.json (the layout of Qwen2 and Llama-3) and a tokenizer_config.json with a chat
// template.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvserve::makemodel {

enum class TokenizerStyle {
  kQwen2,   // Qwen2 pre-tokenizer regex, ChatML: <|endoftext|>, <|im_start|>, <|im_end|>
  kLlama3,  // Llama-3 regex, BOS added by the post-processor, <|start_header_id|>... template
};

struct SyntheticTokenizer {
  TokenizerStyle style = TokenizerStyle::kQwen2;
  int32_t bpe_size = 0;                     // tokens from the merges (ids 0 .. bpe_size-1)
  std::vector<std::string> special_tokens;  // ids bpe_size, bpe_size + 1, ...
  std::optional<std::string> bos_token;     // tokenizer_config.json bos_token
  std::string eos_token;                    // tokenizer_config.json eos_token
  std::optional<std::string> pad_token;
  bool add_bos_token = false;
  std::vector<std::string> generation_eos;  // generation_config.json eos_token_id, in order
  std::string chat_template;

  int32_t vocab_size() const;
  // The id of one of the special tokens (a bug if it is not one).
  int32_t special_id(std::string_view token) const;
  std::optional<int32_t> bos_id() const;
  std::vector<int32_t> generation_eos_ids() const;
};

SyntheticTokenizer make_synthetic_tokenizer(TokenizerStyle style);

// The pre-tokenizer Split regexes of the real models.
std::string_view llama3_split_regex();
std::string_view qwen2_split_regex();

// File contents (pretty-printed JSON, UTF-8).
std::string tokenizer_json_text(const SyntheticTokenizer& t);
std::string tokenizer_config_json_text(const SyntheticTokenizer& t, int64_t model_max_length);

}  // namespace kvserve::makemodel

#include "kvserve/makemodel/synthetic_tokenizer.h"

#include <nlohmann/json.hpp>

#include "kvserve/core/check.h"
#include "kvserve/makemodel/bpe_vocab.h"

namespace kvserve::makemodel {
namespace {

using ojson = nlohmann::ordered_json;

// Qwen2-Instruct's chat template (Apache-2.0, Qwen team): ChatML with a default system turn.
constexpr std::string_view kChatMlTemplate =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

// kvserve's own template in the Llama-3 format.
constexpr std::string_view kLlama3Template =
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + "
    "message['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}";

ojson added_token(int32_t id, const std::string& content) {
  return ojson{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
               {"rstrip", false}, {"normalized", false}, {"special", true}};
}

ojson byte_level(bool add_prefix_space, bool trim_offsets, bool use_regex) {
  return ojson{{"type", "ByteLevel"},
               {"add_prefix_space", add_prefix_space},
               {"trim_offsets", trim_offsets},
               {"use_regex", use_regex}};
}

ojson llama3_post_processor(const SyntheticTokenizer& t) {
  const std::string bos = *t.bos_token;
  const auto special = [&](int type_id) {
    return ojson{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
  };
  const auto sequence = [](const char* id, int type_id) {
    return ojson{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  ojson templ = {
      {"type", "TemplateProcessing"},
      {"single", ojson::array({special(0), sequence("A", 0)})},
      {"pair", ojson::array({special(0), sequence("A", 0), special(1), sequence("B", 1)})},
      {"special_tokens",
       {{bos,
         {{"id", bos},
          {"ids", ojson::array({t.special_id(bos)})},
          {"tokens", ojson::array({bos})}}}}}};
  return ojson{{"type", "Sequence"},
               {"processors", ojson::array({byte_level(true, false, true), templ})}};
}

}  // namespace

std::string_view llama3_split_regex() {
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

std::string_view qwen2_split_regex() {
  return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
}

int32_t SyntheticTokenizer::vocab_size() const {
  return bpe_size + static_cast<int32_t>(special_tokens.size());
}

int32_t SyntheticTokenizer::special_id(std::string_view token) const {
  for (size_t i = 0; i < special_tokens.size(); ++i) {
    if (special_tokens[i] == token) return bpe_size + static_cast<int32_t>(i);
  }
  KV_CHECK(false, "'{}' is not a special token of this tokenizer", token);
}

std::optional<int32_t> SyntheticTokenizer::bos_id() const {
  if (!bos_token) return std::nullopt;
  return special_id(*bos_token);
}

std::vector<int32_t> SyntheticTokenizer::generation_eos_ids() const {
  std::vector<int32_t> ids;
  for (const std::string& t : generation_eos)
    ids.push_back(special_id(t));
  return ids;
}

SyntheticTokenizer make_synthetic_tokenizer(TokenizerStyle style) {
  SyntheticTokenizer t;
  t.style = style;
  t.bpe_size = static_cast<int32_t>(gpt2_4096_vocab().tokens.size());
  if (style == TokenizerStyle::kQwen2) {
    t.special_tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    t.eos_token = "<|im_end|>";
    t.pad_token = "<|endoftext|>";
    t.add_bos_token = false;
    t.generation_eos = {"<|im_end|>", "<|endoftext|>"};
    t.chat_template = std::string(kChatMlTemplate);
  } else {
    t.special_tokens = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                        "<|end_header_id|>", "<|eot_id|>"};
    t.bos_token = "<|begin_of_text|>";
    t.eos_token = "<|eot_id|>";
    t.add_bos_token = true;
    t.generation_eos = {"<|end_of_text|>", "<|eot_id|>"};
    t.chat_template = std::string(kLlama3Template);
  }
  return t;
}

std::string tokenizer_json_text(const SyntheticTokenizer& t) {
  const BpeVocab& bpe = gpt2_4096_vocab();
  const bool llama = t.style == TokenizerStyle::kLlama3;
  ojson added = ojson::array();
  for (const std::string& s : t.special_tokens)
    added.push_back(added_token(t.special_id(s), s));
  ojson vocab = ojson::object();
  for (size_t i = 0; i < bpe.tokens.size(); ++i)
    vocab[bpe.tokens[i]] = static_cast<int32_t>(i);

  ojson split = {{"type", "Split"},
                 {"pattern", {{"Regex", llama ? llama3_split_regex() : qwen2_split_regex()}}},
                 {"behavior", "Isolated"},
                 {"invert", false}};
  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = added;
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers", ojson::array({split, byte_level(false, llama, false)})}};
  root["post_processor"] = llama ? llama3_post_processor(t) : byte_level(false, false, false);
  root["decoder"] = llama ? byte_level(true, true, true) : byte_level(false, false, false);
  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = llama ? ojson(nullptr) : ojson("");
  model["end_of_word_suffix"] = llama ? ojson(nullptr) : ojson("");
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = llama;  // Llama-3 looks whole words up first; Qwen2 does not
  model["vocab"] = std::move(vocab);
  model["merges"] = bpe.merges;
  root["model"] = std::move(model);
  return root.dump(2) + "\n";
}

std::string tokenizer_config_json_text(const SyntheticTokenizer& t, int64_t model_max_length) {
  ojson decoder = ojson::object();
  for (const std::string& s : t.special_tokens) {
    decoder[std::to_string(t.special_id(s))] = {{"content", s},         {"lstrip", false},
                                                {"normalized", false},  {"rstrip", false},
                                                {"single_word", false}, {"special", true}};
  }
  const auto token_or_null = [](const std::optional<std::string>& s) {
    return s ? ojson(*s) : ojson(nullptr);
  };
  ojson c;
  c["add_bos_token"] = t.add_bos_token;
  c["add_eos_token"] = false;
  c["added_tokens_decoder"] = std::move(decoder);
  c["bos_token"] = token_or_null(t.bos_token);
  c["chat_template"] = t.chat_template;
  c["clean_up_tokenization_spaces"] = false;
  c["eos_token"] = t.eos_token;
  c["model_input_names"] = {"input_ids", "attention_mask"};
  c["model_max_length"] = model_max_length;
  c["pad_token"] = token_or_null(t.pad_token);
  c["tokenizer_class"] = "PreTrainedTokenizerFast";
  return c.dump(2) + "\n";
}

}  // namespace kvserve::makemodel

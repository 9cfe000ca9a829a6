#include "kvserve/makemodel/whisper_tokenizer.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kvserve/core/check.h"
#include "kvserve/makemodel/bpe_vocab.h"

namespace kvserve::makemodel {
namespace {

using ojson = nlohmann::ordered_json;

ojson added_token(int32_t id, const std::string& content, bool special) {
  return ojson{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
               {"rstrip", false}, {"normalized", false}, {"special", special}};
}

ojson byte_level(bool trim_offsets) {
  return ojson{{"type", "ByteLevel"},
               {"add_prefix_space", false},
               {"trim_offsets", trim_offsets},
               {"use_regex", true}};
}

// "<|startoftranscript|><|notimestamps|> $A <|endoftext|>": WhisperTokenizer's prefix without a
// language or task set (predict_timestamps false), as transformers writes it.
ojson post_processor() {
  const std::string sot = "<|startoftranscript|>";
  const std::string nots = "<|notimestamps|>";
  const std::string eot = "<|endoftext|>";
  const auto special = [](const std::string& token) {
    return ojson{{"SpecialToken", {{"id", token}, {"type_id", 0}}}};
  };
  const ojson seq_a = {{"Sequence", {{"id", "A"}, {"type_id", 0}}}};
  const ojson seq_b = {{"Sequence", {{"id", "B"}, {"type_id", 1}}}};
  ojson tokens = ojson::object();
  for (const auto& [id, token] :
       {std::pair{kWhisperStartOfTranscript, sot}, std::pair{kWhisperNoTimestamps, nots},
        std::pair{kWhisperEndOfText, eot}}) {
    tokens[token] = {{"id", token}, {"ids", ojson::array({id})}, {"tokens", ojson::array({token})}};
  }
  return ojson{{"type", "TemplateProcessing"},
               {"single", ojson::array({special(sot), special(nots), seq_a, special(eot)})},
               {"pair", ojson::array({special(sot), special(nots), seq_a, seq_b, special(eot)})},
               {"special_tokens", std::move(tokens)}};
}

}  // namespace

const std::vector<std::string_view>& whisper_language_codes() {
  static const std::vector<std::string_view> codes = {
      "en", "zh", "de", "es",  "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv",
      "it", "id", "hi", "fi",  "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no",
      "th", "ur", "hr", "bg",  "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr",
      "az", "sl", "kn", "et",  "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw",
      "gl", "mr", "pa", "si",  "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu",
      "am", "yi", "lo", "uz",  "fo", "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl",
      "mg", "as", "tt", "haw", "ln", "ha", "ba", "jw", "su"};
  return codes;
}

const std::vector<int32_t>& whisper_suppress_tokens() {
  static const std::vector<int32_t> ids = {
      1,     2,     7,     8,     9,     10,    14,    25,    26,    27,    28,    29,    31,
      58,    59,    60,    61,    62,    63,    90,    91,    92,    93,    359,   503,   522,
      542,   873,   893,   902,   918,   922,   931,   1350,  1853,  1982,  2460,  2627,  3246,
      3253,  3268,  3536,  3846,  3961,  4183,  4667,  6585,  6647,  7273,  9061,  9383,  10428,
      10929, 11938, 12033, 12331, 12562, 13793, 14157, 14635, 15265, 15618, 16553, 16604, 18362,
      18956, 20075, 21675, 22520, 26130, 26161, 26435, 28279, 29464, 31650, 32302, 32470, 36865,
      42863, 47425, 49870, 50254, 50258, 50358, 50359, 50360, 50361, 50362};
  return ids;
}

std::vector<std::string> whisper_special_tokens() {
  std::vector<std::string> t = {"<|endoftext|>", "<|startoftranscript|>"};
  for (const std::string_view code : whisper_language_codes())
    t.push_back(fmt::format("<|{}|>", code));
  for (const char* s : {"<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>",
                        "<|nocaptions|>", "<|notimestamps|>"}) {
    t.emplace_back(s);
  }
  for (int32_t i = 0; i < kWhisperTimestamps; ++i)
    t.push_back(fmt::format("<|{:.2f}|>", i * 0.02));
  KV_CHECK_EQ(static_cast<int32_t>(t.size()), kWhisperVocabSize - kWhisperEndOfText);
  return t;
}

std::string whisper_tokenizer_json_text() {
  const BpeVocab& bpe = gpt2_4096_vocab();
  ojson vocab = ojson::object();
  for (size_t i = 0; i < bpe.tokens.size(); ++i)
    vocab[bpe.tokens[i]] = static_cast<int32_t>(i);
  // Ids the merges never produce, so that the special tokens keep Whisper's ids. Printable ASCII
  // is its own byte-level symbol, so each decodes to its own text.
  for (auto id = static_cast<int32_t>(bpe.tokens.size()); id < kWhisperEndOfText; ++id)
    vocab[fmt::format("<unused{}>", id)] = id;
  KV_CHECK_EQ(static_cast<int32_t>(vocab.size()), kWhisperEndOfText, "filler tokens collide");

  ojson added = ojson::array();
  const std::vector<std::string> specials = whisper_special_tokens();
  for (size_t i = 0; i < specials.size(); ++i) {
    const auto id = static_cast<int32_t>(kWhisperEndOfText + i);
    added.push_back(added_token(id, specials[i], id < kWhisperFirstTimestamp));
  }
  ojson root;
  root["version"] = "1.0";
  root["truncation"] = nullptr;
  root["padding"] = nullptr;
  root["added_tokens"] = std::move(added);
  root["normalizer"] = nullptr;
  root["pre_tokenizer"] = byte_level(true);
  root["post_processor"] = post_processor();
  root["decoder"] = byte_level(true);
  ojson model;
  model["type"] = "BPE";
  model["dropout"] = nullptr;
  model["unk_token"] = nullptr;
  model["continuing_subword_prefix"] = "";
  model["end_of_word_suffix"] = "";
  model["fuse_unk"] = false;
  model["byte_fallback"] = false;
  model["ignore_merges"] = false;
  model["vocab"] = std::move(vocab);
  model["merges"] = bpe.merges;
  root["model"] = std::move(model);
  return root.dump(2) + "\n";
}

std::string whisper_tokenizer_config_json_text() {
  const std::vector<std::string> specials = whisper_special_tokens();
  ojson decoder = ojson::object();
  ojson additional = ojson::array();
  for (size_t i = 0; i < specials.size(); ++i) {
    const auto id = static_cast<int32_t>(kWhisperEndOfText + i);
    const bool special = id < kWhisperFirstTimestamp;
    decoder[std::to_string(id)] = {{"content", specials[i]}, {"lstrip", false},
                                   {"normalized", false},    {"rstrip", false},
                                   {"single_word", false},   {"special", special}};
    if (special && id != kWhisperEndOfText) additional.push_back(specials[i]);
  }
  ojson c;
  c["add_bos_token"] = false;
  c["add_prefix_space"] = false;
  c["added_tokens_decoder"] = std::move(decoder);
  c["additional_special_tokens"] = std::move(additional);
  c["bos_token"] = "<|endoftext|>";
  c["clean_up_tokenization_spaces"] = true;
  c["eos_token"] = "<|endoftext|>";
  c["errors"] = "replace";
  c["model_max_length"] = 1024;
  c["pad_token"] = "<|endoftext|>";
  c["processor_class"] = "WhisperProcessor";
  c["return_attention_mask"] = false;
  c["tokenizer_class"] = "WhisperTokenizer";
  c["unk_token"] = "<|endoftext|>";
  return c.dump(2) + "\n";
}

}  // namespace kvserve::makemodel

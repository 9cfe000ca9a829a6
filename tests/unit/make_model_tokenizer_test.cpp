// make-model's tokenizer: GPT-2's vocabulary rebuilt from the embedded merges, the tokenizer.json
// and tokenizer_config.json layouts, and the files read back by kvserve's own tokenizer, which
// must give the ids transformers.js gives.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kvserve/makemodel/bpe_vocab.h"
#include "kvserve/makemodel/gpt2_merges.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/makemodel/presets.h"
#include "kvserve/makemodel/synthetic_tokenizer.h"
#include "kvserve/tokenizer/tokenizer.h"
#include "model_test_util.h"

namespace kvserve::makemodel {
namespace {

namespace fs = std::filesystem;
using model::testing::fixtures_dir;
using model::testing::read_file;
using model::testing::TempDir;
using model::testing::write_file;
using nlohmann::json;

TEST(MakeModelTokenizer, EmbeddedMergesEqualTheDataFile) {
  const fs::path data =
      fixtures_dir() / ".." / ".." / "data" / "tokenizer" / "gpt2-merges-4096.txt";
  ASSERT_TRUE(fs::exists(data)) << data;
  EXPECT_EQ(std::string(gpt2_merges_text()), read_file(data))
      << "the build embeds this file (cmake/embed_text.cmake, src/CMakeLists.txt): rebuild";
}

TEST(MakeModelTokenizer, VocabularyIsGpt2s) {
  const BpeVocab& v = gpt2_4096_vocab();
  ASSERT_EQ(v.tokens.size(), 4352u);
  EXPECT_EQ(v.merges.size(), 4096u);
  // Ids of GPT-2's encoder.json.
  EXPECT_EQ(v.tokens[0], "!");
  EXPECT_EQ(v.tokens[93], "~");
  EXPECT_EQ(v.tokens[188], "\xC4\x80");   // byte 0 -> U+0100
  EXPECT_EQ(v.tokens[220], "\xC4\xA0");   // byte ' ' -> U+0120 'Ġ'
  EXPECT_EQ(v.tokens[198], "\xC4\x8A");   // '\n' -> 'Ċ'
  EXPECT_EQ(v.tokens[256], "\xC4\xA0t");  // the first merge: 'Ġ t'
  EXPECT_EQ(v.tokens[262], "\xC4\xA0the");
  EXPECT_EQ(v.tokens[464], "The");
  EXPECT_EQ(v.tokens[995], "\xC4\xA0world");
  std::set<std::string> unique(v.tokens.begin(), v.tokens.end());
  EXPECT_EQ(unique.size(), v.tokens.size());

  EXPECT_FALSE(build_bpe_vocab("a b c\n").is_ok());
  EXPECT_FALSE(build_bpe_vocab("zz q\n").is_ok());      // 'zz' is not a token yet
  EXPECT_FALSE(build_bpe_vocab("a b\na b\n").is_ok());  // 'ab' twice
  EXPECT_EQ(build_bpe_vocab("#version: 0.2\na b\n\nab c\n")->tokens.back(), "abc");
}

TEST(MakeModelTokenizer, TokenizerJsonIsTheModernByteLevelLayout) {
  for (const TokenizerStyle style : {TokenizerStyle::kQwen2, TokenizerStyle::kLlama3}) {
    const bool llama = style == TokenizerStyle::kLlama3;
    SCOPED_TRACE(llama ? "llama3" : "qwen2");
    const SyntheticTokenizer t = make_synthetic_tokenizer(style);
    const json j = json::parse(tokenizer_json_text(t));
    EXPECT_EQ(j["version"], "1.0");
    EXPECT_TRUE(j["normalizer"].is_null());
    const json& pre = j["pre_tokenizer"];
    EXPECT_EQ(pre["type"], "Sequence");
    EXPECT_EQ(pre["pretokenizers"][0]["type"], "Split");
    EXPECT_EQ(pre["pretokenizers"][0]["behavior"], "Isolated");
    EXPECT_EQ(pre["pretokenizers"][0]["pattern"]["Regex"],
              llama ? llama3_split_regex() : qwen2_split_regex());
    EXPECT_EQ(pre["pretokenizers"][1]["type"], "ByteLevel");
    EXPECT_EQ(pre["pretokenizers"][1]["add_prefix_space"], false);
    EXPECT_EQ(pre["pretokenizers"][1]["use_regex"], false);
    EXPECT_EQ(j["decoder"]["type"], "ByteLevel");
    const json& m = j["model"];
    EXPECT_EQ(m["type"], "BPE");
    EXPECT_EQ(m["ignore_merges"], llama);
    EXPECT_EQ(m["vocab"].size(), 4352u);
    EXPECT_EQ(m["merges"].size(), 4096u);
    EXPECT_EQ(m["merges"][0], "\xC4\xA0 t");
    EXPECT_EQ(m["vocab"]["\xC4\xA0the"], 262);
    const std::vector<std::string> specials =
        llama ? std::vector<std::string>{"<|begin_of_text|>", "<|end_of_text|>",
                                         "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
              : std::vector<std::string>{"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    ASSERT_EQ(j["added_tokens"].size(), specials.size());
    for (size_t i = 0; i < specials.size(); ++i) {
      EXPECT_EQ(j["added_tokens"][i]["id"], 4352 + i);
      EXPECT_EQ(j["added_tokens"][i]["content"], specials[i]);
      EXPECT_EQ(j["added_tokens"][i]["special"], true);
    }
    EXPECT_EQ(t.vocab_size(), static_cast<int32_t>(4352 + specials.size()));
    if (llama) {
      const json& post = j["post_processor"];
      EXPECT_EQ(post["type"], "Sequence");
      EXPECT_EQ(post["processors"][1]["type"], "TemplateProcessing");
      EXPECT_EQ(post["processors"][1]["single"][0]["SpecialToken"]["id"], "<|begin_of_text|>");
      EXPECT_EQ(post["processors"][1]["special_tokens"]["<|begin_of_text|>"]["ids"][0], 4352);
    } else {
      EXPECT_EQ(j["post_processor"]["type"], "ByteLevel");
    }

    const json c = json::parse(tokenizer_config_json_text(t, 1234));
    EXPECT_EQ(c["add_bos_token"], llama);
    EXPECT_EQ(c["bos_token"], llama ? json("<|begin_of_text|>") : json(nullptr));
    EXPECT_EQ(c["eos_token"], llama ? "<|eot_id|>" : "<|im_end|>");
    EXPECT_EQ(c["model_max_length"], 1234);
    EXPECT_EQ(c["added_tokens_decoder"].size(), specials.size());
    EXPECT_NE(c["chat_template"].get<std::string>().find("add_generation_prompt"),
              std::string::npos);
    EXPECT_EQ(t.generation_eos_ids(),
              llama ? (std::vector<int32_t>{4353, 4356}) : (std::vector<int32_t>{4354, 4352}));
  }
}

// Ids that transformers.js 4.3.2 gives for these files (AutoTokenizer.from_pretrained over the
// make-model output directory, local files only, tokenizer.encode(text)): tiny (Qwen2 regex) and
// llama-3.2-1b-shape (Llama-3 regex, BOS from the post-processor).
struct Encoded {
  const char* text;
  std::vector<int32_t> ids;
};

const Encoded kQwenStyle[] = {
    {"Hello world!", {39, 695, 78, 995, 0}},
    {"The quick brown fox jumps over the lazy dog.",
     {464, 2068, 1379, 675, 277, 1140, 474, 388, 862, 625, 262, 300, 1031, 88, 3290, 13}},
    {"  spaces\n\nnewlines\ttabs", {220, 599, 2114, 628, 3605, 75, 1127, 197, 83, 397, 82}},
    {"numbers 1234567 and 3.14159",
     {77, 388, 1213, 220, 16, 17, 18, 19, 20, 21, 22, 290, 220, 18, 13, 16, 19, 16, 20, 24}},
    {"unicode: h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E \xF0\x9F\x99\x82",
     {403, 291, 1098, 25,  289, 2634, 297, 78,  266, 127, 114, 81,  335, 220,
      162, 245, 98,   162, 250, 105,  164, 103, 252, 220, 172, 253, 247, 224}},
    {"<|im_start|>user\nhi<|im_end|>", {4353, 385, 263, 198, 71, 72, 4354}},
    {"I'm sure they'll do it", {40, 1101, 1654, 484, 1183, 466, 340}},
};

const Encoded kLlamaStyle[] = {
    {"Hello world!", {4352, 39, 695, 78, 995, 0}},
    {"numbers 1234567 and 3.14159",
     {4352, 77, 388, 1213, 220, 1065, 18, 2231, 21, 22, 290, 220, 18, 13, 1415, 16, 3270}},
    {"<|begin_of_text|>hello<|eot_id|>", {4352, 4352, 258, 297, 78, 4356}},
    {"I'm sure they'll do it", {4352, 40, 1101, 1654, 484, 1183, 466, 340}},
};

void expect_round_trips(const fs::path& dir, std::span<const Encoded> cases, int32_t vocab,
                        std::optional<int32_t> bos, int32_t eos) {
  const auto tok = tokenizer::Tokenizer::from_directory(dir);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), vocab);
  EXPECT_EQ((*tok)->bos_token_id(), bos);
  EXPECT_EQ((*tok)->eos_token_id(), eos);
  EXPECT_FALSE((*tok)->chat_template().empty());
  for (const Encoded& e : cases) {
    const std::vector<int32_t> ids = (*tok)->encode(e.text);
    EXPECT_EQ(ids, e.ids) << e.text;
    EXPECT_EQ((*tok)->decode(ids, /*skip_special_tokens=*/false),
              (bos ? "<|begin_of_text|>" : "") + std::string(e.text));
  }
}

TEST(MakeModelTokenizer, KvserveTokenizerMatchesTransformersJs) {
  TempDir tmp;
  MakeModelOptions o;
  o.preset = "tiny";
  o.output = tmp.path();
  const Result<MakeModelReport> made = make_model(o);
  ASSERT_TRUE(made.is_ok()) << made.status().to_string();
  expect_round_trips(tmp.path(), kQwenStyle, 4355, std::nullopt, 4354);

  // The Llama-3 style files alone (no 2.5 GB of weights needed).
  const Preset* p = find_preset("llama-3.2-1b-shape");
  write_file(tmp / "llama" / "tokenizer.json", tokenizer_json_text(p->tokenizer));
  write_file(tmp / "llama" / "tokenizer_config.json",
             tokenizer_config_json_text(p->tokenizer, p->model_max_length));
  expect_round_trips(tmp / "llama", kLlamaStyle, 4357, 4352, 4356);
}

}  // namespace
}  // namespace kvserve::makemodel

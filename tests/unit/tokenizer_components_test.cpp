// The tokenizer's parts where the JS reference cannot serve (split behaviors, single_word,
// tokenizer_config.json handling), its error statuses, UTF-8 / NFC helpers, streaming of split
// characters, and a rough throughput print (no timing assertions).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "kvserve/tokenizer/nfc.h"
#include "kvserve/tokenizer/pre_tokenizer.h"
#include "kvserve/tokenizer/regex.h"
#include "kvserve/tokenizer/tokenizer.h"
#include "kvserve/tokenizer/utf8.h"
#include "unit/model_test_util.h"

namespace kvserve::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(KVSERVE_FIXTURES_DIR) / "tokenizers";

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A scratch directory removed at the end of the test: the suites' mkdtemp one. (A name made from
// gtest's random seed, which is the clock's milliseconds unless shuffling, collided between test
// processes that ctest -j2 starts together: one removed the other's files.)
using model::testing::TempDir;

std::unique_ptr<Tokenizer> load_fixture(const std::string& name) {
  auto t = Tokenizer::from_directory(kFixtures / name);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

// Writes a modified copy of a fixture and loads it.
Result<std::unique_ptr<Tokenizer>> load_modified(const TempDir& dir, const std::string& name,
                                                 const std::function<void(json&)>& edit_tokenizer,
                                                 const std::function<void(json&)>& edit_config) {
  json tok = json::parse(read_file(kFixtures / name / "tokenizer.json"));
  json config = json::parse(read_file(kFixtures / name / "tokenizer_config.json"));
  if (edit_tokenizer) edit_tokenizer(tok);
  if (edit_config) edit_config(config);
  write_file(dir.path() / "tokenizer.json", tok.dump());
  write_file(dir.path() / "tokenizer_config.json", config.dump());
  return Tokenizer::from_directory(dir.path());
}

// --- Loading errors --------------------------------------------------------------------------

TEST(TokenizerLoad, MissingDirectoryAndFile) {
  auto r = Tokenizer::from_directory("/nonexistent/kvserve/tokenizer");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("/nonexistent/kvserve/tokenizer"), std::string::npos);

  TempDir dir;
  r = Tokenizer::from_directory(dir.path());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos);

  r = Tokenizer::from_files(kFixtures / "gpt2" / "tokenizer.json", dir.path() / "missing.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
}

TEST(TokenizerLoad, MalformedJsonNamesTheFile) {
  TempDir dir;
  write_file(dir.path() / "tokenizer.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
  auto r = Tokenizer::from_directory(dir.path());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find((dir.path() / "tokenizer.json").string()), std::string::npos)
      << r.status().message();

  // Valid JSON of the wrong shape.
  write_file(dir.path() / "tokenizer.json", R"({"model": {"type": "BPE", "vocab": [1, 2]}})");
  r = Tokenizer::from_directory(dir.path());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  write_file(dir.path() / "tokenizer.json", R"([1, 2, 3])");
  r = Tokenizer::from_directory(dir.path());
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);

  write_file(dir.path() / "tokenizer.json", read_file(kFixtures / "gpt2" / "tokenizer.json"));
  write_file(dir.path() / "tokenizer_config.json", "{not json");
  r = Tokenizer::from_directory(dir.path());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("tokenizer_config.json"), std::string::npos);
}

TEST(TokenizerLoad, UnsupportedComponentsAreUnimplemented) {
  struct Case {
    const char* key;
    json value;
    const char* name;
  };
  const std::vector<Case> cases = {
      {"normalizer", {{"type", "Lowercase"}}, "Lowercase"},
      {"normalizer", {{"type", "NFKC"}}, "NFKC"},
      {"pre_tokenizer", {{"type", "BertPreTokenizer"}}, "BertPreTokenizer"},
      {"post_processor", {{"type", "RobertaProcessing"}}, "RobertaProcessing"},
      {"decoder", {{"type", "WordPiece"}}, "WordPiece"},
  };
  for (const Case& c : cases) {
    TempDir dir;
    auto r = load_modified(
        dir, "gpt2", [&](json& t) { t[c.key] = c.value; }, nullptr);
    ASSERT_FALSE(r.is_ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented) << c.name;
    EXPECT_NE(r.status().message().find(c.name), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("tokenizer.json"), std::string::npos);
  }
  TempDir dir;
  auto r = load_modified(
      dir, "gpt2",
      [](json& t) {
        t["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
      },
      nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(r.status().message().find("Unigram"), std::string::npos);
}

TEST(TokenizerLoad, BadMergesAndPatterns) {
  TempDir dir;
  auto r = load_modified(
      dir, "gpt2", [](json& t) { t["model"]["merges"].push_back("nosuchtoken x"); }, nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("nosuchtoken"), std::string::npos);

  r = load_modified(
      dir, "qwen2",
      [](json& t) { t["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed"; },
      nullptr);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("(unclosed"), std::string::npos);
}

// --- tokenizer_config.json -------------------------------------------------------------------

TEST(TokenizerConfig, SpecialTokensAndTemplates) {
  auto llama3 = load_fixture("llama3");
  EXPECT_EQ(llama3->bos_token_id(), llama3->token_to_id("<|begin_of_text|>"));
  EXPECT_EQ(llama3->eos_token_id(), llama3->token_to_id("<|eot_id|>"));
  EXPECT_NE(llama3->chat_template().find("start_header_id"), std::string::npos);  // "default"
  EXPECT_EQ(llama3->chat_template().find("tools:"), std::string::npos);
  EXPECT_TRUE(llama3->is_special(*llama3->bos_token_id()));
  EXPECT_FALSE(llama3->is_special(100));

  auto qwen = load_fixture("qwen2");
  EXPECT_FALSE(qwen->bos_token_id().has_value());
  EXPECT_EQ(qwen->eos_token_id(), qwen->token_to_id("<|im_end|>"));
  EXPECT_NE(qwen->chat_template().find("im_start"), std::string::npos);
  EXPECT_FALSE(qwen->is_special(*qwen->token_to_id("<tool_call>")));  // added, not special

  auto sp = load_fixture("sp_llama");  // bos_token given as {"content": "<s>", ...}
  EXPECT_EQ(sp->bos_token_id(), 1);
  EXPECT_EQ(sp->eos_token_id(), 2);

  auto gpt2 = load_fixture("gpt2");
  EXPECT_TRUE(gpt2->chat_template().empty());
  EXPECT_EQ(gpt2->vocab_size(), 2757);
  for (int32_t id = 0; id < gpt2->vocab_size(); ++id) {
    const auto token = gpt2->id_to_token(id);
    ASSERT_TRUE(token.has_value()) << id;
    EXPECT_EQ(gpt2->token_to_id(*token), id);
  }
  EXPECT_FALSE(gpt2->id_to_token(gpt2->vocab_size()).has_value());
  EXPECT_FALSE(gpt2->id_to_token(-1).has_value());
}

TEST(TokenizerConfig, AddBosAndEosTokenFlags) {
  TempDir dir;
  auto r = load_modified(dir, "sp_llama", nullptr, [](json& c) { c["add_eos_token"] = true; });
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r.value()->encode("Hi", true).front(), 1);
  EXPECT_EQ(r.value()->encode("Hi", true).back(), 2);
  EXPECT_EQ(r.value()->encode("Hi", false).back(), r.value()->encode("Hi", true).end()[-2]);

  TempDir dir2;
  r = load_modified(dir2, "sp_llama", nullptr, [](json& c) { c["add_bos_token"] = false; });
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r.value()->encode("Hi", true), r.value()->encode("Hi", false));

  // Without tokenizer_config.json the BOS is the template's first special token.
  auto plain = Tokenizer::from_files(kFixtures / "llama3" / "tokenizer.json", std::nullopt);
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain.value()->bos_token_id(), plain.value()->token_to_id("<|begin_of_text|>"));
  EXPECT_FALSE(plain.value()->eos_token_id().has_value());
  EXPECT_EQ(plain.value()->encode("hi", true).front(), *plain.value()->bos_token_id());
}

// --- Added tokens ----------------------------------------------------------------------------

TEST(AddedTokens, SingleWordMatchesOnlyWholeWords) {
  TempDir dir;
  auto r = load_modified(
      dir, "gpt2",
      [](json& t) {
        t["added_tokens"].push_back({{"id", 5000},
                                     {"content", "cat"},
                                     {"single_word", true},
                                     {"lstrip", false},
                                     {"rstrip", false},
                                     {"normalized", false},
                                     {"special", false}});
      },
      nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const Tokenizer& tok = *r.value();
  auto count = [&](const std::string& text) {
    const auto ids = tok.encode(text, false);
    return std::count(ids.begin(), ids.end(), 5000);
  };
  EXPECT_EQ(count("cat"), 1);
  EXPECT_EQ(count("a cat sat"), 1);
  EXPECT_EQ(count("cat, cat."), 2);
  EXPECT_EQ(count("concatenate"), 0);
  EXPECT_EQ(count("cats"), 0);
  EXPECT_EQ(count("_cat"), 0);
  EXPECT_EQ(count("écat"), 0);  // a letter before it, even non-ASCII
  EXPECT_EQ(tok.vocab_size(), 5001);
  EXPECT_EQ(tok.decode(tok.encode("a cat sat", false), true), "a cat sat");
}

TEST(AddedTokens, LstripAndRstripTakeTheWhitespace) {
  auto tok = load_fixture("gpt2_added");
  const int32_t mask = *tok->token_to_id("<mask>");
  const int32_t sep = *tok->token_to_id("[SEP]");
  EXPECT_EQ(tok->encode("a   <mask>", false), (std::vector<int32_t>{*tok->token_to_id("a"), mask}));
  EXPECT_EQ(tok->encode("[SEP] \t\n b", false),
            (std::vector<int32_t>{sep, *tok->token_to_id("b")}));
  // Special tokens are dropped by decode(skip_special_tokens) but non-special added ones are not.
  EXPECT_EQ(tok->decode(tok->encode("x<mask>y<tool>z", false), true), "xy<tool>z");
}

// --- Pre-tokenizer split behaviors (Hugging Face's own test: "The-final--countdown") ----------

std::vector<std::string> split_text(const std::string& text, const std::string& delimiter,
                                    SplitBehavior behavior, bool invert = false) {
  auto regex = Regex::literal(delimiter, "test");
  KV_CHECK(regex.is_ok());
  std::vector<std::pair<size_t, size_t>> matches;
  regex.value().find_all(text, matches);
  std::vector<PreToken> out;
  split_pieces(PreToken{text, true}, matches, invert, behavior, out);
  std::vector<std::string> texts;
  for (const auto& p : out)
    texts.push_back(p.text);
  return texts;
}

TEST(PreTokenizer, SplitBehaviors) {
  using V = std::vector<std::string>;
  const std::string s = "The-final--countdown";
  EXPECT_EQ(split_text(s, "-", SplitBehavior::kRemoved), (V{"The", "final", "countdown"}));
  EXPECT_EQ(split_text(s, "-", SplitBehavior::kIsolated),
            (V{"The", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(split_text(s, "-", SplitBehavior::kMergedWithPrevious),
            (V{"The-", "final-", "-", "countdown"}));
  EXPECT_EQ(split_text(s, "-", SplitBehavior::kMergedWithNext),
            (V{"The", "-final", "-", "-countdown"}));
  EXPECT_EQ(split_text(s, "-", SplitBehavior::kContiguous),
            (V{"The", "-", "final", "--", "countdown"}));
  // invert: the matches are kept, the rest is the delimiter.
  EXPECT_EQ(split_text("a-b", "-", SplitBehavior::kRemoved, true), (V{"-"}));
  EXPECT_EQ(split_text("", "-", SplitBehavior::kIsolated), V{});
}

TEST(PreTokenizer, DigitsAndPunctuationThroughATokenizer) {
  // GPT-2's model behind a Digits(individual) + Punctuation + ByteLevel(no regex) sequence.
  TempDir dir;
  auto r = load_modified(
      dir, "gpt2",
      [](json& t) {
        t["pre_tokenizer"] = {
            {"type", "Sequence"},
            {"pretokenizers",
             {{{"type", "Digits"}, {"individual_digits", true}},
              {{"type", "Punctuation"}, {"behavior", "Isolated"}},
              {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
      },
      nullptr);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  const auto ids = r.value()->encode("x=123!", false);
  std::vector<std::string> tokens;
  for (const int32_t id : ids)
    tokens.push_back(*r.value()->id_to_token(id));
  EXPECT_EQ(tokens, (std::vector<std::string>{"x", "=", "1", "2", "3", "!"}));
}

// --- Helpers ---------------------------------------------------------------------------------

TEST(Utf8, LossyReplacesMaximalSubparts) {
  const std::string fffd(kReplacementChar);
  EXPECT_EQ(utf8_lossy("abc"), "abc");
  EXPECT_EQ(utf8_lossy("\xE4\xB8"), fffd);      // truncated 3-byte sequence
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), fffd);  // truncated 4-byte sequence
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98x"), fffd + "x");
  EXPECT_EQ(utf8_lossy("\x80\x80"), fffd + fffd);             // lone continuation bytes
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), fffd + fffd + fffd);  // a surrogate
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), fffd + fffd);             // overlong
  EXPECT_EQ(utf8_lossy("\xF5"), fffd);
  EXPECT_EQ(utf8_lossy("a\xE4\xB8\xAD"), "a\xE4\xB8\xAD");
  EXPECT_TRUE(is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(is_valid_utf8("\xF0\x9F\x98"));
}

TEST(Nfc, ComposesReordersAndKeepsExclusions) {
  EXPECT_EQ(nfc("e\u0301"), "\u00e9");
  EXPECT_EQ(nfc("A\u030a"), "\u00c5");
  EXPECT_EQ(nfc("\u212b"), "\u00c5");               // singleton (Angstrom sign)
  EXPECT_EQ(nfc("\u1e0b\u0323"), "\u1e0d\u0307");   // reorder then compose
  EXPECT_EQ(nfc("\u1100\u1161\u11a8"), "\uac01");   // Hangul L V T
  EXPECT_EQ(nfc("\u0958"), "\u0915\u093c");         // composition exclusion
  EXPECT_EQ(nfc("o\u0308\u0323"), "\u1ecd\u0308");  // dot below first
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("\u0301x"), "\u0301x");  // leading non-starter
}

TEST(Regex, UnicodeClassesAndNextLine) {
  auto re = Regex::compile(R"(\s+(?!\S)|\s+|\p{L}+|\p{N})", "test");
  ASSERT_TRUE(re.is_ok());
  std::vector<std::pair<size_t, size_t>> m;
  re.value().find_all(
      "ab\xC2\x85"
      "12",
      m);  // U+0085 is White_Space, as in Oniguruma
  ASSERT_EQ(m.size(), 4u);
  EXPECT_EQ(m[1], (std::pair<size_t, size_t>{2, 4}));
  EXPECT_FALSE(Regex::compile("[", "test").is_ok());
}

// --- Robustness ------------------------------------------------------------------------------

TEST(TokenizerRobustness, InvalidInputsDoNotCrash) {
  for (const char* name : {"gpt2", "qwen2", "llama3", "sp_llama", "sp_metaspace"}) {
    auto tok = load_fixture(name);
    const std::string bad = "ok \xFF\xFE bad \xE4\xB8 end\xF0";
    EXPECT_EQ(tok->encode(bad, false), tok->encode(utf8_lossy(bad), false)) << name;
    const std::vector<int32_t> ids = {-5, 0, 1, tok->vocab_size(), 1 << 30, 2};
    const std::string text = tok->decode(ids, false);
    EXPECT_TRUE(is_valid_utf8(text)) << name;
    EXPECT_EQ(tok->decode({}, true), "");
    std::string nul("a\0b", 3);
    EXPECT_FALSE(tok->encode(nul, false).empty());
  }
}

TEST(TokenizerRobustness, LongRunsOfOneCharacter) {
  std::string emoji;
  for (int i = 0; i < 20000; ++i)
    emoji += "\xF0\x9F\x98\x80";
  for (const char* name : {"gpt2", "qwen2", "llama3", "sp_llama", "sp_metaspace"}) {
    auto tok = load_fixture(name);
    for (const std::string& text :
         {std::string(200000, ' '), std::string(200000, 'a'), std::string(100000, '\n'), emoji}) {
      const auto ids = tok->encode(text, false);
      EXPECT_FALSE(ids.empty()) << name;
      const std::string back = tok->decode(ids, false);
      // SentencePiece layouts drop the leading space they added (and one of the text's own).
      EXPECT_TRUE(back == text || " " + back == text) << name << " " << text.substr(0, 4);
    }
  }
}

TEST(TokenizerRobustness, ConcurrentEncodesAgree) {
  auto tok = load_fixture("qwen2");
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += fmt::format("word{} café 😀 {} ", i % 37, i);
  const auto expected = tok->encode(text, true);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        if (tok->encode(text, true) != expected) ++mismatches;
      }
    });
  }
  for (auto& th : threads)
    th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

TEST(Regex, EmptyLiteralMatchesNothing) {
  auto re = Regex::literal("", "test");
  ASSERT_TRUE(re.is_ok());
  EXPECT_EQ(regex_replace_all(re.value(), "abc", "x"), "abc");
}

// --- Streaming ---------------------------------------------------------------------------------

TEST(IncrementalDetokenizer, HoldsBackSplitCharacters) {
  for (const char* name : {"gpt2", "sp_llama"}) {
    auto tok = load_fixture(name);
    // An emoji and CJK characters are several byte tokens each in these small vocabularies.
    const std::string text = "Hi 😀 中文 👩‍👩‍👧";
    const auto ids = tok->encode(text, false);
    ASSERT_GT(ids.size(), 10u) << name;
    IncrementalDetokenizer detok(*tok);
    std::string streamed;
    size_t silent = 0;
    for (const int32_t id : ids) {
      const std::string piece = detok.push(id);
      EXPECT_TRUE(is_valid_utf8(piece));
      EXPECT_EQ(piece.find(kReplacementChar), std::string::npos) << name;
      if (piece.empty()) ++silent;
      streamed += piece;
    }
    streamed += detok.finish();
    EXPECT_EQ(streamed, text) << name;
    EXPECT_GT(silent, 3u) << name;  // the partial characters were held back
  }
}

TEST(IncrementalDetokenizer, FinishFlushesAnIncompleteCharacter) {
  auto tok = load_fixture("sp_llama");
  IncrementalDetokenizer detok(*tok);
  std::string out;
  for (const int32_t id : tok->encode("Hello", false))
    out += detok.push(id);
  out += detok.push(*tok->token_to_id("<0xE4>"));  // first byte of a 3-byte character
  EXPECT_EQ(out, "Hello");
  EXPECT_EQ(detok.finish(), kReplacementChar);
}

// A model that emits invalid UTF-8 (random weights do) must not make the window, and the cost of
// each push, grow with the output: pending tokens stay bounded, valid text in between streams
// exactly, and the total equals a one-shot decode.
TEST(IncrementalDetokenizer, InvalidBytesDoNotGrowTheWindow) {
  auto tok = load_fixture("sp_llama");
  const uint64_t seed = 20261130;
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);
  const std::vector<std::string> bytes = {"<0xFF>", "<0xE4>", "<0x80>", "<0xC3>", "<0xF0>"};
  std::vector<int32_t> ids;
  for (int i = 0; i < 400; ++i) {
    if (rng() % 3 == 0) {
      for (const int32_t id : tok->encode(i % 2 ? " word" : " 中", false))
        ids.push_back(id);
    } else {
      ids.push_back(*tok->token_to_id(bytes[rng() % bytes.size()]));
    }
  }
  IncrementalDetokenizer detok(*tok);
  std::string streamed;
  size_t max_pending = 0;
  for (const int32_t id : ids) {
    streamed += detok.push(id);
    max_pending = std::max(max_pending, detok.pending_tokens());
  }
  streamed += detok.finish();
  EXPECT_LE(max_pending, IncrementalDetokenizer::kMaxPendingTokens);
  EXPECT_TRUE(is_valid_utf8(streamed));
  // Every valid piece arrives intact, in order.
  const std::string whole = tok->decode(ids, true);
  size_t words = 0, pos = 0;
  while ((pos = streamed.find("word", pos)) != std::string::npos) {
    ++words;
    pos += 4;
  }
  size_t words_whole = 0;
  pos = 0;
  while ((pos = whole.find("word", pos)) != std::string::npos) {
    ++words_whole;
    pos += 4;
  }
  EXPECT_EQ(words, words_whole);
  EXPECT_EQ(streamed, whole);
  EXPECT_EQ(std::count(streamed.begin(), streamed.end(), '\xe4'),
            std::count(whole.begin(), whole.end(), '\xe4'));  // every 中 (E4 B8 AD) intact
}

// --- Throughput (printed, not asserted) ------------------------------------------------------

std::string english_text(size_t bytes, bool unique_words) {
  static const char* kWords[] = {
      "the",     "of",     "and",   "to",     "in",        "is",     "was",       "he",
      "for",     "it",     "with",  "as",     "his",       "on",     "be",        "at",
      "by",      "had",    "are",   "but",    "from",      "or",     "have",      "an",
      "they",    "which",  "one",   "you",    "were",      "her",    "all",       "she",
      "there",   "would",  "their", "we",     "him",       "been",   "has",       "when",
      "serving", "engine", "cache", "tokens", "attention", "model",  "request",   "prefix",
      "radix",   "kernel", "batch", "decode", "prefill",   "memory", "scheduler", "GPU"};
  std::mt19937 rng(7);
  std::string s;
  s.reserve(bytes + 64);
  while (s.size() < bytes) {
    if (unique_words) {
      for (int k = 0; k < 6; ++k)
        s.push_back(static_cast<char>('a' + rng() % 26));
    } else {
      s += kWords[rng() % std::size(kWords)];
    }
    const uint32_t r = rng() % 20;
    s += r == 0 ? ". " : r == 1 ? ", " : r == 2 ? "\n" : " ";
  }
  return s;
}

TEST(TokenizerThroughput, EncodeOneMegabyte) {
  for (const bool unique : {false, true}) {
    const std::string text = english_text(1 << 20, unique);
    for (const char* name : {"gpt2", "qwen2", "llama3", "sp_llama"}) {
      auto tok = load_fixture(name);
      const auto start = std::chrono::steady_clock::now();
      const auto ids = tok->encode(text, false);
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const auto dstart = std::chrono::steady_clock::now();
      const std::string back = tok->decode(ids, false);
      const double dseconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - dstart).count();
      std::printf("%-9s %s words: encode 1 MiB in %.3f s (%.1f MB/s, %zu tokens), decode %.3f s\n",
                  name, unique ? "random" : "common", seconds, text.size() / seconds / 1e6,
                  ids.size(), dseconds);
      EXPECT_EQ(back, text) << name;
    }
  }
}

}  // namespace
}  // namespace kvserve::tokenizer

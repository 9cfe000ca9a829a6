// Encode/decode against the reference fixtures of tools/make_tokenizer_fixtures.mjs (Hugging Face
// tokenizers semantics), and streaming detokenization of the same cases.
//
// KVSERVE_FULL_TOKENIZERS=<dir> also runs every <dir>/<name>/{tokenizer.json, expected.json} that
// the generator's --full mode wrote (full-size GPT-2, Qwen2.5, Llama-3, Llama-2; not committed).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "kvserve/tokenizer/tokenizer.h"
#include "kvserve/tokenizer/utf8.h"

namespace kvserve::tokenizer {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kFixtures = fs::path(KVSERVE_FIXTURES_DIR) / "tokenizers";

json read_json(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

std::unique_ptr<Tokenizer> load(const fs::path& dir) {
  auto t = Tokenizer::from_directory(dir);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return t.is_ok() ? std::move(t).value() : nullptr;
}

std::string show(const std::string& text) {
  return json(text).dump();
}

// Streams `ids` one at a time; checks that the pieces add up to the full decode and that each is
// whole UTF-8 (a U+FFFD only where the full decode has one).
void check_streaming(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                     const std::string& label) {
  const std::string full = tok.decode(ids, skip_special);
  const bool full_has_fffd = full.find(kReplacementChar) != std::string::npos;
  IncrementalDetokenizer detok(tok, skip_special);
  std::string streamed;
  for (const int32_t id : ids) {
    const std::string piece = detok.push(id);
    EXPECT_TRUE(is_valid_utf8(piece)) << label;
    if (!full_has_fffd) {
      EXPECT_EQ(piece.find(kReplacementChar), std::string::npos) << label;
    }
    streamed += piece;
  }
  streamed += detok.finish();
  EXPECT_EQ(streamed, full) << label;
}

// Returns the number of cases checked.
size_t check_fixture(const fs::path& dir) {
  auto tok = load(dir);
  if (tok == nullptr) return 0;
  const json expected = read_json(dir / "expected.json");
  size_t n = 0;
  for (const json& c : expected.at("cases")) {
    const std::string text = c.at("text").get<std::string>();
    const std::string label = fmt::format("{} case {}: {}", dir.filename().string(), n, show(text));
    const auto ids = c.at("ids").get<std::vector<int32_t>>();
    const auto ids_no_special = c.at("ids_no_special").get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(text, true), ids) << label;
    EXPECT_EQ(tok->encode(text, false), ids_no_special) << label;
    EXPECT_EQ(tok->decode(ids, true), c.at("decoded").get<std::string>()) << label;
    EXPECT_EQ(tok->decode(ids, false), c.at("decoded_with_special").get<std::string>()) << label;
    check_streaming(*tok, ids, true, label);
    check_streaming(*tok, ids, false, label);
    ++n;
  }
  return n;
}

class FixtureTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FixtureTest, MatchesReference) {
  const size_t n = check_fixture(kFixtures / GetParam());
  EXPECT_GT(n, 50u);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, FixtureTest,
                         ::testing::Values("gpt2", "gpt2_added", "qwen2", "llama3", "sp_llama",
                                           "sp_metaspace"));

TEST(FullTokenizers, MatchReferenceWhenProvided) {
  const char* dir = std::getenv("KVSERVE_FULL_TOKENIZERS");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "KVSERVE_FULL_TOKENIZERS is not set";
  size_t tokenizers = 0;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (!fs::exists(entry.path() / "expected.json")) continue;
    const size_t n = check_fixture(entry.path());
    std::printf("full tokenizer %s: %zu cases\n", entry.path().filename().c_str(), n);
    ++tokenizers;
  }
  EXPECT_GT(tokenizers, 0u) << "no <name>/expected.json under " << dir;
}

}  // namespace
}  // namespace kvserve::tokenizer

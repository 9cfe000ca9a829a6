// The shipped demo speech model (models/demo-whisper, trained by tools/train_demo_whisper.py):
// `kvserve transcribe` with no --model-path loads it, and committed held-out clips transcribe to
// their text with the very tokens transformers produced from the same samples
// (tests/fixtures/audio/demo_whisper/expected.json, made by tools/check_demo_whisper.py on the GPU
// machine: float32 transformers, greedy).
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "unit/run_kvserve.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing_util::CommandResult;
using testing_util::run_kvserve;

const fs::path kClips = fs::path(KVSERVE_FIXTURES_DIR) / "audio" / "demo_whisper";

// tools/wer.py's normalisation: lower case; all but letters, digits and apostrophes are spaces.
std::string normalise(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    const bool keep = (l >= 'a' && l <= 'z') || (l >= '0' && l <= '9') || l == '\'';
    out += keep ? l : ' ';
  }
  std::istringstream words(out);
  std::string word, joined;
  while (words >> word)
    joined += (joined.empty() ? "" : " ") + word;
  return joined;
}

json expected() {
  std::ifstream in(kClips / "expected.json");
  EXPECT_TRUE(in.good()) << kClips / "expected.json";
  return in.good() ? json::parse(in) : json::array();
}

TEST(DemoWhisper, HeldOutClipsTranscribeToTheirTextWithTransformersTokens) {
  const json clips = expected();
  ASSERT_GE(clips.size(), 2u);
  std::string files;
  for (const json& c : clips)
    files.append(" ").append((kClips / c["file"].get<std::string>()).string());
  // No --model-path: the demo model. Several clips in one batch, page size 16 (the default 1 is
  // covered by the batch-of-one run below).
  for (const std::string flags : {"--page-size 16", "--max-running-requests 1"}) {
    const CommandResult r =
        run_kvserve("transcribe --response-format verbose_json --log-level warn " + flags + files);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::istringstream lines(r.output);
    size_t i = 0;
    for (std::string line; std::getline(lines, line); ++i) {
      ASSERT_LT(i, clips.size()) << r.output;
      const json got = json::parse(line);
      const json& want = clips[i];
      EXPECT_EQ(normalise(got["text"]), normalise(want["text"]))
          << want["file"] << " (" << want["voice"] << ", speed " << want["speed"] << ")";
      std::vector<int32_t> tokens;
      for (const int32_t t : got["tokens"].get<std::vector<int32_t>>()) {
        if (t < 1000) tokens.push_back(t);  // demo-whisper's special tokens are 1000..1008
      }
      EXPECT_EQ(tokens, want["transformers_tokens"].get<std::vector<int32_t>>()) << want["file"];
    }
    EXPECT_EQ(i, clips.size()) << r.output;
  }
}

TEST(DemoWhisper, TranscribeSaysWhichModelItUses) {
  const json clips = expected();
  ASSERT_FALSE(clips.empty());
  const CommandResult r = run_kvserve("transcribe --log-level info " +
                                      (kClips / clips[0]["file"].get<std::string>()).string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no --model-path: using the demo model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("demo-whisper"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvserve

// The transformers oracle fixtures (tests/fixtures/oracle, made by tools/hf_oracle.py): where they
// are, their names, and each one's expected.json (prompts, last-position logits, 64 greedy tokens),
// shared by oracle_test (CPU) and oracle_gpu_test. KVSERVE_ORACLE_DIR overrides the directory.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvserve::test_support {

inline std::filesystem::path oracle_dir() {
  if (const char* d = std::getenv("KVSERVE_ORACLE_DIR")) return d;
  return std::filesystem::path(KVSERVE_FIXTURES_DIR) / "oracle";
}

inline std::vector<std::string> oracle_fixture_names() {
  std::vector<std::string> names;
  if (std::filesystem::exists(oracle_dir())) {
    for (const auto& e : std::filesystem::directory_iterator(oracle_dir())) {
      if (std::filesystem::exists(e.path() / "expected.json")) {
        names.push_back(e.path().filename().string());
      }
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct OracleExpected {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<float>> last_logits;
  std::vector<std::vector<int32_t>> greedy;
};

inline OracleExpected load_oracle_expected(const std::filesystem::path& dir) {
  std::ifstream in(dir / "expected.json");
  const nlohmann::json j = nlohmann::json::parse(in);
  return {j["prompts"].get<std::vector<std::vector<int32_t>>>(),
          j["last_logits"].get<std::vector<std::vector<float>>>(),
          j["greedy"].get<std::vector<std::vector<int32_t>>>()};
}

}  // namespace kvserve::test_support

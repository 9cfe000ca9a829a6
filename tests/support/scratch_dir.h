// A fresh scratch directory under the system's temporary directory, unique to the calling process
// (mkdtemp): test processes that run at the same time (ctest -j, gtest shards) never share one, so
// one suite's teardown cannot remove another's checkpoint. The caller removes it.
#pragma once

#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace kvserve::test_support {

inline std::filesystem::path make_scratch_dir(const std::string& prefix) {
  const std::string pattern =
      (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + pattern);
  return std::filesystem::path(buf.data());
}

}  // namespace kvserve::test_support

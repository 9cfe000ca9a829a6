// Runs the kvserve binary of this build as a user would, for the command-line tests.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace kvserve::testing_util {

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

// `args` are passed through a shell: quote what needs quoting.
inline CommandResult run_kvserve(const std::string& args) {
  const std::string cmd = std::string(KVSERVE_BINARY) + " " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return {-1, "popen failed"};
  std::string out;
  std::array<char, 4096> buf;
  while (fgets(buf.data(), buf.size(), pipe) != nullptr)
    out += buf.data();
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace kvserve::testing_util

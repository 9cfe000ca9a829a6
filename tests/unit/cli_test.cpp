// The kvserve binary as a user runs it: exit codes and messages.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <string>

namespace {

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

CommandResult run_kvserve(const std::string& args) {
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

TEST(Cli, VersionListsPlatforms) {
  const CommandResult r = run_kvserve("version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("kvserve 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cpu"), std::string::npos) << r.output;
}

TEST(Cli, SelfCheckPasses) {
  const CommandResult r = run_kvserve("self-check --steps 300 --page-size 1 16 --seed 5");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("seed 5"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("page size  16: ok"), std::string::npos) << r.output;
}

TEST(Cli, BadArgumentsNameTheFlagAndFail) {
  CommandResult r = run_kvserve("self-check --page-size 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--page-size"), std::string::npos) << r.output;
  r = run_kvserve("self-check --radix-eviction-policy mru");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--radix-eviction-policy"), std::string::npos) << r.output;
  r = run_kvserve("self-check --steps -4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("--steps"), std::string::npos) << r.output;
  r = run_kvserve("--no-such-flag");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("no-such-flag"), std::string::npos) << r.output;
  r = run_kvserve("--log-level loud version");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--log-level"), std::string::npos) << r.output;
}

}  // namespace

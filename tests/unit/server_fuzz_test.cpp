// Bad input, thousands of times: every malformed request gets an OpenAI-style 4xx JSON error,
// the server keeps serving, and no KV memory leaks (the invariant holds afterwards).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <iostream>
#include <random>

#include "unit/server_test_util.h"

namespace kvserve {
namespace {

using testing_util::json;
using testing_util::TestServer;

uint64_t seed() {
  if (const char* s = std::getenv("KVSERVE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return 20261130;
}

// Values that are wrong for most fields.
json odd_value(std::mt19937_64& rng) {
  switch (rng() % 14) {
    case 0:
      return nullptr;
    case 1:
      return -1;
    case 2:
      return 0;
    case 3:
      return 1000000000;
    case 4:
      return 2.5;
    case 5:
      return "ten";
    case 6:
      return "";
    case 7:
      return json::array();
    case 8:
      return json::array({1, "a"});
    case 9:
      return json::object();
    case 10:
      return true;
    case 11:
      return -0.5;
    case 12:
      return json::array({-5, 999999999});
    default:
      return 3;
  }
}

json valid_request(const std::string& path, std::mt19937_64& rng) {
  if (path == "/generate") {
    return {{"text", "hello world"},
            {"sampling_params", {{"max_new_tokens", 3}, {"temperature", 0}}}};
  }
  if (path == "/v1/completions")
    return {{"prompt", "hello"}, {"max_tokens", 3}, {"n", 1 + rng() % 2}};
  return {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}};
}

bool error_shaped(const httplib::Result& res) {
  if (!res) return false;
  const json j = json::parse(res->body, nullptr, false);
  return !j.is_discarded() && j.contains("error") && j["error"].contains("message");
}

TEST(ServerFuzz, MalformedRequestsGet4xxAndNothingLeaks) {
  const uint64_t s0 = seed();
  std::cout << "[ seed     ] " << s0 << std::endl;
  std::mt19937_64 rng(s0);
  // A 256-token context keeps the requests that leave max_tokens out (or null, which means the
  // same) short: they generate to the end of the context.
  engine::EngineOptions eo = testing_util::tiny_engine_options();
  eo.runner.context_length = 256;
  TestServer s(eo);
  auto c = s.client();
  const std::vector<std::string> paths = {"/generate", "/v1/completions", "/v1/chat/completions"};
  const std::vector<std::string> fields = {"max_tokens",
                                           "temperature",
                                           "top_p",
                                           "top_k",
                                           "n",
                                           "stream",
                                           "stop",
                                           "seed",
                                           "logprobs",
                                           "prompt",
                                           "messages",
                                           "text",
                                           "input_ids",
                                           "sampling_params",
                                           "min_p",
                                           "presence_penalty",
                                           "frequency_penalty",
                                           "repetition_penalty",
                                           "stop_token_ids",
                                           "top_logprobs",
                                           "echo",
                                           "stream_options",
                                           "logprob_start_len",
                                           "return_logprob",
                                           "max_completion_tokens",
                                           "rid"};
  int ok = 0;
  int rejected = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::string& path = paths[rng() % paths.size()];
    std::string body;
    const int kind = static_cast<int>(rng() % 10);
    if (kind == 0) {  // not JSON at all, or broken JSON
      body = valid_request(path, rng).dump();
      body.resize(rng() % body.size());
      if (rng() % 2) body += "\xff\xfe";
    } else if (kind == 1) {  // JSON, but not an object
      body = odd_value(rng).dump();
    } else if (kind == 2) {  // invalid UTF-8 inside a string
      body = R"({"prompt": "a)" + std::string("\xc3\x28\xa0\xa1") +
             R"(", "text": "x", "max_tokens": 2})";
    } else if (kind == 3) {  // a prompt over the context (256)
      json r = valid_request(path, rng);
      r.erase("text");
      r.erase("prompt");
      r.erase("messages");
      std::vector<int32_t> ids(300, 7);
      r[path == "/generate" ? "input_ids" : "prompt"] = ids;
      body = r.dump();
    } else {  // a valid request with 1-3 fields replaced by odd values, or removed
      json r = valid_request(path, rng);
      for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
        const std::string& f = fields[rng() % fields.size()];
        json* target = (path == "/generate" && rng() % 2) ? &r["sampling_params"] : &r;
        if (!target->is_object()) target = &r;
        if (rng() % 5 == 0) {
          target->erase(f);
        } else {
          (*target)[f] = odd_value(rng);
        }
        if (f == "max_tokens" || f == "max_new_tokens") {
          // keep generation short when the value happens to be valid
          if ((*target)[f].is_number_integer() && (*target)[f].get<int64_t>() > 8) (*target)[f] = 8;
        }
      }
      if (r.contains("n") && r["n"].is_number_integer() && r["n"].get<int64_t>() > 2) r["n"] = 2;
      if (r.contains("stream") && r["stream"] == true) r["stream"] = false;
      body = r.dump();
    }
    const auto res = c->Post(path, body, "application/json");
    ASSERT_TRUE(res) << "no response: " << httplib::to_string(res.error()) << "\n" << body;
    if (res->status == 200) {
      ++ok;
      const json j = json::parse(res->body, nullptr, false);
      EXPECT_FALSE(j.is_discarded()) << res->body;
    } else {
      ++rejected;
      EXPECT_GE(res->status, 400) << body;
      EXPECT_LT(res->status, 500) << body << "\n" << res->body;
      EXPECT_TRUE(error_shaped(res)) << res->body;
    }
  }
  std::cout << "[ fuzz     ] " << ok << " accepted, " << rejected << " rejected" << std::endl;
  EXPECT_GT(rejected, 1000);
  EXPECT_GT(ok, 100);

  // An oversized body, a wrong method, an unknown route.
  const auto big = c->Post("/generate", std::string(33 << 20, ' '), "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_TRUE(error_shaped(big)) << big->body;
  const auto wrong = c->Get("/generate");
  EXPECT_TRUE(wrong && wrong->status >= 400 && wrong->status < 500);
  // Vanishing and slow clients: half a request, then gone.
  for (int i = 0; i < 20; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(s.port()));
    a.sin_addr.s_addr = htonl(0x7f000001);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    const std::string partial =
        "POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{\"te";
    ASSERT_GT(write(fd, partial.data(), i % 2 ? partial.size() : 10), 0);
    close(fd);
  }
  // Still serving, and nothing leaked.
  const auto [st, body] =
      s.post("/generate", {{"text", "still there?"}, {"sampling_params", {{"max_new_tokens", 4}}}});
  EXPECT_EQ(st, 200) << body.dump();
  const json info = s.idle_info();
  EXPECT_EQ(info["used_tokens"], 0);
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
}

}  // namespace
}  // namespace kvserve

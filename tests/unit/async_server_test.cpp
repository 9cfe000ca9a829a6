// The asynchronous server's own behaviour (issue 22 item 2): idle streams hold no thread, streams
// driven by the engine's events carry exactly what the non-streaming answers carry, and a client
// that does not read delays no one else. Real engine, real sockets.
#include <gtest/gtest.h>
#include <sys/socket.h>

#include <dirent.h>

#include <future>
#include <random>
#include <thread>

#include "unit/server_test_util.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;
using testing_util::json;
using testing_util::RawConnection;
using testing_util::status_of;
using testing_util::TestServer;

// This process's threads (the in-process server's among them).
int thread_count() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n;
}

std::string raw_post(const std::string& path, const json& body) {
  const std::string b = body.dump();
  return fmt::format(
      "POST {} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: {}\r\n\r\n{}",
      path, b.size(), b);
}

// The "data: " payloads of an SSE body, [DONE] included.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    out.push_back(body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  return out;
}

// 300 open streams, most of them waiting in the engine's queue: the server's thread count does
// not grow with them (a thread per connection would add 300), and hanging up on all of them
// frees every request.
TEST(AsyncServer, IdleStreamsHoldNoThreads) {
  engine::EngineOptions eo = testing_util::tiny_engine_options();
  eo.runner.max_running_requests = 4;
  TestServer s(eo);
  const json before = s.idle_info();
  const int threads_before = thread_count();
  const std::string request = raw_post(
      "/generate", {{"input_ids", {5, 6, 7}},
                    {"stream", true},
                    {"sampling_params", {{"max_new_tokens", 1500}, {"ignore_eos", true}}}});
  constexpr int kStreams = 300;
  std::vector<std::unique_ptr<RawConnection>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<RawConnection>(s.port()));
    ASSERT_TRUE(streams.back()->connected());
    ASSERT_TRUE(streams.back()->send(request));
  }
  for (auto& c : streams) {  // every stream's head arrives (its request is in the engine)
    const std::string head = c->read(20s, "\r\n\r\n");
    ASSERT_EQ(status_of(head), 200) << head;
    EXPECT_NE(head.find("text/event-stream"), std::string::npos) << head;
  }
  // Submitted before each head left; the engine thread takes them from its inbox at its next
  // step.
  json busy;
  for (int i = 0; i < 2000; ++i) {
    busy = s.get("/get_server_info").second;
    if (busy["num_running_reqs"].get<int>() + busy["num_waiting_reqs"].get<int>() == kStreams) {
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(busy["num_running_reqs"].get<int>() + busy["num_waiting_reqs"].get<int>(), kStreams)
      << busy.dump();
  const int threads_held = thread_count();
  std::printf("threads: %d before, %d with %d streams\n", threads_before, threads_held, kStreams);
  EXPECT_LT(threads_held - threads_before, 8);
  // /health answers at once meanwhile.
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(s.client()->Get("/health")->status, 200);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);

  streams.clear();  // every client hangs up
  const json after = s.idle_info();
  EXPECT_EQ(after["num_running_reqs"], 0) << after.dump();
  EXPECT_EQ(after["num_waiting_reqs"], 0) << after.dump();
  EXPECT_EQ(after["used_tokens"], 0) << after.dump();
  EXPECT_EQ(after["available_tokens"].get<int64_t>() + after["evictable_tokens"].get<int64_t>(),
            before["available_tokens"].get<int64_t>() + before["evictable_tokens"].get<int64_t>());
  EXPECT_EQ(after["invariant_violations"], 0) << after["last_invariant_violation"];
}

// Many streams at once (greedy): each one's events concatenate to its non-streaming answer, for
// SGLang's /generate (cumulative ids) and OpenAI's chat completions (content deltas).
TEST(AsyncServer, ConcurrentEventDrivenStreamsEqualNonStreaming) {
  TestServer s;
  const uint32_t seed = std::random_device{}();
  std::printf("seed %u\n", seed);
  std::mt19937 rng(seed);
  constexpr int kRequests = 24;
  std::vector<std::vector<int32_t>> prompts(kRequests);
  for (auto& p : prompts) {
    p.resize(3 + rng() % 40);
    for (auto& t : p)
      t = 10 + static_cast<int32_t>(rng() % 4000);
  }
  const auto gen_body = [](const std::vector<int32_t>& p) {
    return json{
        {"input_ids", p},
        {"sampling_params", {{"max_new_tokens", 24}, {"temperature", 0}, {"ignore_eos", true}}}};
  };
  const auto chat_body = [](int i) {
    return json{{"messages", {{{"role", "user"}, {"content", fmt::format("Say {} things", i)}}}},
                {"max_tokens", 16},
                {"temperature", 0}};
  };
  std::vector<json> alone_gen;
  std::vector<std::string> alone_chat;
  for (int i = 0; i < kRequests; ++i) {
    const auto [st, body] = s.post("/generate", gen_body(prompts[i]));
    ASSERT_EQ(st, 200) << body.dump();
    alone_gen.push_back(body["output_ids"]);
    const auto [cst, chat] = s.post("/v1/chat/completions", chat_body(i));
    ASSERT_EQ(cst, 200) << chat.dump();
    alone_chat.push_back(chat["choices"][0]["message"]["content"]);
  }
  std::vector<std::future<std::pair<json, std::string>>> futures;
  for (int i = 0; i < kRequests; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      json g = gen_body(prompts[i]);
      g["stream"] = true;
      const auto gres = s.client()->Post("/generate", g.dump(), "application/json");
      json last;
      if (gres && gres->status == 200) {
        const auto payloads = sse_payloads(gres->body);
        if (payloads.size() >= 2 && payloads.back() == "[DONE]") {
          last = json::parse(payloads[payloads.size() - 2])["output_ids"];
        }
      }
      json c = chat_body(i);
      c["stream"] = true;
      const auto cres = s.client()->Post("/v1/chat/completions", c.dump(), "application/json");
      std::string content = "<no stream>";
      if (cres && cres->status == 200) {
        content.clear();
        for (const std::string& p : sse_payloads(cres->body)) {
          if (p == "[DONE]") break;
          const json chunk = json::parse(p);
          const json& delta = chunk["choices"][0]["delta"];
          if (delta.contains("content")) content += delta["content"].get<std::string>();
        }
      }
      return std::pair{last, content};
    }));
  }
  for (int i = 0; i < kRequests; ++i) {
    const auto [ids, content] = futures[i].get();
    EXPECT_EQ(ids, alone_gen[i]) << "request " << i;
    EXPECT_EQ(content, alone_chat[i]) << "request " << i;
  }
  const json info = s.idle_info();
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
}

// A client that asks for a long stream and never reads: other clients' requests are answered as
// fast as without it, and once it hangs up its request is aborted and its memory freed.
TEST(AsyncServer, ClientThatDoesNotReadDelaysNoOne) {
  TestServer s;
  const json before = s.idle_info();
  const std::vector<int32_t> reference = testing_util::greedy_ids(s, {21, 22, 23}, 32);
  auto slow = std::make_unique<RawConnection>(s.port());
  ASSERT_TRUE(slow->connected());
  ASSERT_TRUE(slow->send(raw_post("/v1/completions", {{"prompt", "slow"},
                                                      {"stream", true},
                                                      {"logprobs", 5},
                                                      {"max_tokens", 1900},
                                                      {"ignore_eos", true}})));
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(testing_util::greedy_ids(s, {21, 22, 23}, 32), reference);
    EXPECT_EQ(s.client()->Get("/health")->status, 200);
    // Loose: the machine is shared; a server waiting on the slow client would not answer at all.
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
  }
  slow.reset();
  const json after = s.idle_info();
  EXPECT_EQ(after["num_running_reqs"], 0) << after.dump();
  EXPECT_EQ(after["used_tokens"], 0) << after.dump();
  EXPECT_EQ(after["available_tokens"].get<int64_t>() + after["evictable_tokens"].get<int64_t>(),
            before["available_tokens"].get<int64_t>() + before["evictable_tokens"].get<int64_t>());
}

}  // namespace
}  // namespace kvserve

// The server against hostile and odd clients (issue 22): each repro of the issue answers a 4xx (or
// SGLang's documented behaviour) and the server keeps serving. Real engine, real sockets.
#include <gtest/gtest.h>

#include <future>
#include <thread>
#include <tuple>

#include "kvserve/server/responses.h"
#include "unit/server_test_util.h"

namespace kvserve {
namespace {

using namespace std::chrono_literals;
using testing_util::json;
using testing_util::RawConnection;
using testing_util::status_of;
using testing_util::TestServer;

const json kHi = {{{"role", "user"}, {"content", "Hello world"}}};

// Sends `raw` on a fresh connection; the server's answer (it closes after an error).
std::string raw_roundtrip(const TestServer& s, const std::string& raw,
                          std::chrono::milliseconds timeout = 5s) {
  RawConnection c(s.port());
  EXPECT_TRUE(c.connected());
  c.send(raw);
  return c.read(timeout);
}

void expect_still_serving(const TestServer& s) {
  const auto res = s.client()->Get("/health");
  ASSERT_TRUE(res) << "the server stopped answering";
  EXPECT_EQ(res->status, 200);
}

// "\xff" in a path (raw or percent-encoded) reached the JSON library through the 404 message and
// aborted the process.
TEST(ServerHardening, InvalidUtf8InThePathIsA404) {
  TestServer s;
  for (const std::string path : {"/%ff", "/%c3%28", "/v1/%ff%fe/x"}) {
    const auto [st, body] = s.get(path);
    EXPECT_EQ(st, 404) << path;
    EXPECT_TRUE(body.contains("error")) << body.dump();
  }
  const std::string raw =
      raw_roundtrip(s, "GET /\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(raw), 404) << raw;
  EXPECT_NE(raw.find("\"error\""), std::string::npos) << raw;
  expect_still_serving(s);
}

// 100,000 nested objects in "tools" overflowed the stack; every field is bounded the same way.
TEST(ServerHardening, DeepNestingIsA400BeforeParsing) {
  TestServer s;
  for (const auto& [open, close] :
       {std::pair<std::string, std::string>{"{\"a\":", "}"}, {"[", "]"}}) {
    for (const size_t depth : {65ul, 100000ul, 1000000ul}) {
      std::string deep;
      deep.reserve(depth * (open.size() + close.size()) + 8);
      for (size_t i = 0; i < depth; ++i)
        deep += open;
      deep += "1";
      for (size_t i = 0; i < depth; ++i)
        deep += close;
      const std::string body =
          R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "tools": )" + deep +
          "}";
      const auto res = s.client()->Post("/v1/chat/completions", body, "application/json");
      ASSERT_TRUE(res) << "no answer at depth " << depth;
      EXPECT_EQ(res->status, 400) << depth;
      EXPECT_NE(res->body.find("nests deeper"), std::string::npos) << res->body.substr(0, 200);
    }
  }
  // 64 levels are fine as JSON (the tools themselves are then checked).
  std::string ok = "1";
  for (int i = 0; i < 60; ++i)
    ok = "[" + ok + "]";
  const auto [st, body] =
      s.post("/generate", json::parse(R"({"text": "hi", "sampling_params": {"max_new_tokens": 2},
                                    "extra": )" +
                                      ok + "}"));
  EXPECT_EQ(st, 200) << body.dump();
  expect_still_serving(s);
}

TEST(ServerHardening, WrongResponseFormatTypesAre400WithoutLibraryText) {
  TestServer s;
  for (const json& rf : {json{{"type", 1}}, json{{"type", nullptr}}, json{{"type", {1, 2}}},
                         json(json::object()), json("text"), json{{"type", "json_object"}}}) {
    const auto [st, body] = s.post("/v1/chat/completions",
                                   {{"messages", kHi}, {"max_tokens", 2}, {"response_format", rf}});
    EXPECT_EQ(st, 400) << rf.dump() << " " << body.dump();
    EXPECT_EQ(body["error"]["param"], "response_format") << body.dump();
    EXPECT_EQ(body.dump().find("json.exception"), std::string::npos) << body.dump();
    EXPECT_EQ(body.dump().find("type_error"), std::string::npos) << body.dump();
  }
  const auto [st, body] =
      s.post("/v1/chat/completions",
             {{"messages", kHi}, {"max_tokens", 2}, {"response_format", {{"type", "text"}}}});
  EXPECT_EQ(st, 200) << body.dump();
}

// SGLang: max_new_tokens 0 runs the prefill (prompt logprobs) and generates nothing.
TEST(ServerHardening, ZeroMaxTokensGeneratesNothing) {
  TestServer s;
  const std::vector<int32_t> prompt = {11, 12, 13, 14, 15, 16};
  auto scored = [&](int max_new) {
    return s.post("/generate",
                  {{"input_ids", prompt},
                   {"return_logprob", true},
                   {"logprob_start_len", 0},
                   {"sampling_params",
                    {{"max_new_tokens", max_new}, {"temperature", 0}, {"ignore_eos", true}}}});
  };
  const auto [st0, zero] = scored(0);
  ASSERT_EQ(st0, 200) << zero.dump();
  EXPECT_EQ(zero["output_ids"].size(), 0u);
  EXPECT_EQ(zero["text"], "");
  EXPECT_EQ(zero["meta_info"]["completion_tokens"], 0);
  EXPECT_EQ(zero["meta_info"]["finish_reason"]["type"], "length");
  // The prompt's logprobs are those the same prefill gives when one token follows.
  const auto [st1, one] = scored(1);
  ASSERT_EQ(st1, 200) << one.dump();
  ASSERT_EQ(zero["meta_info"]["input_token_logprobs"].size(), prompt.size());
  ASSERT_EQ(one["meta_info"]["input_token_logprobs"].size(), prompt.size());
  for (size_t i = 1; i < prompt.size(); ++i) {
    EXPECT_NEAR(zero["meta_info"]["input_token_logprobs"][i][0].get<double>(),
                one["meta_info"]["input_token_logprobs"][i][0].get<double>(), 1e-5)
        << i;
  }
  const auto [cs, c] = s.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 0}});
  ASSERT_EQ(cs, 200) << c.dump();
  EXPECT_EQ(c["choices"][0]["text"], "");
  EXPECT_EQ(c["usage"]["completion_tokens"], 0);
  for (const char* key : {"max_tokens", "max_completion_tokens"}) {
    const auto [hs, h] = s.post("/v1/chat/completions", {{"messages", kHi}, {key, 0}});
    ASSERT_EQ(hs, 200) << h.dump();
    EXPECT_EQ(h["choices"][0]["message"]["content"], "") << key;
    EXPECT_EQ(h["usage"]["completion_tokens"], 0) << key;
    EXPECT_EQ(h["choices"][0]["finish_reason"], "length") << key;
  }
  const json info = s.idle_info();
  EXPECT_EQ(info["used_tokens"], 0);
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
}

// `curl -X POST /flush_cache`: no body, no Content-Length.
TEST(ServerHardening, FlushCacheWithoutABody) {
  TestServer s;
  const std::string raw =
      raw_roundtrip(s, "POST /flush_cache HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(raw), 200) << raw;
  EXPECT_NE(raw.find("Cache flushed"), std::string::npos) << raw;
}

// Content parts are flattened as SGLang does for text-only templates (text joined with spaces):
// the same prompt as the joined string, hence the same greedy output.
TEST(ServerHardening, ContentPartsRolesAndTools) {
  TestServer s;
  auto chat = [&](const json& messages, const json& extra = json::object()) {
    json body = {
        {"messages", messages}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
    body.update(extra);
    return s.post("/v1/chat/completions", body);
  };
  const auto [st, joined] = chat({{{"role", "user"}, {"content", "Hello there world"}}});
  ASSERT_EQ(st, 200) << joined.dump();
  const auto [pst, parts] = chat(
      {{{"role", "user"},
        {"content",
         {{{"type", "text"}, {"text", "Hello there"}}, {{"type", "text"}, {"text", "world"}}}}}});
  ASSERT_EQ(pst, 200) << parts.dump();
  EXPECT_EQ(parts["choices"][0]["message"]["content"], joined["choices"][0]["message"]["content"]);
  EXPECT_EQ(parts["usage"]["prompt_tokens"], joined["usage"]["prompt_tokens"]);

  struct Bad {
    json messages;
    json extra;
    std::string param;
  };
  const std::vector<Bad> bad = {
      {{{{"role", "wizard"}, {"content", "hi"}}}, json::object(), "messages[0].role"},
      {{{{"role", 5}, {"content", "hi"}}}, json::object(), "messages[0].role"},
      {{{{"role", "user"}}}, json::object(), "messages[0].content"},
      {{{{"role", "user"}, {"content", json::array()}}}, json::object(), "messages[0].content"},
      {{{{"role", "user"}, {"content", 5}}}, json::object(), "messages[0].content"},
      {{{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", {{"url", "x"}}}}}}}},
       json::object(),
       "messages[0].content[0].type"},
      {{{{"role", "user"}, {"content", {{{"type", "text"}}}}}},
       json::object(),
       "messages[0].content[0].text"},
      {{{{"role", "user"}, {"content", {"just a string"}}}},
       json::object(),
       "messages[0].content[0]"},
      {{{{"role", "tool"}, {"content", "42"}}}, json::object(), "messages[0].tool_call_id"},
      {kHi, {{"tools", 5}}, "tools"},
      {kHi, {{"tools", "x"}}, "tools"},
      {kHi, {{"tools", {5}}}, "tools[0]"},
      {kHi, {{"tools", {{{"type", "x"}}}}}, "tools[0].type"},
      {kHi, {{"tools", {{{"type", "function"}}}}}, "tools[0].function"},
      {kHi,
       {{"tools", {{{"type", "function"}, {"function", {{"name", "a b"}}}}}}},
       "tools[0].function.name"},
      {kHi,
       {{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", 3}}}}}}},
       "tools[0].function.parameters"},
  };
  for (const Bad& b : bad) {
    const auto [bst, body] = chat(b.messages, b.extra);
    EXPECT_EQ(bst, 400) << b.messages.dump() << b.extra.dump() << " -> " << body.dump();
    EXPECT_EQ(body["error"]["param"], b.param) << body.dump();
  }
  // Valid tools, every role, and a tool reply are accepted.
  const json tools = {
      {{"type", "function"},
       {"function",
        {{"name", "get_weather"},
         {"description", "Weather of a city"},
         {"parameters", {{"type", "object"}, {"properties", {{"city", {{"type", "string"}}}}}}}}}}};
  const auto [tst, tbody] =
      chat({{{"role", "system"}, {"content", "Be brief."}},
            {{"role", "user"}, {"content", "Weather in Paris?"}},
            {{"role", "assistant"}, {"content", "Checking."}},
            {{"role", "tool"}, {"tool_call_id", "call_1"}, {"content", "sunny"}},
            {{"role", "developer"}, {"content", {{{"type", "text"}, {"text", "ok"}}}}}},
           {{"tools", tools}});
  EXPECT_EQ(tst, 200) << tbody.dump();
}

// Logprob "bytes" are a token's own bytes: for byte-level tokens holding part of a character,
// decoding the token alone gives U+FFFD but the bytes must be the real ones. Reference: the
// tokenizer's decode of token pairs (a second path), wherever the pair decodes cleanly.
TEST(ServerHardening, LogprobBytesAreTheTokensRawBytes) {
  TestServer s;
  const tokenizer::Tokenizer* tok = s.engine().tokenizer();
  ASSERT_NE(tok, nullptr);
  const int32_t vocab = tok->vocab_size();
  std::vector<int32_t> partial;  // tokens that are not UTF-8 alone
  for (int32_t id = 0; id < vocab; ++id) {
    const int32_t one[1] = {id};
    if (tok->decode(one, false).find("\xEF\xBF\xBD") != std::string::npos) partial.push_back(id);
  }
  ASSERT_FALSE(partial.empty()) << "the tiny tokenizer has no partial-character tokens";
  int checked = 0;
  for (const int32_t a : partial) {
    for (const int32_t b : partial) {
      const int32_t pair[2] = {a, b};
      const std::string text = tok->decode(pair, false);
      if (text.find("\xEF\xBF\xBD") != std::string::npos) continue;
      EXPECT_EQ(server::token_bytes(tok, a) + server::token_bytes(tok, b), text) << a << " " << b;
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
  std::cout << "[ bytes    ] " << partial.size() << " partial-character tokens, " << checked
            << " clean pairs checked" << std::endl;

  // End to end: each logprob's bytes are its token's bytes; where the answer has no replaced
  // characters, the bytes together rebuild it (the incremental detokenizer's path). Special
  // tokens are kept in the text so that both sides hold the same tokens.
  const auto [st, body] = s.post("/v1/chat/completions", {{"messages", kHi},
                                                          {"max_tokens", 40},
                                                          {"temperature", 0},
                                                          {"ignore_eos", true},
                                                          {"skip_special_tokens", false},
                                                          {"logprobs", true},
                                                          {"top_logprobs", 2}});
  ASSERT_EQ(st, 200) << body.dump();
  std::string bytes;
  for (const auto& c : body["choices"][0]["logprobs"]["content"]) {
    std::string own;
    for (const auto& b : c["bytes"])
      own += static_cast<char>(b.get<int>());
    const std::string token = c["token"];
    if (token.find("\xEF\xBF\xBD") == std::string::npos) {
      EXPECT_EQ(own, token);
    }
    bytes += own;
    for (const auto& t : c["top_logprobs"])
      EXPECT_FALSE(t["bytes"].empty());
  }
  const std::string content = body["choices"][0]["message"]["content"];
  if (content.find("\xEF\xBF\xBD") == std::string::npos) {
    EXPECT_EQ(bytes, content);
  }
}

TEST(ServerHardening, MalformedFramingIsAnsweredAtOnce) {
  TestServer s;
  struct Case {
    std::string request;
    int status;
  };
  const std::string post = "POST /generate HTTP/1.1\r\nHost: x\r\n";
  const std::vector<Case> cases = {
      {post + "Content-Length: 5\r\nContent-Length: 50\r\n\r\n{}", 400},
      {post + "Transfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n", 400},
      {post + "Transfer-Encoding: chunked\r\n\r\n-1\r\n", 400},
      {post + "Transfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {post + "Content-Length: 52428800\r\n\r\n", 413},
      {post + "X-Big: " + std::string(20000, 'a') + "\r\n\r\n", 431},
      {"GET /health HTTP/3\r\n\r\n", 400},
  };
  for (const Case& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    const std::string raw = raw_roundtrip(s, c.request, 3s);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(status_of(raw), c.status) << c.request.substr(0, 120) << "\n" << raw;
    EXPECT_LT(seconds, 1.0) << c.request.substr(0, 120);
    EXPECT_NE(raw.find("\"error\""), std::string::npos) << raw;
  }
  expect_still_serving(s);
}

TEST(ServerHardening, ChunkedBodiesExpectContinueAndPipelining) {
  TestServer s;
  const std::string body = R"({"text": "hi", "sampling_params": {"max_new_tokens": 2}})";
  std::string chunked;
  for (size_t pos = 0; pos < body.size(); pos += 7) {
    const std::string piece = body.substr(pos, 7);
    chunked += fmt::format("{:x}\r\n{}\r\n", piece.size(), piece);
  }
  chunked += "0\r\n\r\n";
  std::string raw = raw_roundtrip(s,
                                  "POST /generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                  "Transfer-Encoding: chunked\r\n\r\n" +
                                      chunked);
  EXPECT_EQ(status_of(raw), 200) << raw;

  // Expect: 100-continue: the interim answer comes before the body is sent.
  RawConnection c(s.port());
  c.send(
      fmt::format("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n"
                  "Expect: 100-continue\r\nConnection: close\r\n\r\n",
                  body.size()));
  EXPECT_EQ(c.read(3s, "\r\n\r\n"), "HTTP/1.1 100 Continue\r\n\r\n");
  c.send(body);
  raw = c.read(5s);
  EXPECT_NE(raw.find("HTTP/1.1 200"), std::string::npos) << raw;

  // Two requests in one write get two answers, in order.
  raw =
      raw_roundtrip(s,
                    "GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/models HTTP/1.1\r\nHost: x\r\n"
                    "Connection: close\r\n\r\n");
  EXPECT_EQ(status_of(raw), 200) << raw;
  EXPECT_NE(raw.find("\"object\":\"list\""), std::string::npos) << raw;
}

// Slow clients: a head that does not arrive within the header timeout is answered 408 and
// closed, and many of them do not delay anyone else.
TEST(ServerHardening, SlowlorisConnectionsTimeOutAndDelayNoOne) {
  server::ServerOptions so;
  so.header_timeout_s = 3;
  TestServer s(testing_util::tiny_engine_options(), so);
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < 200; ++i) {
    slow.push_back(std::make_unique<RawConnection>(s.port()));
    ASSERT_TRUE(slow.back()->connected());
    slow.back()->send("POST /generate HTTP/1.1\r\nHost: x\r\n");
  }
  for (int i = 0; i < 5; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(s.client()->Get("/health")->status, 200);
    // Well under the header timeout (a server waiting on the slow heads would take 3 s); loose,
    // as this machine is shared.
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
    for (auto& c : slow)
      c->send("X-Slow: 1\r\n");  // one header at a time keeps a lenient server waiting
    std::this_thread::sleep_for(100ms);
  }
  // Past the header timeout every slow connection has been answered and closed.
  for (auto& c : slow) {
    const std::string raw = c->read(6s);
    EXPECT_EQ(status_of(raw), 408) << raw;
    EXPECT_TRUE(c->closed_by_server());
  }
}

// Above --max-connections a connection gets 503 with Retry-After, and is served again once
// others close.
TEST(ServerHardening, ConnectionCapAnswers503) {
  server::ServerOptions so;
  so.max_connections = 4;
  TestServer s(testing_util::tiny_engine_options(), so);
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int i = 0; i < 4; ++i) {
    held.push_back(std::make_unique<RawConnection>(s.port()));
    held.back()->send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    EXPECT_EQ(status_of(held.back()->read(3s, "\r\n\r\n")), 200);  // kept alive
  }
  std::string raw = raw_roundtrip(s, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(status_of(raw), 503) << raw;
  EXPECT_NE(raw.find("Retry-After: 1"), std::string::npos) << raw;
  held.clear();
  std::this_thread::sleep_for(300ms);  // the server notices the closed connections
  raw = raw_roundtrip(s, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(status_of(raw), 200) << raw;
}

// SGLang's --max-queued-requests: with one request running and the queue full, the next is
// refused with 503 and Retry-After; the queued ones are served.
TEST(ServerHardening, MaxQueuedRequests) {
  engine::EngineOptions eo = testing_util::tiny_engine_options();
  eo.runner.max_running_requests = 1;
  server::ServerOptions so;
  so.max_queued_requests = 2;
  TestServer s(eo, so);
  const std::string long_request =
      json{{"input_ids", {5, 6, 7}},
           {"stream", true},
           {"sampling_params", {{"max_new_tokens", 1500}, {"ignore_eos", true}}}}
          .dump();
  auto open_stream = [&] {
    auto c = std::make_unique<RawConnection>(s.port());
    c->send(fmt::format("POST /generate HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{}",
                        long_request.size(), long_request));
    return c;
  };
  // The tiny model runs the 1500 tokens in well under a second, so on a loaded machine the
  // running request can finish before the two queued ones arrive (the queue then never holds two).
  // That attempt is hung up and the setup tried again; up to 10 s each.
  std::unique_ptr<RawConnection> running, queued1, queued2;
  bool filled = false;
  for (int attempt = 0; attempt < 5 && !filled; ++attempt) {
    if (attempt > 0) {  // hang up the last attempt's streams and let the server drain them
      running.reset();
      queued1.reset();
      queued2.reset();
      s.idle_info();
    }
    running = open_stream();
    EXPECT_NE(running->read(10s, "data: ").find("data: "), std::string::npos);  // it runs
    queued1 = open_stream();
    queued2 = open_stream();
    for (int i = 0; i < 1000 && !filled; ++i) {
      const json info = s.get("/get_server_info").second;
      filled = info["num_waiting_reqs"] == 2;
      if (info["num_running_reqs"] == 0 && info["num_waiting_reqs"] == 0) break;  // all done
      if (!filled) std::this_thread::sleep_for(10ms);
    }
  }
  ASSERT_TRUE(filled) << "the queue never held two requests in 5 attempts";
  const auto res =
      s.client()->Post("/generate", R"({"text": "hi", "sampling_params": {"max_new_tokens": 2}})",
                       "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503) << res->body;
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_NE(res->body.find("queue is full"), std::string::npos) << res->body;
  // Hanging up frees the queue: the next request is admitted.
  running.reset();
  queued1.reset();
  queued2.reset();
  s.idle_info();
  int st = 0;
  json body;
  for (int i = 0; i < 100 && st != 200; ++i) {  // the HTTP threads notice the hang-ups
    std::tie(st, body) =
        s.post("/generate", {{"text", "hi"}, {"sampling_params", {{"max_new_tokens", 2}}}});
    if (st != 200) std::this_thread::sleep_for(20ms);
  }
  EXPECT_EQ(st, 200) << body.dump();
}

}  // namespace
}  // namespace kvserve

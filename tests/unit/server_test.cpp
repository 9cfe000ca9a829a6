// The HTTP server, black box: real engine, real sockets, httplib as the client.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <set>
#include <tuple>

#include "unit/server_test_util.h"

namespace kvserve {
namespace {

using testing_util::greedy_ids;
using testing_util::json;
using testing_util::TestServer;

std::vector<std::vector<int32_t>> prompts(int n, int min_len, int max_len, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<int32_t>> out(n);
  for (auto& p : out) {
    p.resize(min_len + rng() % (max_len - min_len + 1));
    for (auto& t : p)
      t = 10 + static_cast<int32_t>(rng() % 4000);
  }
  return out;
}

// Parses an SSE body into its JSON events (stopping at [DONE]).
std::vector<json> sse_events(const std::string& body, bool* done = nullptr) {
  std::vector<json> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    const size_t end = body.find("\n\n", pos);
    const std::string payload = body.substr(pos + 6, end - pos - 6);
    pos = end;
    if (payload == "[DONE]") {
      if (done) *done = true;
      break;
    }
    out.push_back(json::parse(payload));
  }
  return out;
}

// POSTs `body` to /generate twice, as is and with "stream": true: the response, and the stream's
// events (which must end with [DONE]).
void generate_both_ways(const TestServer& s, const json& body, json& full,
                        std::vector<json>& events) {
  int status = 0;
  std::tie(status, full) = s.post("/generate", body);
  ASSERT_EQ(status, 200) << full.dump();
  json stream_body = body;
  stream_body["stream"] = true;
  auto res = s.client()->Post("/generate", stream_body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  bool done = false;
  events = sse_events(res->body, &done);
  ASSERT_TRUE(done);
}

TEST(Server, InfoEndpoints) {
  TestServer s;
  EXPECT_EQ(s.client()->Get("/health")->status, 200);
  const auto [ms, models] = s.get("/v1/models");
  EXPECT_EQ(ms, 200);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  const auto [is, info] = s.get("/get_server_info");
  EXPECT_EQ(is, 200);
  EXPECT_EQ(info["max_total_num_tokens"], 16384);
  EXPECT_EQ(info["context_length"], 2048);
  EXPECT_EQ(s.client()->Get("/health_generate")->status, 200);
  const auto metrics = s.client()->Get("/metrics");
  ASSERT_EQ(metrics->status, 200);
  for (const char* name :
       {"kvserve:num_running_reqs", "kvserve:token_usage", "kvserve:cache_hit_rate",
        "kvserve:prompt_tokens_total", "kvserve:generation_tokens_total",
        "kvserve:time_to_first_token_seconds_bucket", "kvserve:inter_token_latency_seconds_count",
        "kvserve:e2e_request_latency_seconds_sum"}) {
    EXPECT_NE(metrics->body.find(name), std::string::npos) << name;
  }
  EXPECT_EQ(s.post("/flush_cache", json::object()).first, 200);
  const auto [st, nf] = s.get("/no/such/route");
  EXPECT_EQ(st, 404);
  EXPECT_TRUE(nf.contains("error"));
}

TEST(Server, CompletionsAndChatShapes) {
  TestServer s;
  auto [cs, c] = s.post("/v1/completions", {{"model", "tiny"},
                                            {"prompt", "Hello there"},
                                            {"max_tokens", 6},
                                            {"temperature", 0},
                                            {"logprobs", 2},
                                            {"ignore_eos", true}});
  ASSERT_EQ(cs, 200) << c.dump();
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"].size(), 6u);
  EXPECT_EQ(c["choices"][0]["logprobs"]["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(c["usage"]["completion_tokens"], 6);
  EXPECT_EQ(c["usage"]["total_tokens"], c["usage"]["prompt_tokens"].get<int>() + 6);

  auto [hs, h] = s.post(
      "/v1/chat/completions",
      {{"messages",
        {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi!"}}}},
       {"max_tokens", 5},
       {"temperature", 0},
       {"n", 2},
       {"logprobs", true},
       {"top_logprobs", 3},
       {"ignore_eos", true}});
  ASSERT_EQ(hs, 200) << h.dump();
  EXPECT_EQ(h["object"], "chat.completion");
  ASSERT_EQ(h["choices"].size(), 2u);
  EXPECT_EQ(h["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(h["choices"][0]["message"]["content"],
            h["choices"][1]["message"]["content"]);  // greedy
  EXPECT_EQ(h["choices"][0]["logprobs"]["content"].size(), 5u);
  EXPECT_EQ(h["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 3u);
  EXPECT_EQ(h["usage"]["completion_tokens"], 10);

  // Streaming chat: role first, content deltas, a finish chunk, usage, [DONE]; the deltas add up
  // to the non-streaming text.
  auto res = s.client()->Post("/v1/chat/completions",
                              json{{"messages",
                                    {{{"role", "system"}, {"content", "Be brief."}},
                                     {{"role", "user"}, {"content", "Hi!"}}}},
                                   {"max_tokens", 5},
                                   {"temperature", 0},
                                   {"stream", true},
                                   {"ignore_eos", true},
                                   {"stream_options", {{"include_usage", true}}}}
                                  .dump(),
                              "application/json");
  ASSERT_EQ(res->status, 200);
  bool done = false;
  const auto events = sse_events(res->body, &done);
  EXPECT_TRUE(done);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string text;
  for (const auto& e : events) {
    if (!e["choices"].empty() && e["choices"][0]["delta"].contains("content")) {
      text += e["choices"][0]["delta"]["content"].get<std::string>();
    }
  }
  EXPECT_EQ(text, h["choices"][0]["message"]["content"]);
  EXPECT_EQ(events.back()["usage"]["completion_tokens"], 5);
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "length");
}

TEST(Server, GenerateStreamingMatchesNonStreaming) {
  TestServer s;
  const json body = {
      {"text", "The capital of France is"},
      {"sampling_params", {{"max_new_tokens", 12}, {"temperature", 0}, {"ignore_eos", true}}},
      {"return_logprob", true},
      {"logprob_start_len", 0},
      {"top_logprobs_num", 2}};
  json full;
  std::vector<json> events;
  ASSERT_NO_FATAL_FAILURE(generate_both_ways(s, body, full, events));
  EXPECT_EQ(events.back()["text"], full["text"]);  // cumulative text
  EXPECT_EQ(events.back()["output_ids"], full["output_ids"]);
  const json& meta = full["meta_info"];
  EXPECT_EQ(meta["output_token_logprobs"].size(), 12u);
  EXPECT_EQ(meta["output_top_logprobs"][0].size(), 2u);
  // Input logprobs: one per prompt position, the first without a value.
  EXPECT_EQ(meta["input_token_logprobs"].size(), meta["prompt_tokens"].get<size_t>());
  EXPECT_TRUE(meta["input_token_logprobs"][0][0].is_null());
  for (size_t i = 1; i < meta["input_token_logprobs"].size(); ++i) {
    EXPECT_LE(meta["input_token_logprobs"][i][0].get<double>(), 0.0);
  }
}

// Streamed /generate events without logprobs take a direct rendering path: each event must be
// the same object native_item makes (cumulative text and ids, meta_info), plus "index".
TEST(Server, GenerateStreamEventsHaveTheNonStreamingShape) {
  TestServer s;
  const json body = {
      {"text", "Streaming, \"quoted\" and \u00e9\n"},
      {"sampling_params", {{"max_new_tokens", 9}, {"temperature", 0}, {"ignore_eos", true}}}};
  json full;
  std::vector<json> events;
  ASSERT_NO_FATAL_FAILURE(generate_both_ways(s, body, full, events));
  ASSERT_FALSE(events.empty());
  size_t ids = 0;
  for (const json& e : events) {
    EXPECT_EQ(e["index"], 0);
    EXPECT_GE(e["output_ids"].size(), ids);  // cumulative
    ids = e["output_ids"].size();
    EXPECT_EQ(e["meta_info"]["completion_tokens"], ids);
    EXPECT_EQ(e["meta_info"]["prompt_tokens"], full["meta_info"]["prompt_tokens"]);
    EXPECT_TRUE(e["meta_info"]["e2e_latency"].is_number());
    EXPECT_TRUE(e["meta_info"]["id"].is_string());
  }
  const json& last = events.back();
  EXPECT_EQ(last["text"], full["text"]);
  EXPECT_EQ(last["output_ids"], full["output_ids"]);
  EXPECT_EQ(last["meta_info"]["finish_reason"], full["meta_info"]["finish_reason"]);
  EXPECT_EQ(last["meta_info"]["cached_tokens"].type(), json::value_t::number_unsigned);
  for (size_t i = 0; i + 1 < events.size(); ++i)
    EXPECT_TRUE(events[i]["meta_info"]["finish_reason"].is_null());
}

TEST(Server, ConcurrentGreedyRequestsMatchEachAlone) {
  TestServer s;
  const auto ps = prompts(64, 5, 120, 11);
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : ps)
    alone.push_back(greedy_ids(s, p, 16));
  std::vector<std::future<std::vector<int32_t>>> futures;
  for (const auto& p : ps) {
    futures.push_back(std::async(std::launch::async, [&s, &p] { return greedy_ids(s, p, 16); }));
  }
  for (size_t i = 0; i < ps.size(); ++i)
    EXPECT_EQ(futures[i].get(), alone[i]) << "request " << i;
  const json info = s.idle_info();
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
}

TEST(Server, SharedPrefixIsCachedAndChangesNothing) {
  const auto base = prompts(1, 300, 300, 5)[0];
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < 6; ++i) {
    auto p = base;
    for (int k = 0; k < 5 + i; ++k)
      p.push_back(20 + i * 7 + k);
    ps.push_back(p);
  }
  std::vector<std::vector<int32_t>> reference;
  {
    auto o = testing_util::tiny_engine_options();
    o.disable_radix_cache = true;
    TestServer plain(o);
    for (const auto& p : ps)
      reference.push_back(greedy_ids(plain, p, 12));
  }
  TestServer s;
  for (size_t i = 0; i < ps.size(); ++i) {
    json meta;
    EXPECT_EQ(greedy_ids(s, ps[i], 12, &meta), reference[i]);
    if (i > 0) {
      EXPECT_GE(meta["cached_tokens"].get<int>(), 300) << i;
    }
  }
  const auto [st, c] = s.post("/v1/completions", {{"prompt", ps[0]}, {"max_tokens", 1}});
  EXPECT_GT(c["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0);
  const auto metrics = s.client()->Get("/metrics")->body;
  EXPECT_EQ(metrics.find("kvserve:cache_hit_rate{model_name=\"tiny\"} 0\n"), std::string::npos);
}

TEST(Server, ChunkedPrefillAndPageSizesAgree) {
  const auto ps = prompts(8, 30, 200, 17);
  std::vector<std::vector<int32_t>> reference;
  for (const int32_t page : {1, 16, 64}) {
    for (const int64_t chunk : {int64_t{-1}, int64_t{64}}) {
      auto o = testing_util::tiny_engine_options();
      o.runner.page_size = page;
      o.scheduler.chunked_prefill_size = chunk;
      TestServer s(o);
      std::vector<std::future<std::vector<int32_t>>> futures;
      for (const auto& p : ps) {
        futures.push_back(
            std::async(std::launch::async, [&s, &p] { return greedy_ids(s, p, 10); }));
      }
      std::vector<std::vector<int32_t>> out;
      for (auto& f : futures)
        out.push_back(f.get());
      if (reference.empty()) {
        reference = out;
      } else {
        EXPECT_EQ(out, reference) << "page " << page << " chunk " << chunk;
      }
      const json info = s.idle_info();
      EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
    }
  }
}

TEST(Server, DisconnectAbortsAndFreesMemory) {
  TestServer s;
  const json before = s.get("/get_server_info").second;
  {
    httplib::Client c("127.0.0.1", s.port());
    int chunks = 0;
    httplib::Request req;
    req.method = "POST";
    req.path = "/generate";
    req.body = json{
        {"input_ids", prompts(1, 50, 50, 3)[0]},
        {"sampling_params", {{"max_new_tokens", 1900}, {"ignore_eos", true}}},
        {"stream",
         true}}.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      return ++chunks < 5;  // hang up after 5 pieces
    };
    httplib::Response res;
    httplib::Error err = httplib::Error::Success;
    c.send(req, res, err);
    EXPECT_GE(chunks, 5);
  }
  const json info = s.idle_info();
  EXPECT_EQ(info["num_running_reqs"], 0);
  EXPECT_EQ(info["used_tokens"], 0);
  EXPECT_EQ(info["available_tokens"].get<int64_t>() + info["evictable_tokens"].get<int64_t>(),
            before["available_tokens"].get<int64_t>() + before["evictable_tokens"].get<int64_t>());
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
  EXPECT_NE(s.client()
                ->Get("/metrics")
                ->body.find("kvserve:num_aborted_requests_total{model_name=\"tiny\"} 1"),
            std::string::npos);
}

TEST(Server, StopStringsStopTokensAndSeeds) {
  TestServer s;
  // Find what greedy says, then stop on a piece of it.
  const auto [st, full] = s.post(
      "/generate",
      {{"text", "Once upon a time"},
       {"sampling_params", {{"max_new_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}}}});
  ASSERT_EQ(st, 200);
  const std::string text = full["text"];
  ASSERT_GT(text.size(), 6u);
  const std::string stop = text.substr(text.size() / 2, 3);
  const auto [st2, cut] = s.post(
      "/generate",
      {{"text", "Once upon a time"},
       {"sampling_params",
        {{"max_new_tokens", 20}, {"temperature", 0}, {"ignore_eos", true}, {"stop", stop}}}});
  ASSERT_EQ(st2, 200) << cut.dump();
  EXPECT_EQ(cut["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(cut["meta_info"]["finish_reason"]["type"], "stop");
  EXPECT_EQ(cut["meta_info"]["finish_reason"]["matched"], stop);
  const int32_t third = full["output_ids"][2];
  const auto [st3, tok] = s.post("/generate", {{"text", "Once upon a time"},
                                               {"sampling_params",
                                                {{"max_new_tokens", 20},
                                                 {"temperature", 0},
                                                 {"ignore_eos", true},
                                                 {"stop_token_ids", {third}}}}});
  EXPECT_EQ(tok["meta_info"]["finish_reason"]["matched"], third);
  EXPECT_LE(tok["output_ids"].size(), 3u);
  // Seeded sampling: the same seed gives the same text, n > 1 gives different seeds.
  const json sampled = {{"prompt", "Hello"}, {"max_tokens", 12}, {"temperature", 1.0},
                        {"seed", 5},         {"n", 3},           {"ignore_eos", true}};
  const auto a = s.post("/v1/completions", sampled).second;
  const auto b = s.post("/v1/completions", sampled).second;
  EXPECT_EQ(a["choices"], b["choices"]);
  std::set<std::string> distinct;
  for (const auto& c : a["choices"])
    distinct.insert(c["text"]);
  EXPECT_GT(distinct.size(), 1u);
}

TEST(Server, ApiKey) {
  server::ServerOptions so;
  so.api_key = "sekret";
  TestServer s(testing_util::tiny_engine_options(), so);
  EXPECT_EQ(s.client()->Get("/health")->status, 200);
  auto c = s.client();
  const auto res = c->Get("/v1/models");
  EXPECT_EQ(res->status, 401);
  EXPECT_NE(res->body.find("invalid_api_key"), std::string::npos);
  c->set_bearer_token_auth("sekret");
  EXPECT_EQ(c->Get("/v1/models")->status, 200);
  c->set_bearer_token_auth("wrong");
  EXPECT_EQ(c->Post("/generate", "{}", "application/json")->status, 401);
}

// SGLang's --sampling-defaults: "model" takes what a request leaves out from
// generation_config.json; "openai" uses the API's defaults (temperature 1).
TEST(Server, SamplingDefaultsComeFromTheModel) {
  model::testing::TempDir dir;
  const std::filesystem::path copy = dir.path() / "tiny";
  std::filesystem::copy(testing_util::tiny_model(), copy);
  json gen = json::parse(std::ifstream(copy / "generation_config.json"));
  gen["temperature"] = 0.0;  // greedy unless a request says otherwise
  std::ofstream(copy / "generation_config.json") << gen.dump();
  auto eo = testing_util::tiny_engine_options();
  eo.model_path = copy;
  auto texts = [](const TestServer& s, const json& extra) {
    std::set<std::string> out;
    for (int seed = 1; seed <= 4; ++seed) {
      json body = {{"prompt", "Hello"}, {"max_tokens", 12}, {"ignore_eos", true}, {"seed", seed}};
      body.update(extra);
      const auto [st, r] = s.post("/v1/completions", body);
      EXPECT_EQ(st, 200) << r.dump();
      out.insert(r["choices"][0]["text"].get<std::string>());
    }
    return out;
  };
  {
    TestServer model_defaults(eo);
    EXPECT_EQ(texts(model_defaults, json::object()).size(), 1u);          // greedy from the model
    EXPECT_GT(texts(model_defaults, {{"temperature", 1.0}}).size(), 1u);  // the request wins
  }
  server::ServerOptions so;
  so.sampling_defaults = "openai";
  TestServer openai_defaults(eo, so);
  EXPECT_GT(texts(openai_defaults, json::object()).size(), 1u);  // temperature 1
}

}  // namespace
}  // namespace kvserve

// Error tiers, black box: a device buffer that cannot grow while a batch runs (injected through
// platform/allocation_faults.h on the CPU platform, whose growths on the request path are the
// model's activation workspace) fails the requests of that batch with an OpenAI-style error and
// frees their memory, while the engine goes on serving every other request: their outputs equal
// a server that never failed, and the memory invariants hold afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "kvserve/platform/allocation_faults.h"
#include "unit/server_test_util.h"

namespace kvserve {
namespace {

using testing_util::greedy_ids;
using testing_util::json;
using testing_util::TestServer;

std::vector<int32_t> ids(int32_t n, int32_t first) {
  std::vector<int32_t> out(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i)
    out[static_cast<size_t>(i)] = first + 7 * i;
  return out;
}

// A greedy request on the engine itself: its stream, to read while other requests run.
std::shared_ptr<engine::RequestStream> submit(engine::Engine& e, std::vector<int32_t> prompt,
                                              int32_t max_new) {
  engine::SubmitRequest r;
  r.input_ids = std::move(prompt);
  r.sampling.max_new_tokens = max_new;
  r.sampling.temperature = 0;
  r.sampling.ignore_eos = true;
  auto stream = e.submit(r);
  EXPECT_TRUE(stream.is_ok()) << stream.status().to_string();
  return stream.is_ok() ? *stream : nullptr;
}

struct Outcome {
  std::vector<int32_t> tokens;
  engine::FinishReason finish;
  int32_t events = 0;
};

// Reads events until the finished one, or until `max_events` events (then finish.kind is kNone).
Outcome read(engine::RequestStream& s, int32_t max_events = 1 << 30) {
  Outcome o;
  engine::StreamEvent e;
  while (o.events < max_events && s.pop(e, std::chrono::seconds(60))) {
    ++o.events;
    o.tokens.insert(o.tokens.end(), e.token_ids.begin(), e.token_ids.end());
    if (e.finished) {
      o.finish = e.finish;
      break;
    }
  }
  return o;
}

engine::EngineOptions faulty_options(std::shared_ptr<platform::AllocationFaults> faults) {
  engine::EngineOptions o = testing_util::tiny_engine_options();
  o.runner.allocation_faults = std::move(faults);
  return o;
}

// A prefill that cannot grow the activation workspace fails its own request; the request already
// decoding is not in that batch and runs to its end, token for token as on a server without
// faults. The SSE stream of the failed request ends with an error chunk, then [DONE].
TEST(FaultInjection, FailedPrefillFailsOnlyItsBatch) {
  const std::vector<int32_t> short_prompt = ids(4, 11);
  const std::vector<int32_t> long_prompt = ids(48, 23);
  constexpr int32_t kDecodeLen = 160;  // still decoding when the failing prefill comes
  TestServer reference;                // never fails
  const std::vector<int32_t> want_short = greedy_ids(reference, short_prompt, kDecodeLen);
  const std::vector<int32_t> want_long = greedy_ids(reference, long_prompt, 8);

  auto faults = std::make_shared<platform::AllocationFaults>();
  TestServer s(faulty_options(faults));
  // The first request prefills 4 tokens (the workspace grows to 4) and then decodes one token per
  // step: nothing it does from here on allocates.
  auto running = submit(s.engine(), short_prompt, kDecodeLen);
  ASSERT_NE(running, nullptr);
  const Outcome first = read(*running, 1);
  ASSERT_EQ(first.tokens.size(), 1u);
  faults->arm(1);
  // 48 prompt tokens: the prefill batch (this request alone) must grow the workspace; it fails.
  auto res = s.client()->Post(
      "/v1/completions",
      json{{"prompt", long_prompt}, {"max_tokens", 8}, {"temperature", 0}, {"stream", true}}.dump(),
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);  // SSE: the status left with the headers
  const std::string& body = res->body;
  const size_t error_at = body.find("data: {\"error\":");
  ASSERT_NE(error_at, std::string::npos) << body;
  const json error =
      json::parse(body.substr(error_at + 6, body.find("\n\n", error_at) - error_at - 6));
  EXPECT_EQ(error["error"]["type"], "service_unavailable") << error.dump();
  EXPECT_EQ(error["error"]["code"], 503) << error.dump();
  EXPECT_NE(error["error"]["message"].get<std::string>().find("injected fault"), std::string::npos)
      << error.dump();
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos) << body;
  EXPECT_EQ(faults->injected(), 1);

  // The decoding request never noticed.
  Outcome rest = read(*running);
  EXPECT_EQ(rest.finish.kind, engine::FinishKind::kLength) << rest.finish.message;
  std::vector<int32_t> got = first.tokens;
  got.insert(got.end(), rest.tokens.begin(), rest.tokens.end());
  EXPECT_EQ(got, want_short);

  // The failed prompt, sent again, is served like on the reference server; nothing leaked.
  EXPECT_EQ(greedy_ids(s, long_prompt, 8), want_long);
  const json info = s.idle_info();
  EXPECT_EQ(info["used_tokens"], 0) << info.dump();
  // Every slot is free or held by the prefix cache (the successful requests' tokens).
  EXPECT_EQ(info["available_tokens"].get<int64_t>() + info["evictable_tokens"].get<int64_t>(),
            info["max_total_num_tokens"].get<int64_t>())
      << info.dump();
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
  EXPECT_EQ(info["engine_time"]["failed_batches"], 1) << info.dump();
}

// A decode step that cannot grow the workspace fails every request of that step (and frees their
// KV and rows); requests that arrive afterwards are served normally.
TEST(FaultInjection, FailedDecodeStepFailsItsRequestsAndServingGoesOn) {
  auto faults = std::make_shared<platform::AllocationFaults>();
  TestServer s(faulty_options(faults));
  // a and b (one-token prompts, long outputs so that they are still decoding when c arrives):
  // once b has its second token, a decode step of both has run, so the workspace holds 2 tokens.
  // c's prefill (1 token) needs no growth; the next decode step (a, b, c: 3 tokens) does.
  auto a = submit(s.engine(), {101}, 1500);
  auto b = submit(s.engine(), {202}, 1500);
  ASSERT_EQ(read(*b, 2).tokens.size(), 2u);
  faults->arm(1);
  auto c = submit(s.engine(), {303}, 16);
  const Outcome rest_a = read(*a);
  const Outcome rest_b = read(*b);
  const Outcome rest_c = read(*c);
  EXPECT_EQ(faults->injected(), 1);
  for (const Outcome* o : {&rest_a, &rest_b, &rest_c}) {
    EXPECT_EQ(o->finish.kind, engine::FinishKind::kError);
    EXPECT_NE(o->finish.message.find("injected fault"), std::string::npos) << o->finish.message;
  }
  EXPECT_LT(rest_a.tokens.size(), 1500u);
  // c's prefill ran (one token, no growth) before the failed step: one token, then the error.
  EXPECT_EQ(rest_c.tokens.size(), 1u);

  // Non-streaming: the failed request's body is the OpenAI-style error document.
  faults->arm(1);
  const auto [status, body] =
      s.post("/v1/completions", {{"prompt", ids(64, 5)}, {"max_tokens", 4}, {"temperature", 0}});
  EXPECT_EQ(status, 200);
  ASSERT_TRUE(body.contains("error")) << body.dump();
  EXPECT_EQ(body["error"]["type"], "service_unavailable") << body.dump();

  // Serving goes on: the same requests now run to their end, as on a server without faults.
  TestServer reference;
  EXPECT_EQ(greedy_ids(s, {101}, 16), greedy_ids(reference, {101}, 16));
  EXPECT_EQ(greedy_ids(s, ids(64, 5), 4), greedy_ids(reference, ids(64, 5), 4));
  const json info = s.idle_info();
  EXPECT_EQ(info["used_tokens"], 0) << info.dump();
  // Every slot is free or held by the prefix cache (the successful requests' tokens).
  EXPECT_EQ(info["available_tokens"].get<int64_t>() + info["evictable_tokens"].get<int64_t>(),
            info["max_total_num_tokens"].get<int64_t>())
      << info.dump();
  EXPECT_EQ(info["invariant_violations"], 0) << info["last_invariant_violation"];
  EXPECT_EQ(info["engine_time"]["failed_batches"], 2) << info.dump();
}

}  // namespace
}  // namespace kvserve

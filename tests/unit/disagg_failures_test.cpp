// Prefill/decode disaggregation when things go wrong (in one process, loopback transport): aborts
// from either side in every state, injected transfer failures and losses, bootstrap and transfer
// timeouts, a prefill server gone mid-transfer. Every request must end (an answer equal to a
// single server's, or an error) within its timeout; the decode server's KV must not be freed
// while a write into it may still land (SGLang issue 24527) and must come back to idle with no
// invariant violation; the decode server must keep serving.
#include "unit/disagg_engines.h"

namespace kvserve::engine {
namespace {

constexpr Shape kPage1{1, 8192};

EngineOptions fast(DisaggMode mode, const disagg::TransportFaults& faults = {},
                   double timeout_s = 2) {
  EngineOptions o = options(mode, kPage1, faults);
  o.disagg.bootstrap_timeout_s = timeout_s;
  o.disagg.transfer_timeout_s = timeout_s;
  o.disagg.heartbeat_interval_s = 0.1;
  o.disagg.heartbeat_timeout_s = 1;
  return o;
}

// Waits until `pred(status)` holds (or `limit_s` passes); true if it did.
template <typename Pred>
bool wait_for(Engine& e, double limit_s, Pred pred) {
  const auto until = SteadyClock::now() + std::chrono::duration<double>(limit_s);
  while (SteadyClock::now() < until) {
    if (pred(e.status())) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return false;
}

SubmitRequest half(const Engine& e, uint64_t room, const std::string& host, int32_t port) {
  SubmitRequest r = request(e, "The old lighthouse keeper looked at the sea and said", 8);
  r.rid = fmt::format("pd-{}", room);
  r.disagg = DisaggTarget{host, port, room};
  return r;
}

TEST(DisaggFailuresTest, DecodeAbortWhileBootstrappingEndsAtOnce) {
  // A prefill address where nothing answers: the request stays in Bootstrapping.
  int32_t dead_port = 0;
  {
    auto probe = pd::ControlServer::bind("127.0.0.1", 0);
    ASSERT_TRUE(probe.is_ok());
    dead_port = probe.value()->port();
  }
  auto decode = make(fast(DisaggMode::kDecode));
  ASSERT_TRUE(decode);
  const uint64_t room = next_room();
  auto stream = submit(*decode, half(*decode, room, "127.0.0.1", dead_port));
  ASSERT_TRUE(
      wait_for(*decode, 2, [](const EngineStatus& s) { return s.disagg.bootstrapping == 1; }));
  decode->abort(fmt::format("pd-{}", room));
  const Outcome out = collect(*stream, milliseconds(3000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kAbort);
  EXPECT_LT(out.seconds, 0.5);
  EXPECT_TRUE(wait_idle(*decode, 2));
}

TEST(DisaggFailuresTest, AnUnbridgeableLayoutIsRefusedAtTheHandshakeNotHung) {
  auto prefill = make(fast(DisaggMode::kPrefill));
  EngineOptions d = fast(DisaggMode::kDecode);
  d.runner.kv_cache_dtype = DType::kFP8E4M3;  // page sizes would be bridged; KV dtypes are not
  auto decode = make(d);
  ASSERT_TRUE(prefill && decode);
  const Outcome out = collect(
      *submit(*decode, half(*decode, next_room(), "127.0.0.1", prefill->disagg_bootstrap_port())),
      milliseconds(5000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kError);
  EXPECT_NE(out.all.finish.message.find("KV dtype f32 (prefill) vs fp8_e4m3 (decode)"),
            std::string::npos)
      << out.all.finish.message;
  EXPECT_LT(out.seconds, 1.0);
  // The prefill publishes its counters after the step that sent the refusal: the decode side may
  // hear first.
  EXPECT_TRUE(
      wait_for(*prefill, 2, [](const EngineStatus& s) { return s.disagg.refused_peers == 1; }))
      << "refused peers: " << prefill->status().disagg.refused_peers;
  EXPECT_TRUE(wait_idle(*decode, 2));
  EXPECT_TRUE(wait_idle(*prefill, 2));
}

// A staging buffer on one side only cannot work: refused at the handshake, naming the flag.
TEST(DisaggFailuresTest, StagingOnOneSideOnlyIsRefusedNamingTheFlag) {
  EngineOptions p = fast(DisaggMode::kPrefill);
  p.disagg.staging_buffer_mb = staging_mb(64);
  auto prefill = make(p);
  auto decode = make(fast(DisaggMode::kDecode));
  ASSERT_TRUE(prefill && decode);
  const Outcome out = collect(
      *submit(*decode, half(*decode, next_room(), "127.0.0.1", prefill->disagg_bootstrap_port())),
      milliseconds(5000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kError);
  EXPECT_NE(out.all.finish.message.find("--disaggregation-staging-buffer-mb"), std::string::npos)
      << out.all.finish.message;
  EXPECT_LT(out.seconds, 1.0);
  EXPECT_TRUE(wait_idle(*decode, 2));
  EXPECT_TRUE(wait_idle(*prefill, 2));
}

// A prompt many times longer than the decode side's staging buffer (4 tokens: each room's extent
// is one token) passes through its extent in rounds (staged, scattered, credited): the answer
// equals a single server's and both servers go back to idle.
TEST(DisaggFailuresTest, APromptManyTimesTheDecodeStagingBufferGoesThroughInRounds) {
  auto single = make(options(DisaggMode::kNone, kPage1));
  EngineOptions p = fast(DisaggMode::kPrefill);
  EngineOptions d = fast(DisaggMode::kDecode);
  p.disagg.staging_buffer_mb = staging_mb(64);
  d.disagg.staging_buffer_mb = staging_mb(4);
  auto prefill = make(p);
  auto decode = make(d);
  ASSERT_TRUE(single && prefill && decode);
  const SubmitRequest req =
      request(*single, "The old lighthouse keeper looked at the sea and said", 8);
  const Outcome want = collect(*submit(*single, req));
  Pair pair = submit_pair(*prefill, *decode, req);
  const Outcome got = collect(*pair.decode, milliseconds(10000));
  collect(*pair.prefill, milliseconds(10000));
  EXPECT_EQ(got.all.finish.kind, FinishKind::kLength) << got.all.finish.message;
  EXPECT_EQ(got.all.token_ids, want.all.token_ids);
  // One write per token of the prompt: the extent holds one.
  EXPECT_EQ(prefill->status().disagg.staged_chunks, static_cast<int64_t>(req.input_ids.size()));
  EXPECT_EQ(decode->status().disagg.staging_tokens, 4);
  EXPECT_TRUE(wait_idle(*decode, 2));
  EXPECT_TRUE(wait_idle(*prefill, 2));
}

TEST(DisaggFailuresTest, NoPrefillServerFailsWithinTheHeartbeatTimeout) {
  int32_t dead_port = 0;
  {
    auto probe = pd::ControlServer::bind("127.0.0.1", 0);
    ASSERT_TRUE(probe.is_ok());
    dead_port = probe.value()->port();
  }
  auto decode = make(fast(DisaggMode::kDecode));
  ASSERT_TRUE(decode);
  const Outcome out = collect(*submit(*decode, half(*decode, next_room(), "127.0.0.1", dead_port)),
                              milliseconds(5000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kError);
  EXPECT_NE(out.all.finish.message.find("no answer"), std::string::npos) << out.all.finish.message;
  EXPECT_LT(out.seconds, 2.5);
  EXPECT_TRUE(wait_idle(*decode, 2));
}

TEST(DisaggFailuresTest, DecodeAbortWhileWaitingForInputDrainsUntilTheAck) {
  auto prefill = make(fast(DisaggMode::kPrefill));
  auto decode = make(fast(DisaggMode::kDecode));
  ASSERT_TRUE(prefill && decode);
  const uint64_t room = next_room();
  // Only the decode half: it pre-allocates and sends its pages; the prefill keeps them waiting.
  auto stream = submit(*decode, half(*decode, room, "127.0.0.1", prefill->disagg_bootstrap_port()));
  ASSERT_TRUE(
      wait_for(*decode, 2, [](const EngineStatus& s) { return s.disagg.waiting_for_input == 1; }));
  EXPECT_GT(decode->status().scheduler.used_tokens, 0);
  decode->abort(fmt::format("pd-{}", room));
  const Outcome out = collect(*stream, milliseconds(3000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kAbort);
  EXPECT_TRUE(wait_idle(*decode, 2));
  // The prefill half arriving late is refused at once (the room ended).
  const Outcome late = collect(*submit(*prefill, half(*prefill, room, "", 0)), milliseconds(3000));
  EXPECT_EQ(late.all.finish.kind, FinishKind::kError);
  EXPECT_LT(late.seconds, 0.5);
  EXPECT_TRUE(wait_idle(*prefill, 2));
}

TEST(DisaggFailuresTest, DecodeAbortWhileTransferringKeepsThePagesUntilTheWritesEnd) {
  disagg::TransportFaults slow;
  slow.delay_ms = 600;  // every transfer is in flight this long
  auto prefill = make(fast(DisaggMode::kPrefill, slow));
  auto decode = make(fast(DisaggMode::kDecode));
  ASSERT_TRUE(prefill && decode);
  Pair pair = submit_pair(*prefill, *decode, request(*decode, "A fortune for today: you will", 8));
  ASSERT_TRUE(
      wait_for(*prefill, 3, [](const EngineStatus& s) { return s.disagg.transferring == 1; }));
  decode->abort(pair.rid);
  const Outcome out = collect(*pair.decode, milliseconds(3000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kAbort);
  EXPECT_LT(out.seconds, 0.3);  // the client hears at once ...
  // ... but the pages stay reserved while the prefill's write may still land.
  EXPECT_TRUE(wait_for(*decode, 0.2, [](const EngineStatus& s) {
    return s.disagg.draining == 1 && s.scheduler.used_tokens > 0;
  }));
  const Outcome first = collect(*pair.prefill, milliseconds(3000));
  EXPECT_EQ(first.all.finish.kind, FinishKind::kError);
  EXPECT_NE(first.all.finish.message.find("aborted by the decode server"), std::string::npos);
  EXPECT_TRUE(wait_idle(*decode, 3));
  EXPECT_TRUE(wait_idle(*prefill, 3));
}

TEST(DisaggFailuresTest, PrefillAbortWhileTransferringFailsTheDecodeHalf) {
  disagg::TransportFaults slow;
  slow.delay_ms = 400;
  auto prefill = make(fast(DisaggMode::kPrefill, slow));
  auto decode = make(fast(DisaggMode::kDecode));
  ASSERT_TRUE(prefill && decode);
  Pair pair = submit_pair(*prefill, *decode, request(*decode, "A fortune for today: you will", 8));
  ASSERT_TRUE(
      wait_for(*prefill, 3, [](const EngineStatus& s) { return s.disagg.transferring == 1; }));
  prefill->abort(pair.rid);
  EXPECT_EQ(collect(*pair.prefill, milliseconds(3000)).all.finish.kind, FinishKind::kAbort);
  const Outcome out = collect(*pair.decode, milliseconds(3000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kError);
  EXPECT_NE(out.all.finish.message.find("prefill server failed"), std::string::npos)
      << out.all.finish.message;
  EXPECT_TRUE(wait_idle(*decode, 3));
  EXPECT_TRUE(wait_idle(*prefill, 3));
}

TEST(DisaggFailuresTest, PrefillAbortInTheBootstrapQueue) {
  auto prefill = make(fast(DisaggMode::kPrefill));
  ASSERT_TRUE(prefill);
  const uint64_t room = next_room();
  auto stream = submit(*prefill, half(*prefill, room, "", 0));
  ASSERT_TRUE(
      wait_for(*prefill, 2, [](const EngineStatus& s) { return s.disagg.bootstrapping == 1; }));
  prefill->abort(fmt::format("pd-{}", room));
  EXPECT_EQ(collect(*stream, milliseconds(3000)).all.finish.kind, FinishKind::kAbort);
  EXPECT_TRUE(wait_idle(*prefill, 2));
}

TEST(DisaggFailuresTest, BootstrapTimeoutEndsBothKindsOfOrphans) {
  auto prefill = make(fast(DisaggMode::kPrefill, {}, /*timeout_s=*/1));
  auto decode = make(fast(DisaggMode::kDecode, {}, /*timeout_s=*/1));
  ASSERT_TRUE(prefill && decode);
  // A decode half whose prefill half never comes, and a prefill half whose decode half never
  // comes.
  auto d =
      submit(*decode, half(*decode, next_room(), "127.0.0.1", prefill->disagg_bootstrap_port()));
  auto p = submit(*prefill, half(*prefill, next_room(), "", 0));
  const Outcome pd = collect(*p, milliseconds(5000));
  const Outcome dd = collect(*d, milliseconds(5000));
  EXPECT_EQ(pd.all.finish.kind, FinishKind::kError);
  EXPECT_NE(pd.all.finish.message.find("bootstrap timeout"), std::string::npos);
  EXPECT_EQ(dd.all.finish.kind, FinishKind::kError);
  EXPECT_LT(pd.seconds, 2.0);
  EXPECT_LT(dd.seconds, 2.5);
  EXPECT_TRUE(wait_idle(*decode, 2));
  EXPECT_TRUE(wait_idle(*prefill, 2));
}

// Eight requests through a pair whose transport fails a share of the posted transfers (staging
// buffers of the given sizes, 0: direct writes): every request ends, those that answer equal a
// single server, each failed one cost exactly one failed transfer (its first ends it), and both
// servers go back to idle (staging extents included).
void expect_injected_failures_end_every_request(double fail_probability, uint64_t seed,
                                                double prefill_staging_mb,
                                                double decode_staging_mb) {
  disagg::TransportFaults faults;
  faults.fail_probability = fail_probability;
  faults.seed = seed;
  auto single = make(options(DisaggMode::kNone, kPage1));
  // Timeouts long enough that, on a loaded machine, only the injected faults fail requests.
  EngineOptions p = fast(DisaggMode::kPrefill, faults, /*timeout_s=*/30);
  EngineOptions d = fast(DisaggMode::kDecode, {}, /*timeout_s=*/30);
  p.disagg.heartbeat_timeout_s = d.disagg.heartbeat_timeout_s = 10;
  p.disagg.staging_buffer_mb = prefill_staging_mb;
  d.disagg.staging_buffer_mb = decode_staging_mb;
  auto prefill = make(p);
  auto decode = make(d);
  ASSERT_TRUE(single && prefill && decode);
  std::vector<std::vector<int32_t>> want;
  std::vector<Pair> pairs;
  for (int i = 0; i < 8; ++i) {
    const SubmitRequest r = request(*single, fmt::format("Story {}: once upon a time", i), 6);
    want.push_back(collect(*submit(*single, r)).all.token_ids);
    pairs.push_back(submit_pair(*prefill, *decode, r));
  }
  int errors = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    const Outcome out = collect(*pairs[i].decode, milliseconds(30000));
    ASSERT_TRUE(out.all.finished) << i;
    if (out.all.finish.kind == FinishKind::kError) {
      ++errors;
    } else {
      EXPECT_EQ(out.all.token_ids, want[i]) << i;
    }
    collect(*pairs[i].prefill, milliseconds(30000));
  }
  EXPECT_GT(errors, 0);
  EXPECT_LT(errors, 8);
  EXPECT_TRUE(wait_for(*prefill, 3,
                       [&](const EngineStatus& s) { return s.disagg.transfer_failures == errors; }))
      << "transfer failures " << prefill->status().disagg.transfer_failures << ", errors "
      << errors;
  EXPECT_TRUE(wait_idle(*decode, 3));
  EXPECT_TRUE(wait_idle(*prefill, 3));
}

TEST(DisaggFailuresTest, InjectedFailuresEndEveryRequestAndTheRestAnswerRight) {
  expect_injected_failures_end_every_request(0.5, 11, 0, 0);
}

// Through the staging buffers: two to three pieces per prompt at the prefill, so a request meets
// several draws.
TEST(DisaggFailuresTest, InjectedFailuresThroughStagingEndEveryRequest) {
  expect_injected_failures_end_every_request(0.3, 12, staging_mb(5), staging_mb(64));
}

TEST(DisaggFailuresTest, DroppedTransfersFailAtTheTransferTimeout) {
  disagg::TransportFaults faults;
  faults.drop_probability = 1;
  auto prefill = make(fast(DisaggMode::kPrefill, faults, /*timeout_s=*/1));
  auto decode = make(fast(DisaggMode::kDecode, {}, /*timeout_s=*/1));
  ASSERT_TRUE(prefill && decode);
  Pair pair = submit_pair(*prefill, *decode, request(*decode, "A fortune for today: you will", 8));
  const Outcome out = collect(*pair.decode, milliseconds(5000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kError);
  EXPECT_LT(out.seconds, 2.5);
  EXPECT_EQ(collect(*pair.prefill, milliseconds(5000)).all.finish.kind, FinishKind::kError);
  EXPECT_TRUE(wait_idle(*decode, 3));
  EXPECT_TRUE(wait_idle(*prefill, 3));
}

TEST(DisaggFailuresTest, PrefillServerGoneMidTransferThenTheDecodeServerServesOn) {
  disagg::TransportFaults slow;
  slow.delay_ms = 3000;
  auto single = make(options(DisaggMode::kNone, kPage1));
  auto prefill = make(fast(DisaggMode::kPrefill, slow, /*timeout_s=*/10));
  auto decode = make(fast(DisaggMode::kDecode, {}, /*timeout_s=*/10));
  ASSERT_TRUE(single && prefill && decode);
  Pair pair = submit_pair(*prefill, *decode, request(*decode, "A fortune for today: you will", 8));
  ASSERT_TRUE(
      wait_for(*prefill, 3, [](const EngineStatus& s) { return s.disagg.transferring == 1; }));
  prefill.reset();  // gone: no abort, no answer to pings
  const Outcome out = collect(*pair.decode, milliseconds(5000));
  EXPECT_EQ(out.all.finish.kind, FinishKind::kError);
  EXPECT_LT(out.seconds, 2.5);  // the heartbeat timeout (1 s), not the transfer timeout (10 s)
  EXPECT_TRUE(wait_idle(*decode, 2));
  // A new prefill server: the decode server works with it (nothing remembered against peers).
  auto again = make(fast(DisaggMode::kPrefill));
  ASSERT_TRUE(again);
  const SubmitRequest req = request(*decode, "Once upon a time, in a village", 10);
  const std::vector<int32_t> want = collect(*submit(*single, req)).all.token_ids;
  Pair next = submit_pair(*again, *decode, req);
  const Outcome ok = collect(*next.decode, milliseconds(10000));
  EXPECT_EQ(ok.all.finish.kind, FinishKind::kLength) << ok.all.finish.message;
  EXPECT_EQ(ok.all.token_ids, want);
  collect(*next.prefill);
  EXPECT_TRUE(wait_idle(*decode, 2));
}

}  // namespace
}  // namespace kvserve::engine

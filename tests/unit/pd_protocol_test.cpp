// The disaggregation protocol pieces below the engine: the per-request state machine (checked
// against an independent table of every transition), the layout check, the control messages'
// round trip, and the ZeroMQ sockets between two ends in this process.
#include <chrono>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "kvserve/pd/channel.h"
#include "kvserve/pd/kv_poll.h"
#include "kvserve/pd/layout.h"
#include "kvserve/pd/messages.h"

namespace kvserve::pd {
namespace {

using Clock = KvPollState::Clock;
constexpr KvPoll kAll[] = {KvPoll::kFailed, KvPoll::kBootstrapping, KvPoll::kWaitingForInput,
                           KvPoll::kTransferring, KvPoll::kSuccess};

// The rule written out independently: from a non-terminal state, any later state or Failed.
bool allowed(KvPoll from, KvPoll to) {
  const int f = static_cast<int>(from), t = static_cast<int>(to);
  const bool terminal = from == KvPoll::kSuccess || from == KvPoll::kFailed;
  if (terminal) return false;
  return to == KvPoll::kFailed || t > f;
}

// Brings a fresh state to `s` along the forward path.
KvPollState at(KvPoll s, Clock::time_point t0) {
  KvPollState st(t0);
  if (s == KvPoll::kFailed) {
    EXPECT_TRUE(st.fail("x", t0));
  } else {
    for (KvPoll step : {KvPoll::kWaitingForInput, KvPoll::kTransferring, KvPoll::kSuccess}) {
      if (static_cast<int>(step) > static_cast<int>(s)) break;
      EXPECT_TRUE(st.advance(step, t0));
    }
  }
  EXPECT_EQ(st.state(), s);
  return st;
}

TEST(KvPollTest, EveryTransitionFollowsTheRule) {
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point t1 = t0 + std::chrono::seconds(3);
  for (KvPoll from : kAll) {
    for (KvPoll to : kAll) {
      KvPollState st = at(from, t0);
      const bool moved = st.advance(to, t1);
      EXPECT_EQ(moved, allowed(from, to)) << kv_poll_name(from) << " -> " << kv_poll_name(to);
      EXPECT_EQ(st.state(), moved ? to : from);
      // The time of entering the state moves only with the state.
      EXPECT_EQ(st.since(), moved ? t1 : t0);
      EXPECT_EQ(st.created(), t0);
    }
  }
}

TEST(KvPollTest, RandomSequencesNeverGoBackAndFailedOverrides) {
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE(testing::Message() << "seed " << seed);
  for (int trial = 0; trial < 2000; ++trial) {
    KvPollState st;
    KvPoll model = KvPoll::kBootstrapping;
    for (int i = 0; i < 8; ++i) {
      const KvPoll to = kAll[rng() % 5];
      const bool expect = allowed(model, to);
      ASSERT_EQ(st.advance(to), expect);
      if (expect) model = to;
      ASSERT_EQ(st.state(), model);
    }
  }
}

TEST(KvPollTest, FailKeepsTheFirstReason) {
  KvPollState st;
  ASSERT_TRUE(st.advance(KvPoll::kTransferring));
  EXPECT_TRUE(st.fail("transfer timed out"));
  EXPECT_FALSE(st.fail("aborted"));
  EXPECT_EQ(st.reason(), "transfer timed out");
  KvPollState done;
  ASSERT_TRUE(done.advance(KvPoll::kSuccess));
  EXPECT_FALSE(done.fail("late"));  // a completed hand-off stays completed
  EXPECT_EQ(done.state(), KvPoll::kSuccess);
}

KvLayout layout(int32_t page_size, const std::string& dtype) {
  KvLayout l;
  l.page_size = page_size;
  l.kv_dtype = dtype;
  l.num_layers = 2;
  l.num_kv_heads = 4;
  l.head_dim = 16;
  l.buffer_offsets = {0, 100, 200, 300};
  l.page_bytes = static_cast<uint64_t>(page_size) * 4 * 16 * 2;
  l.model = "demo-lm";
  return l;
}

TEST(KvLayoutTest, EqualLayoutsPassAndEachMismatchIsNamed) {
  EXPECT_TRUE(check_compatible(layout(16, "bf16"), layout(16, "bf16")).is_ok());
  // Other page sizes with the same slot row: the writes address slots.
  EXPECT_TRUE(check_compatible(layout(16, "bf16"), layout(64, "bf16")).is_ok());
  EXPECT_TRUE(check_compatible(layout(1, "bf16"), layout(16, "bf16")).is_ok());
  KvLayout wide = layout(64, "bf16");
  wide.page_bytes += 64;  // 129-byte slots
  const Status slot = check_compatible(layout(16, "bf16"), wide);
  ASSERT_FALSE(slot.is_ok());
  EXPECT_NE(slot.message().find("slot bytes 128 (prefill) vs 129 (decode)"), std::string::npos)
      << slot.message();
  const Status dtype = check_compatible(layout(16, "bf16"), layout(16, "fp8_e4m3"));
  ASSERT_FALSE(dtype.is_ok());
  EXPECT_NE(dtype.message().find("KV dtype bf16 (prefill) vs fp8_e4m3 (decode)"),
            std::string::npos);
  KvLayout tp = layout(16, "bf16");
  tp.tp_size = 2;
  const Status tps = check_compatible(layout(16, "bf16"), tp);
  ASSERT_FALSE(tps.is_ok());
  EXPECT_NE(tps.message().find("TP size 1 (prefill) vs 2 (decode)"), std::string::npos);
  KvLayout other = layout(16, "bf16");
  other.model = "other";
  EXPECT_FALSE(check_compatible(layout(16, "bf16"), other).is_ok());
}

// Staging pairs: both sides must stage (one side alone is named with the flag); then page sizes
// and slot rows play no part, and f32 / f16 / bf16 convert among themselves while fp8 stays fp8.
TEST(KvLayoutTest, StagingPairsBridgeDtypesAndPageSizesAndNeedBothSides) {
  auto staged = [](int32_t page_size, const std::string& dtype) {
    KvLayout l = layout(page_size, dtype);
    l.staging_bytes = 1 << 20;
    l.buffer_offsets.clear();  // a staging side's pool is no peer's business
    return l;
  };
  EXPECT_TRUE(check_compatible(staged(16, "f32"), staged(1, "bf16")).is_ok());
  EXPECT_TRUE(check_compatible(staged(64, "bf16"), staged(16, "f16")).is_ok());
  EXPECT_TRUE(check_compatible(staged(16, "fp8_e4m3"), staged(16, "fp8_e4m3")).is_ok());
  const Status fp8 = check_compatible(staged(16, "bf16"), staged(16, "fp8_e4m3"));
  ASSERT_FALSE(fp8.is_ok());
  EXPECT_NE(fp8.message().find("KV dtype bf16 (prefill) cannot be converted to fp8_e4m3"),
            std::string::npos)
      << fp8.message();
  for (const bool prefill_stages : {true, false}) {
    const Status one = prefill_stages ? check_compatible(staged(16, "bf16"), layout(16, "bf16"))
                                      : check_compatible(layout(16, "bf16"), staged(16, "bf16"));
    ASSERT_FALSE(one.is_ok());
    EXPECT_NE(one.message().find(prefill_stages ? "the prefill server moves KV through a staging"
                                                : "the decode server moves KV through a staging"),
              std::string::npos)
        << one.message();
    EXPECT_NE(one.message().find("--disaggregation-staging-buffer-mb"), std::string::npos);
  }
  KvLayout heads = staged(16, "bf16");
  heads.num_kv_heads = 8;
  EXPECT_FALSE(check_compatible(staged(16, "bf16"), heads).is_ok());
  // The layout as /disaggregation/bootstrap shows it (what the router checks) round-trips.
  const Result<KvLayout> back = layout_from_json(layout_to_json(staged(64, "f16")));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value().staging_bytes, uint64_t{1} << 20);
  EXPECT_EQ(back.value().kv_dtype, "f16");
  EXPECT_EQ(back.value().page_size, 64);
  EXPECT_FALSE(layout_from_json(R"({"page_size": 16})").is_ok());
  EXPECT_FALSE(layout_from_json("[").is_ok());
}

TEST(MessagesTest, EveryTypeRoundTrips) {
  Message reg;
  reg.type = MsgType::kRegister;
  reg.sender = "decode-1";
  reg.layout = layout(16, "bf16");
  reg.region = {"loopback", std::string("\x00\x01\xff\x10", 4), 4096};
  const Result<Message> r = decode(encode(reg));
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r.value().sender, "decode-1");
  EXPECT_EQ(r.value().region.blob, reg.region.blob);
  EXPECT_EQ(r.value().region.bytes, 4096u);
  EXPECT_EQ(r.value().layout.buffer_offsets, reg.layout.buffer_offsets);
  EXPECT_TRUE(check_compatible(r.value().layout, reg.layout).is_ok());

  Message meta;
  meta.type = MsgType::kMeta;
  meta.room = (uint64_t{1} << 62) + 12345;  // 63-bit rooms survive JSON
  meta.pages = {7, 8, 9, 3};
  meta.num_tokens = 55;
  meta.staging_offset = (int64_t{1} << 40) + 3;
  meta.staging_tokens = 512;
  const Message m = decode(encode(meta)).value();
  EXPECT_EQ(m.type, MsgType::kMeta);
  EXPECT_EQ(m.room, meta.room);
  EXPECT_EQ(m.pages, meta.pages);
  EXPECT_EQ(m.num_tokens, 55);
  EXPECT_EQ(m.staging_offset, meta.staging_offset);
  EXPECT_EQ(m.staging_tokens, 512);
  meta.staging_offset = -1;  // no staging
  EXPECT_EQ(decode(encode(meta)).value().staging_offset, -1);

  Message done;
  done.type = MsgType::kDone;
  done.room = 5;
  done.token = 42;
  done.logprob = -0.125f;
  const Message d = decode(encode(done)).value();
  EXPECT_EQ(d.token, 42);
  EXPECT_EQ(d.logprob, -0.125f);

  Message staged;
  staged.type = MsgType::kStaged;
  staged.room = 6;
  staged.begin = 1024;
  staged.end = 1536;
  const Message sg = decode(encode(staged)).value();
  EXPECT_EQ(sg.type, MsgType::kStaged);
  EXPECT_EQ(sg.begin, 1024);
  EXPECT_EQ(sg.end, 1536);
  Message credit;
  credit.type = MsgType::kCredit;
  credit.room = 6;
  credit.end = 1536;
  const Message cr = decode(encode(credit)).value();
  EXPECT_EQ(cr.type, MsgType::kCredit);
  EXPECT_EQ(cr.room, 6u);
  EXPECT_EQ(cr.end, 1536);
  EXPECT_FALSE(decode(R"({"type":"staged","room":1,"begin":0})").is_ok());  // no end

  for (MsgType t : {MsgType::kFailed, MsgType::kAbort}) {
    Message f;
    f.type = t;
    f.room = 9;
    f.reason = "why";
    const Message g = decode(encode(f)).value();
    EXPECT_EQ(g.type, t);
    EXPECT_EQ(g.reason, "why");
  }
  EXPECT_FALSE(decode("{").is_ok());
  EXPECT_FALSE(decode(R"({"type":"nope","room":1})").is_ok());
  EXPECT_FALSE(decode(R"({"type":"meta","room":1})").is_ok());  // no pages
}

TEST(ControlChannelTest, DecodeAndPrefillExchangeAndReconnect) {
  auto server = ControlServer::bind("127.0.0.1", 0);
  ASSERT_TRUE(server.is_ok()) << server.status().message();
  const int port = server.value()->port();
  ASSERT_GT(port, 0);
  auto client = ControlClient::connect("127.0.0.1", port, "decode-A");
  ASSERT_TRUE(client.is_ok());
  Message ping;
  ping.type = MsgType::kPing;
  ping.seq = 77;
  ASSERT_TRUE(client.value()->send(ping));
  std::vector<std::pair<std::string, Message>> got;
  for (int i = 0; i < 500 && got.empty(); ++i) {
    got = server.value()->receive();
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].first, "decode-A");
  EXPECT_EQ(got[0].second.seq, 77u);
  Message pong;
  pong.type = MsgType::kPong;
  pong.seq = 78;
  pong.ok = true;
  ASSERT_TRUE(server.value()->send("decode-A", pong));
  std::vector<Message> back;
  for (int i = 0; i < 500 && back.empty(); ++i) {
    back = client.value()->receive();
    if (back.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].type, MsgType::kPong);
  EXPECT_TRUE(back[0].ok);
  // An unknown peer is reported, not waited for.
  EXPECT_FALSE(server.value()->send("nobody", pong));
  // The prefill side restarts on the same port: the client's link comes back by itself.
  server.value().reset();
  auto again = ControlServer::bind("127.0.0.1", port);
  ASSERT_TRUE(again.is_ok()) << again.status().message();
  ping.seq = 79;
  ASSERT_TRUE(client.value()->send(ping));
  got.clear();
  for (int i = 0; i < 1000 && got.empty(); ++i) {
    got = again.value()->receive();
    if (got.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].second.seq, 79u);
}

TEST(ControlChannelTest, PortInUseIsAnError) {
  auto a = ControlServer::bind("127.0.0.1", 0);
  ASSERT_TRUE(a.is_ok());
  auto b = ControlServer::bind("127.0.0.1", a.value()->port());
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("--disaggregation-bootstrap-port"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::pd

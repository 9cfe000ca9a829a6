// The Scheduler against a model-free runner: admission budgets (PrefillAdder), chunked prefill,
// prefix locks, retraction and the new-token ratio, abort in every state, with the memory
// invariants checked after every step.
//
// The fake runner's "model" reads what a real one would: each forward stores its new tokens' ids
// at their KV slots (a fake pool), and the next token after position p of a request is a hash of
// the ids found through its req_to_token row at positions [0, p] (row -> slot -> id). So a wrong
// slot, a stale row after a chunk or a retraction, or a prefix-cache hit on the wrong pages
// changes the tokens, and the expected outputs are computed independently from the prompt alone
// (expected_output: the same hash over the growing sequence, no scheduler, no memory).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kvserve/engine/scheduler.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/mem/invariants.h"
#include "kvserve/model/batch_runner.h"

namespace kvserve {
namespace {

using engine::FinishKind;
using engine::Req;
using engine::Scheduler;
using engine::SchedulerOptions;

constexpr int32_t kVocab = 1000;
constexpr int32_t kContext = 4096;

// The fake model: the next token of a sequence (FNV-1a over its ids, mod the vocabulary).
int32_t next_token(const std::vector<int32_t>& ids) {
  uint64_t h = 1469598103934665603ull;
  for (const int32_t id : ids) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(id));
    h *= 1099511628211ull;
  }
  return static_cast<int32_t>(h % kVocab);
}

// What a request must output, computed from the prompt alone.
std::vector<int32_t> expected_output(std::vector<int32_t> seq, int32_t n) {
  std::vector<int32_t> out;
  for (int32_t i = 0; i < n; ++i) {
    out.push_back(next_token(seq));
    seq.push_back(out.back());
  }
  return out;
}

class FakeRunner final : public model::BatchRunner {
 public:
  // One recorded forward: its mode and, per request, row, prefix and new tokens.
  struct Seen {
    mem::ForwardMode mode;
    std::vector<int32_t> rows, prefix_lens, extend_lens;
    std::vector<int32_t> first_ids;  // each request's first new token id
  };

  FakeRunner(int64_t slots, bool on_device) : slot_ids_(slots, -1), on_device_(on_device) {}

  int32_t vocab_size() const override { return kVocab; }
  int32_t context_len() const override { return kContext; }
  bool samples_on_device() const override { return on_device_; }

  Status forward(mem::ForwardBatch& batch, std::vector<float>& logits) override {
    KV_RETURN_IF_ERROR(maybe_fail());
    const std::vector<int32_t> tokens = run(batch);
    logits.assign(tokens.size() * kVocab, 0.0f);
    for (size_t r = 0; r < tokens.size(); ++r)
      logits[r * kVocab + tokens[r]] = 1.0f;
    return Status::ok();
  }
  Status forward_greedy(mem::ForwardBatch& batch, std::vector<int32_t>& tokens) override {
    KV_RETURN_IF_ERROR(maybe_fail());
    ++greedy_forwards;
    tokens = run(batch);
    return Status::ok();
  }
  Status forward_sample(mem::ForwardBatch& batch, const model::SamplingInputs& sampling,
                        std::vector<int32_t>& tokens, std::vector<float>* logprobs,
                        std::vector<float>* /*raw_logits*/) override {
    KV_RETURN_IF_ERROR(maybe_fail());
    ++sampled_forwards;
    for (const ops::SampleRowParams& p : sampling.rows)
      EXPECT_EQ(p.greedy, 1) << "the fake samples greedy rows only";
    tokens = run(batch);
    if (logprobs != nullptr) logprobs->assign(tokens.size(), 0.0f);
    return Status::ok();
  }

  std::vector<Seen> seen;
  int64_t greedy_forwards = 0;
  int64_t sampled_forwards = 0;
  int64_t encoder_runs = 0;  // encoder inputs consumed (one per encoder-decoder prefill)
  // The forward with this index (0 = the next one) fails as a device buffer that cannot grow
  // would: kOutOfMemory, nothing stored.
  int64_t fail_forward_at = -1;

 private:
  Status maybe_fail() {
    if (fail_forward_at < 0) return Status::ok();
    if (fail_forward_at-- == 0) return out_of_memory("injected: a device buffer cannot grow");
    return Status::ok();
  }

  std::vector<int32_t> run(const mem::ForwardBatch& batch) {
    EXPECT_NE(batch.req_to_token, nullptr);
    Seen s{batch.mode, batch.req_pool_indices, batch.prefix_lens, batch.extend_lens, {}};
    // The encoder: each encoder-decoder request whose encoder this forward runs stores its
    // input's first value (its "audio") at every slot of its encoder region.
    size_t enc_slot = 0;
    size_t enc_input = 0;
    for (int32_t b = 0; b < batch.batch_size() && !batch.encoder_out_cache_loc.empty(); ++b) {
      if (batch.encoder_len(b) == 0) continue;
      EXPECT_FALSE(batch.is_decode()) << "the encoder runs in the prefill only";
      EXPECT_LT(enc_input, batch.encoder_inputs.size());
      if (enc_input >= batch.encoder_inputs.size()) break;
      const auto tag = static_cast<int32_t>(batch.encoder_inputs[enc_input++][0]);
      for (int32_t i = 0; i < batch.encoder_len(b); ++i)
        slot_ids_[batch.encoder_out_cache_loc[enc_slot++]] = tag;
    }
    EXPECT_EQ(enc_slot, batch.encoder_out_cache_loc.size());
    EXPECT_EQ(enc_input, batch.encoder_inputs.size());
    encoder_runs += static_cast<int64_t>(enc_input);
    // Store: each new token's id at its slot.
    for (int32_t t = 0; t < batch.num_tokens(); ++t) {
      const int32_t slot = batch.out_cache_loc[t];
      EXPECT_TRUE(slot > 0 && slot < static_cast<int32_t>(slot_ids_.size())) << slot;
      slot_ids_[slot] = batch.input_ids[t];
    }
    for (int32_t b = 0; b < batch.batch_size(); ++b)
      s.first_ids.push_back(batch.input_ids[batch.extend_start_loc[b]]);
    seen.push_back(std::move(s));
    // Read: each logits row's sequence through the row (an encoder-decoder row: the encoder's
    // first slot, then the decoder region).
    std::vector<int32_t> tokens;
    for (const int32_t t : batch.logits_indices) {
      int32_t b = 0;
      while (b + 1 < batch.batch_size() && batch.extend_start_loc[b + 1] <= t)
        ++b;
      const int32_t pos = batch.positions[t];
      const int32_t row_index = batch.req_pool_indices[b];
      std::vector<int32_t> ids;
      if (batch.encoder_len(b) > 0) {
        ids.push_back(slot_ids_[batch.req_to_token->row(row_index, 0, 1)[0]]);
      }
      const auto row = batch.req_to_token->row(row_index, batch.kv_start(b), pos + 1);
      for (const int32_t slot : row)
        ids.push_back(slot_ids_[slot]);
      tokens.push_back(next_token(ids));
    }
    return tokens;
  }

  std::vector<int32_t> slot_ids_;  // the fake KV pool: the token id stored at each slot
  bool on_device_;
};

struct Shape {
  int64_t tokens = 4096;
  int32_t page_size = 1;
  int32_t max_running = 16;
  mem::PrefixCacheKind cache = mem::PrefixCacheKind::kRadix;
};

// A scheduler on a fake runner; every step is followed by the memory invariants and collects the
// streams' events per request.
class Harness {
 public:
  explicit Harness(const Shape& shape, SchedulerOptions options = {}, bool on_device = false)
      : runner_(shape.tokens + 2 * shape.page_size, on_device),
        scheduler_(runner_,
                   mem::HostKvMemory({.max_running_requests = shape.max_running,
                                      .row_len = kContext + 4,
                                      .max_total_tokens = shape.tokens,
                                      .page_size = shape.page_size},
                                     shape.cache),
                   nullptr, options, nullptr) {}

  // Adds a greedy request whose first prompt id is unique to it (identifies it in the runner's
  // batches).
  void add(const std::string& rid, std::vector<int32_t> prompt, int32_t max_new_tokens) {
    auto r = std::make_unique<Req>();
    r->id = next_id_++;
    r->rid = rid;
    r->origin_input_ids = std::move(prompt);
    r->sampling.temperature = 0.0f;
    r->sampling.max_new_tokens = max_new_tokens;
    r->sampling.ignore_eos = true;
    r->arrival = engine::Clock::now();
    r->stream = std::make_shared<engine::RequestStream>();
    rid_of_[r->stream.get()] = rid;
    scheduler_.add_request(std::move(r));
  }

  // Adds a greedy encoder-decoder request whose encoder input's first value is `audio` (the fake
  // stores it over the row's encoder region) and whose encoder output takes `encoder_len`
  // positions.
  void add_encoded(const std::string& rid, std::vector<int32_t> prompt, int32_t max_new_tokens,
                   float audio, int32_t encoder_len) {
    auto r = std::make_unique<Req>();
    r->id = next_id_++;
    r->rid = rid;
    r->origin_input_ids = std::move(prompt);
    r->sampling.temperature = 0.0f;
    r->sampling.max_new_tokens = max_new_tokens;
    r->sampling.ignore_eos = true;
    r->encoder_input = std::make_shared<const std::vector<float>>(std::vector<float>{audio, 0.5f});
    r->encoder_len = encoder_len;
    r->arrival = engine::Clock::now();
    r->stream = std::make_shared<engine::RequestStream>();
    rid_of_[r->stream.get()] = rid;
    scheduler_.add_request(std::move(r));
  }

  // One step, then the invariants over every live request.
  bool step() {
    const bool worked = scheduler_.step();
    collect();
    const Status s = scheduler_.check_memory_invariants();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return worked;
  }
  void run_to_idle(int32_t max_steps = 100000) {
    for (int32_t i = 0; i < max_steps && !scheduler_.idle(); ++i)
      step();
    ASSERT_TRUE(scheduler_.idle()) << "not idle after " << max_steps << " steps";
    const Status s = scheduler_.check_idle_invariants();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    const mem::HostKvMemory& m = scheduler_.memory();
    EXPECT_EQ(m.allocator().available_size() + m.cache().evictable_size(), m.allocator().size())
        << "every slot free or evictable when idle";
  }
  bool abort(const std::string& rid) {
    const bool found = scheduler_.abort(rid, "test");
    collect();
    const Status s = scheduler_.check_memory_invariants();
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    return found;
  }

  Scheduler& scheduler() { return scheduler_; }
  FakeRunner& runner() { return runner_; }
  const std::vector<int32_t>& output(const std::string& rid) { return outputs_[rid]; }
  FinishKind finish(const std::string& rid) { return finish_[rid]; }
  int32_t finished_events(const std::string& rid) { return finished_events_[rid]; }
  int32_t cached_tokens(const std::string& rid) { return cached_[rid]; }

 private:
  void collect() {
    for (auto& [stream, e] : scheduler_.take_outputs()) {
      const std::string& rid = rid_of_.at(stream.get());
      outputs_[rid].insert(outputs_[rid].end(), e.token_ids.begin(), e.token_ids.end());
      cached_[rid] = e.cached_tokens;
      if (e.finished) {
        finish_[rid] = e.finish.kind;
        ++finished_events_[rid];
      }
    }
  }

  FakeRunner runner_;
  Scheduler scheduler_;
  uint64_t next_id_ = 1;
  std::map<const engine::RequestStream*, std::string> rid_of_;
  std::map<std::string, std::vector<int32_t>> outputs_;
  std::map<std::string, FinishKind> finish_;
  std::map<std::string, int32_t> finished_events_;
  std::map<std::string, int32_t> cached_;
};

// A prompt of `len` ids starting with `first` (distinct requests get distinct `first`s).
std::vector<int32_t> prompt(int32_t first, int32_t len) {
  std::vector<int32_t> p(static_cast<size_t>(len));
  for (int32_t i = 0; i < len; ++i)
    p[i] = (first + 37 * i) % kVocab;
  return p;
}

// Index of the request whose new tokens start with `first_id` in a recorded forward, or -1.
int32_t find(const FakeRunner::Seen& s, int32_t first_id) {
  for (size_t b = 0; b < s.first_ids.size(); ++b) {
    if (s.first_ids[b] == first_id) return static_cast<int32_t>(b);
  }
  return -1;
}

// --- outputs ---------------------------------------------------------------------------------

struct OutputCase {
  int32_t page_size;
  bool on_device;
  mem::PrefixCacheKind cache;
};

class SchedulerOutputs : public ::testing::TestWithParam<OutputCase> {};

TEST_P(SchedulerOutputs, EqualTheModelOfTheirSequenceWithSharedPrefixes) {
  const OutputCase c = GetParam();
  Harness h({.page_size = c.page_size, .cache = c.cache}, {}, c.on_device);
  // Requests sharing a 40-token system prefix, arriving over several steps.
  const std::vector<int32_t> shared = prompt(900, 40);
  std::map<std::string, std::vector<int32_t>> prompts;
  for (int32_t i = 0; i < 6; ++i) {
    std::vector<int32_t> p = shared;
    const std::vector<int32_t> tail = prompt(i + 1, 5 + 7 * i);
    p.insert(p.end(), tail.begin(), tail.end());
    const std::string rid = "r" + std::to_string(i);
    prompts[rid] = p;
    h.add(rid, p, 12 + i);
    h.step();
  }
  h.run_to_idle();
  for (const auto& [rid, p] : prompts) {
    const int32_t n = 12 + (rid[1] - '0');
    EXPECT_EQ(h.output(rid), expected_output(p, n)) << rid;
    EXPECT_EQ(h.finish(rid), FinishKind::kLength) << rid;
    EXPECT_EQ(h.finished_events(rid), 1) << rid;
  }
  if (c.cache == mem::PrefixCacheKind::kRadix) {
    // The later requests' shared pages came from the cache (the earlier prompts, cached as they
    // were prefilled): whole pages of the 40 shared tokens.
    EXPECT_EQ(h.cached_tokens("r5"), mem::floor_align(40, c.page_size));
  } else {
    EXPECT_EQ(h.cached_tokens("r5"), 0);
  }
  if (c.on_device) {
    EXPECT_GT(h.runner().greedy_forwards, 0) << "greedy decode steps take the argmax path";
    EXPECT_GT(h.runner().sampled_forwards, 0) << "prefills sample where the logits are";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SchedulerOutputs,
                         ::testing::Values(OutputCase{1, false, mem::PrefixCacheKind::kRadix},
                                           OutputCase{16, false, mem::PrefixCacheKind::kRadix},
                                           OutputCase{16, true, mem::PrefixCacheKind::kRadix},
                                           OutputCase{4, false, mem::PrefixCacheKind::kChunk}),
                         [](const ::testing::TestParamInfo<OutputCase>& i) {
                           return "page" + std::to_string(i.param.page_size) +
                                  (i.param.on_device ? "_device" : "") +
                                  (i.param.cache == mem::PrefixCacheKind::kChunk ? "_chunk_cache"
                                                                                 : "");
                         });

// --- admission budgets -------------------------------------------------------------------------

// A waiting request is admitted next to a running one iff its input + output budget is below the
// free tokens minus the running request's remaining output reserved at new_token_ratio.
TEST(SchedulerAdmission, TotalBudgetReservesRunningOutputsAtTheNewTokenRatio) {
  for (const int32_t delta : {-1, 0}) {
    Harness h({.tokens = 256});
    h.add("a", prompt(1, 10), 200);
    h.step();  // a's prefill: a holds 10 slots and has 1 output token
    const double ratio = h.scheduler().stats().new_token_ratio;
    const mem::HostKvMemory& m = h.scheduler().memory();
    const int64_t free_tokens = m.allocator().available_size() + m.cache().evictable_size();
    const auto reserved = static_cast<int64_t>(ratio * (200 - 1));
    // PrefillAdder admits when extend + max_new_tokens < free - reserved.
    const int64_t fits = free_tokens - reserved - 1 - 10;
    h.add("b", prompt(2, 10), static_cast<int32_t>(fits + 1 + delta));
    h.step();
    const FakeRunner::Seen& s = h.runner().seen.back();
    if (delta < 0) {
      EXPECT_EQ(s.mode, mem::ForwardMode::kExtend) << "b fits: admitted at once";
      EXPECT_EQ(find(s, 2), 0);
    } else {
      EXPECT_EQ(s.mode, mem::ForwardMode::kDecode) << "b is one token over: it waits";
      EXPECT_EQ(h.scheduler().stats().waiting, 1);
    }
    h.run_to_idle();
    EXPECT_EQ(h.output("b"),
              expected_output(prompt(2, 10), static_cast<int32_t>(fits + 1 + delta)));
  }
}

// max_prefill_tokens caps a prefill batch's input (the first request always goes in).
TEST(SchedulerAdmission, MaxPrefillTokensCapsEachBatch) {
  SchedulerOptions o;
  o.max_prefill_tokens = 100;
  o.chunked_prefill_size = 0;  // no chunking: a long prompt is one extend
  Harness h({}, o);
  h.add("long", prompt(1, 150), 2);  // over the cap alone: still admitted
  h.add("a", prompt(2, 30), 2);
  h.add("b", prompt(3, 30), 2);
  h.add("c", prompt(4, 30), 2);
  h.add("d", prompt(5, 30), 2);
  h.step();
  ASSERT_EQ(h.runner().seen.size(), 1u);
  EXPECT_EQ(h.runner().seen[0].first_ids, (std::vector<int32_t>{1}));
  EXPECT_EQ(h.runner().seen[0].extend_lens, (std::vector<int32_t>{150}));
  h.step();  // 30 + 30 + 30 = 90 < 100; a fourth would reach 120
  EXPECT_EQ(h.runner().seen[1].mode, mem::ForwardMode::kExtend);
  EXPECT_EQ(h.runner().seen[1].first_ids, (std::vector<int32_t>{2, 3, 4}));
  h.step();
  EXPECT_EQ(h.runner().seen[2].first_ids, (std::vector<int32_t>{5}));
  h.run_to_idle();
  EXPECT_EQ(h.output("d"), expected_output(prompt(5, 30), 2));
}

// max_running_requests bounds the running batch; the rest wait for a row.
TEST(SchedulerAdmission, MaxRunningRequestsBoundsTheBatch) {
  Harness h({.max_running = 2});
  for (int32_t i = 0; i < 5; ++i)
    h.add("r" + std::to_string(i), prompt(i + 1, 8), 3);
  h.step();
  EXPECT_EQ(h.runner().seen[0].first_ids.size(), 2u);
  EXPECT_EQ(h.scheduler().stats().waiting, 3);
  h.run_to_idle();
  for (int32_t i = 0; i < 5; ++i)
    EXPECT_EQ(h.output("r" + std::to_string(i)), expected_output(prompt(i + 1, 8), 3));
}

// --- chunked prefill ---------------------------------------------------------------------------

// A prompt longer than chunked_prefill_size is cut into whole-page chunks of at most the chunk
// size, each continuing the same row from the previous chunks' KV; its first token comes after the
// last chunk, and a request waiting behind it is admitted into the last chunk's batch.
TEST(SchedulerChunkedPrefill, ChunksAreWholePagesOfTheChunkSizeOnOneRow) {
  for (const int32_t ps : {1, 16}) {
    for (const mem::PrefixCacheKind cache :
         {mem::PrefixCacheKind::kRadix, mem::PrefixCacheKind::kChunk}) {
      SchedulerOptions o;
      o.chunked_prefill_size = 50;
      Harness h({.page_size = ps, .cache = cache}, o);
      const std::vector<int32_t> p = prompt(1, 170);
      h.add("long", p, 4);
      h.add("short", prompt(2, 10), 4);
      // Expected chunks: whole pages up to 50 tokens while the rest does not fit one chunk.
      std::vector<int32_t> chunks;
      int32_t done = 0;
      while (170 - done > 50) {
        chunks.push_back(mem::floor_align(done + 50, ps) - done);
        done += chunks.back();
      }
      chunks.push_back(170 - done);
      for (size_t i = 0; i < chunks.size(); ++i) {
        EXPECT_TRUE(h.output("long").empty()) << "no token before the last chunk ran";
        h.step();
      }
      EXPECT_EQ(h.output("long").size(), 1u);
      const auto& seen = h.runner().seen;
      ASSERT_EQ(seen.size(), chunks.size());
      int32_t prefix = 0;
      for (size_t i = 0; i < chunks.size(); ++i) {
        SCOPED_TRACE("page " + std::to_string(ps) + ", chunk " + std::to_string(i));
        EXPECT_EQ(seen[i].mode, mem::ForwardMode::kExtend);
        ASSERT_EQ(find(seen[i], p[prefix]), 0);
        EXPECT_EQ(seen[i].rows[0], seen[0].rows[0]) << "a chunked request keeps its row";
        EXPECT_EQ(seen[i].prefix_lens[0], prefix);
        EXPECT_EQ(seen[i].extend_lens[0], chunks[i]);
        // The waiting request joins only the last chunk's batch (one chunked request at a time;
        // the chunk budget is spent until then).
        EXPECT_EQ(find(seen[i], 2) >= 0, i + 1 == chunks.size() && chunks.back() + 10 <= 50);
        prefix += chunks[i];
      }
      h.run_to_idle();
      EXPECT_EQ(h.output("long"), expected_output(p, 4));
      EXPECT_EQ(h.output("short"), expected_output(prompt(2, 10), 4));
    }
  }
}

// --- prefix locks ------------------------------------------------------------------------------

// A request matching a cached prefix locks it while it runs (the pages are protected, not
// evictable) and unlocks it when it finishes.
TEST(SchedulerPrefixLocks, HeldWhileRunningReleasedOnFinish) {
  Harness h({.page_size = 4});
  const std::vector<int32_t> system = prompt(1, 32);
  h.add("first", system, 3);
  h.run_to_idle();
  const mem::PrefixCache& cache = h.scheduler().memory().cache();
  EXPECT_EQ(cache.sizes().protected_, 0);
  const int64_t cached = cache.sizes().evictable;
  EXPECT_GE(cached, 32);

  std::vector<int32_t> p = system;
  const std::vector<int32_t> tail = prompt(7, 9);
  p.insert(p.end(), tail.begin(), tail.end());
  h.add("second", p, 20);
  h.step();  // its prefill: the 32 shared tokens come from the cache, locked
  EXPECT_EQ(h.cached_tokens("second"), 32);
  EXPECT_EQ(h.runner().seen.back().prefix_lens, (std::vector<int32_t>{32}));
  for (int32_t i = 0; i < 5; ++i) {
    // Its whole cached path is protected while it runs (its own prompt pages too, once shared).
    EXPECT_GE(cache.sizes().protected_, 32);
    int32_t max_lock = 0;
    cache.for_each_cached_run([&](const mem::CachedRun& run) {
      if (run.start == 0) max_lock = std::max(max_lock, run.lock_ref);
    });
    EXPECT_EQ(max_lock, 1) << "one running request holds the path from the root";
    h.step();
  }
  h.run_to_idle();
  EXPECT_EQ(cache.sizes().protected_, 0) << "finishing releases the lock";
  EXPECT_EQ(h.output("second"), expected_output(p, 20));
}

// --- retraction and the new-token ratio --------------------------------------------------------

// A pool too small for every admitted request's output: decode retracts the running request with
// the fewest output tokens (the longest prompt among equals), raises new_token_ratio to the share
// of the output budget already decoded (+ 20 steps each), then decays it step by step; the
// retracted request recomputes its KV later and finishes with the output of an unretracted run.
TEST(SchedulerRetraction, FewestOutputsFirstThenLongestPromptSameOutputsRatioRisesAndDecays) {
  SchedulerOptions o;
  o.schedule_conservativeness = 0.05;  // reserve almost nothing: admission overcommits
  const std::map<std::string, std::pair<int32_t, int32_t>> reqs = {
      // rid -> (first id, prompt length); "a" has the longest prompt but the most outputs.
      {"a", {1, 40}},
      {"b", {2, 30}},
      {"c", {3, 10}}};
  const int32_t max_new = 50;
  auto run = [&](int64_t tokens, bool expect_retraction) {
    Harness h({.tokens = tokens}, o);
    h.add("a", prompt(1, 40), max_new);
    for (int32_t i = 0; i < 4; ++i)
      h.step();  // a: prefill + 3 decode steps
    h.add("b", prompt(2, 30), max_new);
    h.add("c", prompt(3, 10), max_new);
    h.step();  // b and c prefill together
    const FakeRunner::Seen& prefill = h.runner().seen.back();
    EXPECT_EQ(prefill.first_ids.size(), 2u) << "b and c are admitted together";
    const int32_t row_b = prefill.rows[static_cast<size_t>(find(prefill, 2))];
    std::vector<double> ratios;
    bool retracted = false;
    int32_t steps_since = -1;
    while (!h.scheduler().idle()) {
      const int64_t before = h.scheduler().stats().retractions;
      const std::map<std::string, size_t> outs = {
          {"a", h.output("a").size()}, {"b", h.output("b").size()}, {"c", h.output("c").size()}};
      h.step();
      const engine::SchedulerStats st = h.scheduler().stats();
      const FakeRunner::Seen& s = h.runner().seen.back();
      if (!retracted && st.retractions > before) {
        retracted = true;
        EXPECT_EQ(st.retractions, before + 1) << "one victim frees enough";
        EXPECT_EQ(s.mode, mem::ForwardMode::kDecode);
        EXPECT_EQ(std::count(s.rows.begin(), s.rows.end(), row_b), 0) << "b is the victim";
        EXPECT_EQ(s.rows.size(), 2u);
        // new_token_ratio = (decoded by the survivors + 20 each) / (their max_new_tokens + 1).
        const double want =
            std::min(1.0, static_cast<double>(outs.at("a") + outs.at("c") + 2 * 20) /
                              static_cast<double>(2 * max_new + 1));
        EXPECT_NEAR(st.new_token_ratio, want, 1e-9);
        steps_since = 0;
        ratios.push_back(st.new_token_ratio);
      } else if (steps_since >= 0 && s.mode == mem::ForwardMode::kDecode && steps_since < 10) {
        ratios.push_back(st.new_token_ratio);
        ++steps_since;
      }
    }
    EXPECT_EQ(retracted, expect_retraction);
    // Decay: each decode step with room lowers the ratio by (init - min) / 600, init = 0.7 x
    // conservativeness, min = 0.14 x init.
    const double init = 0.7 * 0.05;
    const double decay = (init - init * 0.14) / 600;
    for (size_t i = 1; i < ratios.size(); ++i)
      EXPECT_NEAR(ratios[i], std::max(ratios[i - 1] - decay, init * 0.14), 1e-12) << i;
    h.run_to_idle();
    for (const auto& [rid, r] : reqs)
      EXPECT_EQ(h.output(rid), expected_output(prompt(r.first, r.second), max_new)) << rid;
    return std::map<std::string, std::vector<int32_t>>{
        {"a", h.output("a")}, {"b", h.output("b")}, {"c", h.output("c")}};
  };
  const auto tight = run(200, true);  // 40 + 30 + 10 + 3 x 50 > 200
  const auto roomy = run(4096, false);
  EXPECT_EQ(tight, roomy) << "a retracted run outputs what an unretracted one does";
}

// The ratio starts at 0.7 x conservativeness and decays to its floor, one step at a time.
TEST(SchedulerRetraction, NewTokenRatioDecaysToItsFloor) {
  SchedulerOptions o;
  o.schedule_conservativeness = 1.0;
  Harness h({}, o);
  EXPECT_NEAR(h.scheduler().stats().new_token_ratio, 0.7, 1e-12);
  h.add("a", prompt(1, 5), 700);
  h.step();
  EXPECT_NEAR(h.scheduler().stats().new_token_ratio, 0.7, 1e-12) << "prefill leaves it";
  const double decay = (0.7 - 0.7 * 0.14) / 600;
  for (int32_t i = 1; i <= 10; ++i) {
    h.step();
    EXPECT_NEAR(h.scheduler().stats().new_token_ratio, 0.7 - i * decay, 1e-12);
  }
  h.run_to_idle();
  EXPECT_NEAR(h.scheduler().stats().new_token_ratio, 0.7 * 0.14, 1e-12);
}

// --- abort -------------------------------------------------------------------------------------

// Abort works wherever a request is: waiting, mid chunked prefill, running, or already finished
// (then it is unknown). Each aborted request gets one final event and its memory back.
TEST(SchedulerAbort, InEveryState) {
  SchedulerOptions o;
  o.chunked_prefill_size = 32;
  Harness h({.page_size = 4, .max_running = 2}, o);
  h.add("done", prompt(1, 8), 1);
  h.step();  // "done" prefills and finishes at once
  EXPECT_EQ(h.finish("done"), FinishKind::kLength);
  EXPECT_FALSE(h.abort("done")) << "a finished request is gone";
  EXPECT_EQ(h.finished_events("done"), 1);

  h.add("running", prompt(2, 8), 50);
  h.step();
  h.add("chunked", prompt(3, 100), 5);
  h.step();  // the first 32-token chunk of "chunked"
  ASSERT_EQ(h.runner().seen.back().prefix_lens.back(), 0);
  EXPECT_EQ(h.runner().seen.back().extend_lens.back(), 32);
  h.add("waiting", prompt(4, 8), 5);  // no row: max_running 2
  h.step();                           // the second chunk

  EXPECT_TRUE(h.abort("waiting"));
  EXPECT_TRUE(h.abort("chunked"));
  EXPECT_TRUE(h.abort("running"));
  EXPECT_FALSE(h.abort("running")) << "aborted once";
  for (const std::string rid : {"waiting", "chunked", "running"}) {
    EXPECT_EQ(h.finish(rid), FinishKind::kAbort) << rid;
    EXPECT_EQ(h.finished_events(rid), 1) << rid;
  }
  EXPECT_TRUE(h.scheduler().idle());
  EXPECT_TRUE(h.scheduler().check_idle_invariants().is_ok());
  // The memory is whole again, and the scheduler goes on serving.
  h.add("after", prompt(5, 40), 6);
  h.run_to_idle();
  EXPECT_EQ(h.output("after"), expected_output(prompt(5, 40), 6));
}

// A waiting request that matched a cached prefix but got no room holds no lock: aborting it
// leaves the cache's locks alone (it used to unlock the matched node it never locked).
TEST(SchedulerAbort, WaitingAfterARejectedPrefixMatch) {
  Harness h({.tokens = 1024, .page_size = 4});
  const std::vector<int32_t> shared = prompt(1, 8);
  h.add("done", shared, 1);
  h.run_to_idle();
  std::vector<int32_t> p = shared;
  p.insert(p.end(), {11, 12, 13, 14});
  h.add("waiting", p, 2000);  // 4 new + 2000 output tokens: more than the pool
  EXPECT_FALSE(h.step()) << "nothing can run";
  EXPECT_EQ(h.scheduler().stats().waiting, 1);
  EXPECT_TRUE(h.abort("waiting"));
  EXPECT_EQ(h.finish("waiting"), FinishKind::kAbort);
  EXPECT_TRUE(h.scheduler().check_idle_invariants().is_ok());
  // The cached prefix is intact and serves the next request.
  h.add("next", p, 3);
  h.run_to_idle();
  EXPECT_EQ(h.cached_tokens("next"), 8);
  EXPECT_EQ(h.output("next"), expected_output(p, 3));
}

// --- failed forwards ---------------------------------------------------------------------------

// A forward that fails (a device buffer that cannot grow: kOutOfMemory from the runner) fails
// exactly the requests of its batch with FinishKind::kError and frees their memory; the others,
// and requests that arrive afterwards, run to the outputs they would have had.
TEST(SchedulerErrors, FailedForwardFailsOnlyItsBatch) {
  for (const bool decode : {false, true}) {
    SCOPED_TRACE(decode ? "the failed forward is a decode step"
                        : "the failed forward is a prefill");
    Harness h({});
    h.add("a", prompt(1, 20), 30);
    h.step();  // a's prefill
    h.step();  // a's first decode step
    if (decode) {
      h.runner().fail_forward_at = 0;  // a's next decode step fails
      h.step();
      EXPECT_EQ(h.finish("a"), FinishKind::kError);
      EXPECT_EQ(h.finished_events("a"), 1);
      h.add("b", prompt(2, 25), 30);
    } else {
      h.add("b", prompt(2, 25), 30);
      h.runner().fail_forward_at = 0;  // b's prefill fails; a decodes on
      h.step();
      EXPECT_EQ(h.finish("b"), FinishKind::kError);
      EXPECT_EQ(h.finished_events("b"), 1);
      h.add("c", prompt(3, 25), 30);
    }
    h.run_to_idle();
    EXPECT_EQ(h.scheduler().stats().failed_batches, 1);
    for (const auto& [rid, first, len] : std::vector<std::tuple<std::string, int32_t, int32_t>>{
             {"a", 1, 20}, {"b", 2, 25}, {"c", 3, 25}}) {
      if (h.finish(rid) == FinishKind::kError || h.finished_events(rid) == 0) continue;
      EXPECT_EQ(h.output(rid), expected_output(prompt(first, len), 30)) << rid;
    }
    EXPECT_EQ(h.finish(decode ? "b" : "a"), FinishKind::kLength);
    EXPECT_EQ(h.finish(decode ? "b" : "c"), FinishKind::kLength);
  }
}

// --- encoder-decoder requests ------------------------------------------------------------------

struct EncoderCase {
  int32_t page_size;
  mem::EncoderKvLayout layout;
};

class SchedulerEncoderDecoder : public ::testing::TestWithParam<EncoderCase> {
 protected:
  static SchedulerOptions options(int32_t chunk) {
    SchedulerOptions o;
    o.chunked_prefill_size = chunk;
    o.encoder = mem::EncoderSplit{GetParam().page_size, GetParam().layout};
    return o;
  }
  static Shape shape(int64_t tokens) {
    return {
        .tokens = tokens, .page_size = GetParam().page_size, .cache = mem::PrefixCacheKind::kChunk};
  }
};

// Admission: a prefill takes the whole row ([encoder region | prompt]) in one forward, never
// chunked, with the encoder run on the request's input; decode steps batch requests that arrived
// at different times; outputs depend on the encoder's output and the prompt through the row.
TEST_P(SchedulerEncoderDecoder, WholeRowPrefillEncoderOnceContinuousDecode) {
  Harness h(shape(4096), options(/*chunk=*/8));
  h.add_encoded("a", prompt(1, 20), 12, 501.0f, 30);
  h.step();
  const FakeRunner::Seen& first = h.runner().seen.back();
  EXPECT_EQ(first.mode, mem::ForwardMode::kExtend);
  ASSERT_EQ(first.extend_lens.size(), 1u);
  EXPECT_EQ(first.extend_lens[0], 20) << "the whole prompt although chunked_prefill_size is 8";
  EXPECT_EQ(h.runner().encoder_runs, 1);
  h.step();
  h.step();
  h.add_encoded("b", prompt(2, 9), 12, 502.0f, 17);
  h.add_encoded("c", prompt(3, 14), 12, 503.0f, 30);
  h.step();  // b and c prefill together
  EXPECT_EQ(h.runner().seen.back().extend_lens.size(), 2u);
  EXPECT_EQ(h.runner().encoder_runs, 3);
  h.step();
  EXPECT_EQ(h.runner().seen.back().mode, mem::ForwardMode::kDecode);
  EXPECT_EQ(h.runner().seen.back().rows.size(), 3u) << "one decode step for all three";
  h.run_to_idle();
  EXPECT_EQ(h.runner().encoder_runs, 3) << "decode steps never rerun the encoder";
  EXPECT_EQ(h.output("a"), expected_output(
                               [] {
                                 std::vector<int32_t> s{501};
                                 for (int32_t id : prompt(1, 20))
                                   s.push_back(id);
                                 return s;
                               }(),
                               12));
  for (const auto& [rid, first_id, len, audio] :
       std::vector<std::tuple<std::string, int32_t, int32_t, int32_t>>{{"b", 2, 9, 502},
                                                                       {"c", 3, 14, 503}}) {
    std::vector<int32_t> seq{audio};
    for (int32_t id : prompt(first_id, len))
      seq.push_back(id);
    EXPECT_EQ(h.output(rid), expected_output(seq, 12)) << rid;
  }
}

// Retraction of an encoder-decoder request frees its whole row; on readmission the encoder runs
// again (its region was reused meanwhile) and the outputs are those of an unretracted run.
TEST_P(SchedulerEncoderDecoder, RetractedRequestRecomputesItsEncoder) {
  SchedulerOptions o = options(0);
  o.schedule_conservativeness = 0.05;  // admission overcommits: decode must retract
  auto run = [&](int64_t tokens) {
    Harness h(shape(tokens), o);
    for (int32_t i = 0; i < 4; ++i)
      h.add_encoded("r" + std::to_string(i), prompt(10 + i, 12 + 3 * i), 40, 600.0f + i, 24);
    h.run_to_idle();
    std::map<std::string, std::vector<int32_t>> out;
    for (int32_t i = 0; i < 4; ++i) {
      const std::string rid = "r" + std::to_string(i);
      std::vector<int32_t> seq{600 + i};
      for (int32_t id : prompt(10 + i, 12 + 3 * i))
        seq.push_back(id);
      EXPECT_EQ(h.output(rid), expected_output(seq, 40)) << rid;
      out[rid] = h.output(rid);
    }
    return std::make_tuple(out, h.scheduler().stats().retractions, h.runner().encoder_runs);
  };
  const auto [tight, tight_retractions, tight_encoder_runs] = run(280);
  const auto [roomy, roomy_retractions, roomy_encoder_runs] = run(8192);
  EXPECT_GT(tight_retractions, 0) << "the tight pool must retract";
  EXPECT_EQ(tight_encoder_runs, 4 + tight_retractions) << "one encoder run per (re)admission";
  EXPECT_EQ(roomy_retractions, 0);
  EXPECT_EQ(roomy_encoder_runs, 4);
  EXPECT_EQ(tight, roomy);
}

INSTANTIATE_TEST_SUITE_P(Layouts, SchedulerEncoderDecoder,
                         ::testing::Values(EncoderCase{1, mem::EncoderKvLayout::kAligned},
                                           EncoderCase{16, mem::EncoderKvLayout::kAligned},
                                           EncoderCase{16, mem::EncoderKvLayout::kRagged}),
                         [](const ::testing::TestParamInfo<EncoderCase>& param_info) {
                           return fmt::format("page{}_{}", param_info.param.page_size,
                                              mem::encoder_kv_layout_name(param_info.param.layout));
                         });

}  // namespace
}  // namespace kvserve

#include "support/mirror_scenario.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "kvserve/attention/cuda_backends.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/allocator.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/mem/radix_cache.h"
#include "kvserve/model/decode_graph_runner.h"

namespace kvserve::test_support {
namespace {

constexpr int32_t kRows = 8;
constexpr int32_t kRowLen = 1024;
constexpr int32_t kSlots = 8192;
constexpr int32_t kGraphBs = 8;

struct Request {
  std::vector<int32_t> tokens;
  mem::KvReqState kv;
};

class Scenario {
 public:
  Scenario(platform::Platform& platform, const std::string& backend, int32_t page_size,
           uint32_t seed)
      : platform_(platform),
        page_size_(page_size),
        seed_(seed),
        rows_(kRows, kRowLen),
        alloc_(mem::make_allocator(kSlots, page_size)),
        cache_(rows_, *alloc_),
        memory_{rows_, *alloc_, cache_},
        pool_(std::move(mem::MHATokenToKVPool::create(platform, {.num_layers = 1,
                                                                 .num_kv_heads = 1,
                                                                 .head_dim = 64,
                                                                 .size = kSlots,
                                                                 .page_size = page_size,
                                                                 .dtype = DType::kBF16})
                            .value())),
        mirror_(std::move(mem::DeviceReqToToken::create(platform, rows_).value())) {
    if (backend == "cuda-paged") {
      backend_ = attention::make_cuda_paged_backend(platform);
      const attention::DecodeGraphShape shape{.max_bs = kGraphBs,
                                              .max_kv_len = kRowLen,
                                              .page_size = page_size,
                                              .num_q_heads = 2,
                                              .num_kv_heads = 1,
                                              .head_dim = 64};
      auto cap = backend_->init_decode_graph_state(shape);
      KV_CHECK(cap.is_ok(), "{}", cap.status().to_string());
      staging_.resize(static_cast<size_t>(*cap));
      staged_ = std::move(platform.allocate_buffer(staging_.size() * sizeof(int32_t)).value());
    } else {
      backend_ = attention::make_cuda_ragged_backend(platform);
    }
  }

  std::vector<int32_t> random_tokens(int32_t n) {
    std::uniform_int_distribution<int32_t> token(1, 500);
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t)
      x = token(rng_);
    return t;
  }

  // One extend over `reqs`: each computes up to `chunk` more tokens from its prefix (a radix
  // match on admission, its earlier chunks after that), then shares them with the cache.
  void extend(const std::vector<Request*>& reqs, int32_t chunk, const char* step) {
    std::vector<mem::KvReqState*> states;
    std::vector<int32_t> seq_lens;
    for (Request* r : reqs) {
      if (r->kv.row == mem::kNoRow) {
        const auto key = std::span<const int32_t>(r->tokens).first(r->tokens.size() - 1);
        mem::MatchResult m = cache_.match_prefix(key);
        cache_.inc_lock_ref(m.last_node);
        r->kv.cache_protected_len = static_cast<int32_t>(m.indices.size());
        r->kv.last_node = m.last_node;
        r->kv.prefix_indices = std::move(m.indices);
      }
      states.push_back(&r->kv);
      seq_lens.push_back(std::min(static_cast<int32_t>(r->kv.prefix_indices.size()) + chunk,
                                  static_cast<int32_t>(r->tokens.size())));
    }
    std::vector<int32_t> loc;
    const Status s = mem::alloc_for_extend(memory_, states, seq_lens, loc);
    KV_CHECK(s.is_ok(), "{}", s.to_string());
    std::vector<mem::ForwardRequest> fwd;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const auto prefix = static_cast<int32_t>(reqs[i]->kv.prefix_indices.size());
      fwd.push_back({reqs[i]->kv.row, prefix,
                     std::vector<int32_t>(reqs[i]->tokens.begin() + prefix,
                                          reqs[i]->tokens.begin() + seq_lens[i])});
    }
    mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, loc, rows_);
    batch.kv_pool = pool_.get();
    batch.req_to_token_device = mirror_.get();
    KV_CHECK(backend_->init_forward_metadata(batch).is_ok());
    check(batch, step);
    for (size_t i = 0; i < reqs.size(); ++i) {
      cache_.cache_unfinished_req(reqs[i]->kv,
                                  std::span<const int32_t>(reqs[i]->tokens).first(seq_lens[i]));
    }
  }

  // One decode step over `reqs`, eager or (cuda-paged) through the decode-graph path.
  void decode(const std::vector<Request*>& reqs, bool graph, const char* step) {
    std::vector<mem::KvReqState*> states;
    for (Request* r : reqs) {
      r->tokens.push_back(random_tokens(1)[0]);
      states.push_back(&r->kv);
    }
    std::vector<int32_t> loc;
    const Status s = mem::alloc_for_decode(memory_, states, loc);
    KV_CHECK(s.is_ok(), "{}", s.to_string());
    std::vector<mem::ForwardRequest> fwd;
    for (Request* r : reqs)
      fwd.push_back({r->kv.row, r->kv.kv_allocated_len - 1, {r->tokens.back()}});
    mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kDecode, fwd, loc, rows_);
    batch.kv_pool = pool_.get();
    batch.req_to_token_device = mirror_.get();
    if (graph && !staging_.empty()) {
      const mem::ForwardBatch padded = model::pad_decode_batch(batch, kGraphBs);
      auto* device = staged_.data_as<int32_t>();
      const int64_t n =
          backend_
              ->init_forward_metadata_decode_graph(padded, staging_.data(),
                                                   static_cast<int64_t>(staging_.size()), device)
              .value();
      platform_.copy(device, staging_.data(), static_cast<size_t>(n) * sizeof(int32_t),
                     platform::CopyKind::kHostToDevice);
      backend_->launch_decode_graph_metadata();
      ++stats_.graph_forwards;
    } else {
      KV_CHECK(backend_->init_forward_metadata(batch).is_ok());
    }
    check(batch, step);
  }

  void retract(Request& r) { mem::release_kv_cache(memory_, r.kv, r.tokens, /*insert=*/false); }
  void finish(Request& r) {
    // The last token has no KV: cache what was committed.
    mem::release_kv_cache(memory_, r.kv, r.tokens, /*insert=*/true);
  }

  std::vector<int32_t> host_row(const Request& r, int32_t len) const {
    const auto row = rows_.row(r.kv.row, 0, len);
    return {row.begin(), row.end()};
  }

  MirrorScenarioStats& stats() { return stats_; }

 private:
  void check(const mem::ForwardBatch& batch, const char* step) {
    ++stats_.forwards;
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      const int32_t row = batch.req_pool_indices[b];
      const int32_t len = batch.kv_start(b) + batch.seq_lens[b];
      const auto want = rows_.row(row, 0, len);
      EXPECT_EQ(mirror_->read_row(row, len), std::vector<int32_t>(want.begin(), want.end()))
          << step << ": request " << b << " (row " << row << ", " << len
          << " positions), page size " << page_size_ << ", seed " << seed_;
      ++stats_.rows_checked;
    }
  }

  platform::Platform& platform_;
  int32_t page_size_;
  uint32_t seed_;
  std::mt19937 rng_{seed_};
  mem::ReqToTokenPool rows_;
  std::unique_ptr<mem::BaseTokenToKVPoolAllocator> alloc_;
  mem::RadixCache cache_;
  mem::KvMemory memory_;
  std::unique_ptr<mem::MHATokenToKVPool> pool_;
  std::unique_ptr<mem::DeviceReqToToken> mirror_;
  std::unique_ptr<attention::AttentionBackend> backend_;
  std::vector<int32_t> staging_;  // decode-graph plan (cuda-paged)
  Buffer staged_;                 // its device twin
  MirrorScenarioStats stats_;
};

}  // namespace

MirrorScenarioStats run_mirror_scenario(platform::Platform& platform, const std::string& backend,
                                        int32_t page_size, uint32_t seed) {
  Scenario s(platform, backend, page_size, seed);
  Request a, b, d, e, f;
  a.tokens = s.random_tokens(70);
  // b shares a's first 40 tokens: a radix hit of the whole pages among them.
  b.tokens = std::vector<int32_t>(a.tokens.begin(), a.tokens.begin() + 40);
  const std::vector<int32_t> b_tail = s.random_tokens(30);
  b.tokens.insert(b.tokens.end(), b_tail.begin(), b_tail.end());
  d.tokens = s.random_tokens(37);
  e.tokens = d.tokens;  // prefilled together with d: neither hits, both get their own slots
  f.tokens = s.random_tokens(150);

  s.extend({&a}, 1 << 20, "prefill a");
  s.extend({&b}, 1 << 20, "prefill b (prefix hit)");
  // d and e: after the forward, cache_unfinished_req points e's whole pages at d's slots, on the
  // host only; e's next decode must carry that rewrite into the mirror.
  s.extend({&d, &e}, 1 << 20, "prefill d and e");
  const int32_t whole = 37 / page_size * page_size;
  s.stats().host_rewrote_a_row = whole > 0 && s.host_row(d, whole) == s.host_row(e, whole);
  s.extend({&f}, 64, "chunk 1 of f");
  s.extend({&f}, 64, "chunk 2 of f");
  s.extend({&f}, 64, "chunk 3 of f");

  const std::vector<Request*> all = {&a, &b, &d, &e, &f};
  s.decode(all, /*graph=*/false, "decode 1");
  s.decode(all, /*graph=*/true, "decode 2");
  s.decode(all, /*graph=*/true, "decode 3");
  s.retract(b);
  s.decode({&a, &d, &e, &f}, /*graph=*/false, "decode 4 (b retracted)");
  s.extend({&b}, 1 << 20, "re-admission of b");
  s.decode(all, /*graph=*/true, "decode 5");
  s.decode(all, /*graph=*/false, "decode 6");
  for (Request* r : all)
    s.finish(*r);
  return s.stats();
}

int64_t run_encoder_decoder_mirror_scenario(platform::Platform& platform,
                                            const std::string& backend, int32_t page_size,
                                            bool ragged_layout, uint32_t seed) {
  const mem::EncoderKvLayout layout =
      ragged_layout ? mem::EncoderKvLayout::kRagged : mem::EncoderKvLayout::kAligned;
  std::mt19937 rng(seed);
  mem::ReqToTokenPool rows(kRows, kRowLen);
  auto alloc = mem::make_allocator(kSlots, page_size);
  mem::ChunkCache cache(rows, *alloc);
  const mem::KvMemory memory{rows, *alloc, cache};
  auto pool = std::move(mem::MHATokenToKVPool::create(platform, {.num_layers = 1,
                                                                 .num_kv_heads = 1,
                                                                 .head_dim = 64,
                                                                 .size = kSlots,
                                                                 .page_size = page_size,
                                                                 .dtype = DType::kBF16})
                            .value());
  auto mirror = std::move(mem::DeviceReqToToken::create(platform, rows).value());
  std::unique_ptr<attention::AttentionBackend> be =
      backend == "cuda-paged" ? attention::make_cuda_paged_backend(platform)
                              : attention::make_cuda_ragged_backend(platform);
  int64_t checked = 0;
  auto check = [&](const mem::ForwardBatch& batch, const char* step) {
    for (int32_t b = 0; b < batch.batch_size(); ++b) {
      const int32_t row = batch.req_pool_indices[b];
      const int32_t len = batch.kv_start(b) + batch.seq_lens[b];
      const auto want = rows.row(row, 0, len);
      EXPECT_EQ(mirror->read_row(row, len), std::vector<int32_t>(want.begin(), want.end()))
          << step << ": request " << b << " (encoder " << batch.encoder_len(b) << ", " << len
          << " positions), page size " << page_size << ", seed " << seed;
      ++checked;
    }
  };

  // Prefill: rows [encoder region | prompt], as whisper_generate allocates them.
  const std::vector<int32_t> encoder_lens = {23, 0, 40, 17};
  const int32_t bs = static_cast<int32_t>(encoder_lens.size());
  std::vector<mem::KvReqState> states(static_cast<size_t>(bs));
  std::vector<mem::KvReqState*> ptrs;
  std::vector<int32_t> seq_lens, starts, prompt_lens;
  for (int32_t b = 0; b < bs; ++b) {
    ptrs.push_back(&states[b]);
    starts.push_back(mem::encoder_reserved_len(encoder_lens[b], page_size, layout));
    prompt_lens.push_back(std::uniform_int_distribution<int32_t>(1, 9)(rng));
    seq_lens.push_back(starts[b] + prompt_lens[b]);
  }
  std::vector<int32_t> loc;
  KV_CHECK(mem::alloc_for_extend(memory, ptrs, seq_lens, loc).is_ok());
  std::vector<mem::EncDecRow> enc_rows;
  std::vector<mem::ForwardRequest> fwd;
  for (int32_t b = 0; b < bs; ++b) {
    enc_rows.push_back({states[b].row, encoder_lens[b], prompt_lens[b]});
    fwd.push_back({states[b].row, 0, std::vector<int32_t>(prompt_lens[b], 7), starts[b]});
  }
  std::vector<int32_t> encoder_loc, decoder_loc;
  mem::split_encoder_decoder_loc(loc, enc_rows, page_size, layout, encoder_loc, decoder_loc);
  mem::ForwardBatch batch =
      mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, decoder_loc, rows);
  batch.kv_pool = pool.get();
  batch.encoder_lens = encoder_lens;
  batch.encoder_out_cache_loc = encoder_loc;
  batch.req_to_token_device = mirror.get();
  KV_CHECK(be->init_forward_metadata(batch).is_ok());
  check(batch, "encoder-decoder prefill");

  // Decode steps: one token per request at decoder position len - 1.
  for (int32_t step = 0; step < 3; ++step) {
    KV_CHECK(mem::alloc_for_decode(memory, ptrs, loc).is_ok());
    fwd.clear();
    for (int32_t b = 0; b < bs; ++b) {
      fwd.push_back({states[b].row, prompt_lens[b] + step, {7}, starts[b]});
    }
    batch = mem::make_forward_batch(mem::ForwardMode::kDecode, fwd, loc, rows);
    batch.kv_pool = pool.get();
    batch.encoder_lens = encoder_lens;
    batch.req_to_token_device = mirror.get();
    KV_CHECK(be->init_forward_metadata(batch).is_ok());
    check(batch, "encoder-decoder decode");
  }
  for (mem::KvReqState& st : states)
    mem::release_kv_cache(memory, st, std::vector<int32_t>(kRowLen, 7), /*insert=*/false);
  return checked;
}

void PrintTo(const MirrorScenarioCase& c, std::ostream* os) {
  *os << c.backend << ", page size " << c.page_size;
}

std::string mirror_scenario_case_name(const MirrorScenarioCase& c) {
  std::string name = c.backend;
  std::replace(name.begin(), name.end(), '-', '_');
  return name + "_page" + std::to_string(c.page_size);
}

void expect_mirror_scenario(platform::Platform& platform, const MirrorScenarioCase& c) {
  for (const uint32_t seed : {1u, 2u, 3u}) {
    const MirrorScenarioStats s = run_mirror_scenario(platform, c.backend, c.page_size, seed);
    EXPECT_EQ(s.forwards, 13) << "seed " << seed;
    EXPECT_EQ(s.rows_checked, 37) << "seed " << seed;
    // The scenario reaches the cases it exists for.
    EXPECT_TRUE(s.host_rewrote_a_row) << "seed " << seed;
    EXPECT_EQ(s.graph_forwards, std::string(c.backend) == "cuda-paged" ? 3 : 0) << "seed " << seed;
  }
}

void expect_encoder_decoder_mirror_scenarios(platform::Platform& platform) {
  struct Run {
    const char* backend;
    bool ragged_layout;
  };
  for (const int32_t ps : {1, 16}) {
    for (const uint32_t seed : {1u, 2u}) {
      for (const Run r :
           {Run{"cuda-paged", false}, Run{"cuda-ragged", false}, Run{"cuda-ragged", true}}) {
        EXPECT_EQ(
            run_encoder_decoder_mirror_scenario(platform, r.backend, ps, r.ragged_layout, seed), 16)
            << r.backend << (r.ragged_layout ? ", ragged layout" : ", aligned layout")
            << ", page size " << ps << ", seed " << seed;
      }
    }
  }
}

}  // namespace kvserve::test_support

// Decode graphs on CUDA (model/decode_graph_runner.h) against eager forwards on the same runner,
// with a random-weight Qwen2.5-0.5B-shaped model (q/k/v bias, GQA 14/2, head_dim 64):
//   * page sizes 1, 16 and 128; batches of 1, 3, 8 and 17 requests (buckets 1, 4, 8 and 24, so
//     three of them padded) with prompts of 1, 17, 200 and 1000 tokens; 20 decode steps,
//     teacher-forced with the graph's greedy tokens. At every step the graph's logits and greedy
//     ids equal, bit for bit, those of the eager forward of the same batch padded to its bucket
//     (same kernels, same metadata, same split plan), and stay close to the eager forward of the
//     unpadded batch (cuBLASLt may choose another algorithm for another row count, and the split
//     plan is made for another batch size);
//   * a batch larger than --cuda-graph-max-bs, and every extend, runs eagerly;
//   * the capture report: the bucket list, the memory, the summary line;
//   * the paged decode kernel's per-request splits (what lets one capture serve any lengths)
//     against the float64 reference.
// Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <numeric>
#include <random>

#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/model/decode_graph_runner.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/platform.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"
#include "support/scratch_dir.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int32_t kGraphMaxBs = 24;
constexpr int kSteps = 20;

bool have_cuda() {
  return platform::create_platform(Device{DeviceKind::kCuda, 0}).is_ok();
}

std::unique_ptr<model::ModelRunner> make_runner(const fs::path& dir, int32_t page_size,
                                                bool graphs = true) {
  model::ModelRunnerOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.page_size = page_size;
  o.max_total_tokens = 65536;
  o.max_running_requests = 32;
  o.cuda_graph_max_bs = kGraphMaxBs;
  o.disable_cuda_graph = !graphs;
  // No device pool: GPU suites run side by side (ctest -j), and tests hold several runners.
  o.device_pool.reserve = false;
  auto r = model::ModelRunner::create(dir, o);
  KV_CHECK(r.is_ok(), "{}: {}", dir.string(), r.status().to_string());
  return std::move(r).value();
}

using test_support::argmax_rows;
using test_support::ModelSession;

using test_support::LogitsAgreement;

fs::path make_random_model() {
  const fs::path path = test_support::make_scratch_dir("kvserve-gpu-cuda-graph-test-qwen");
  makemodel::MakeModelOptions o;
  o.preset = "qwen2.5-0.5b-shape";
  o.output = path;
  o.seed = 11;
  o.force = true;
  auto made = makemodel::make_model(o);
  KV_CHECK(made.is_ok(), "{}", made.status().to_string());
  return path;
}

// The random checkpoint, made once per process (on first use) and removed at exit.
const fs::path& model_dir() {
  struct Dir {
    fs::path path;
    ~Dir() {
      std::error_code ec;
      fs::remove_all(path, ec);
    }
  };
  static const Dir dir{make_random_model()};
  return dir.path;
}

class CudaGraphTest : public testing::TestWithParam<int32_t> {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  }
};

class CudaGraphFallbackTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(CudaGraphTest, ReplaysEqualEagerPaddedBitwiseAndEagerClosely) {
  const int32_t page_size = GetParam();
  auto runner = make_runner(model_dir(), page_size);
  const model::DecodeGraphRunner* graphs = runner->decode_graphs();
  ASSERT_NE(graphs, nullptr);
  EXPECT_EQ(graphs->batch_sizes(), (std::vector<int32_t>{1, 2, 4, 8, 16, 24}));
  // graphs->memory_bytes() (the drop in the device's free memory over the capture, as SGLang
  // measures it) is printed, not asserted: other processes' allocations (ctest runs the GPU
  // suites side by side) move the free memory too; on the H200 it read 0 that way.
  std::cout << "[ capture  ] page " << page_size << ": " << graphs->summary() << std::endl;
  const int64_t vocab = runner->config().vocab_size;
  std::mt19937_64 rng(4321 + page_size);
  std::uniform_int_distribution<int32_t> id(0, 20000);
  const std::vector<int32_t> prompt_lens = {1, 17, 200, 1000};

  for (const int32_t bs : {1, 3, 8, 17}) {
    const int32_t bucket = model::decode_graph_bucket(graphs->batch_sizes(), bs);
    ModelSession s(*runner, bs);
    std::vector<std::vector<int32_t>> prompts(bs);
    for (int32_t b = 0; b < bs; ++b) {
      prompts[b].resize(prompt_lens[b % prompt_lens.size()]);
      for (int32_t& t : prompts[b])
        t = id(rng);
    }
    // The prefill is an extend: eager even with graphs on.
    const int64_t replays0 = graphs->replays();
    mem::ForwardBatch prefill = s.batch(prompts, false);
    std::vector<int32_t> next;
    ASSERT_TRUE(runner->forward_greedy(prefill, next).is_ok());
    EXPECT_EQ(graphs->replays(), replays0);

    double eager_ms = 0, graph_ms = 0;
    LogitsAgreement worst;
    int confident = 0, confident_agree = 0;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<int32_t>> add;
      for (const int32_t t : next)
        add.push_back({t});
      const mem::ForwardBatch batch = s.batch(add, true);
      ASSERT_TRUE(graphs->can_run(batch));
      // 1. Eager, unpadded (its K/V of this token are rewritten by the graph just after).
      runner->set_decode_graphs_enabled(false);
      std::vector<float> eager;
      mem::ForwardBatch b1 = batch;
      auto t0 = Clock::now();
      ASSERT_TRUE(runner->forward(b1, eager).is_ok());
      eager_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      // 2. The graph: logits, then greedy ids (a decode forward rewrites the same K/V).
      runner->set_decode_graphs_enabled(true);
      const int64_t before = graphs->replays();
      std::vector<float> graph;
      std::vector<int32_t> graph_ids;
      mem::ForwardBatch b2 = batch;
      t0 = Clock::now();
      ASSERT_TRUE(runner->forward(b2, graph).is_ok());
      graph_ms += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      mem::ForwardBatch b3 = batch;
      ASSERT_TRUE(runner->forward_greedy(b3, graph_ids).is_ok());
      ASSERT_EQ(graphs->replays(), before + 2) << "bs " << bs << " did not replay";
      ASSERT_EQ(graph.size(), static_cast<size_t>(bs) * vocab);
      ASSERT_EQ(graph_ids.size(), static_cast<size_t>(bs));
      EXPECT_EQ(graph_ids, argmax_rows(graph, vocab)) << "step " << step;
      // 3. Eager on the batch padded to the bucket: the graph's computation, bit for bit.
      runner->set_decode_graphs_enabled(false);
      std::vector<float> padded;
      std::vector<int32_t> padded_ids;
      mem::ForwardBatch b4 = model::pad_decode_batch(batch, bucket);
      ASSERT_TRUE(runner->forward(b4, padded).is_ok());
      mem::ForwardBatch b5 = model::pad_decode_batch(batch, bucket);
      ASSERT_TRUE(runner->forward_greedy(b5, padded_ids).is_ok());
      runner->set_decode_graphs_enabled(true);
      ASSERT_EQ(padded.size(), static_cast<size_t>(bucket) * vocab);
      padded.resize(graph.size());
      padded_ids.resize(graph_ids.size());
      EXPECT_EQ(std::memcmp(graph.data(), padded.data(), graph.size() * sizeof(float)), 0)
          << "page " << page_size << ", bs " << bs << " (bucket " << bucket << "), step " << step
          << ": graph logits differ from the padded eager forward; max |diff| "
          << test_support::logits_agreement(padded, graph, vocab).max_abs;
      EXPECT_EQ(graph_ids, padded_ids) << "step " << step;
      // Against the unpadded eager forward: close, and the same confident tokens.
      const LogitsAgreement c = test_support::logits_agreement(eager, graph, vocab);
      worst.rel_l2 = std::max(worst.rel_l2, c.rel_l2);
      worst.max_abs = std::max(worst.max_abs, c.max_abs);
      confident += c.confident;
      confident_agree += c.confident_agree;
      EXPECT_LT(c.rel_l2, 2e-2) << "page " << page_size << ", bs " << bs << ", step " << step;
      next = graph_ids;  // teacher forcing: every path sees the graph's tokens
    }
    EXPECT_GE(confident_agree, confident - confident / 50) << "page " << page_size << ", bs " << bs;
    std::cout << "[ bs " << bs << " -> " << bucket << " ] page " << page_size
              << ": vs unpadded eager rel L2 <= " << worst.rel_l2 << ", max |diff| "
              << worst.max_abs << ", confident top-1 " << confident_agree << "/" << confident
              << "; step " << eager_ms / kSteps << " ms eager, " << graph_ms / kSteps << " ms graph"
              << std::endl;
  }
}

INSTANTIATE_TEST_SUITE_P(PageSizes, CudaGraphTest, testing::Values(1, 16, 128),
                         [](const testing::TestParamInfo<int32_t>& i) {
                           return "page" + std::to_string(i.param);
                         });

TEST_F(CudaGraphFallbackTest, LargerBatchesAndExtendsRunEagerly) {
  auto runner = make_runner(model_dir(), 16);
  const model::DecodeGraphRunner* graphs = runner->decode_graphs();
  ASSERT_NE(graphs, nullptr);
  EXPECT_EQ(graphs->max_bs(), kGraphMaxBs);
  const int32_t bs = kGraphMaxBs + 1;
  ModelSession s(*runner, bs);
  std::vector<std::vector<int32_t>> prompts(bs);
  for (int32_t b = 0; b < bs; ++b)
    prompts[b] = {b + 1, b + 2, b + 3};
  mem::ForwardBatch prefill = s.batch(prompts, false);
  std::vector<int32_t> next;
  ASSERT_TRUE(runner->forward_greedy(prefill, next).is_ok());
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<int32_t>> add;
    for (const int32_t t : next)
      add.push_back({t});
    const mem::ForwardBatch batch = s.batch(add, true);
    EXPECT_FALSE(graphs->can_run(batch));
    const int64_t before = graphs->replays();
    std::vector<float> logits, again;
    mem::ForwardBatch b1 = batch;
    ASSERT_TRUE(runner->forward(b1, logits).is_ok());
    EXPECT_EQ(graphs->replays(), before) << "a batch of " << bs << " replayed a graph";
    runner->set_decode_graphs_enabled(false);
    mem::ForwardBatch b2 = batch;
    ASSERT_TRUE(runner->forward(b2, again).is_ok());
    runner->set_decode_graphs_enabled(true);
    EXPECT_EQ(std::memcmp(logits.data(), again.data(), logits.size() * sizeof(float)), 0);
    next = argmax_rows(logits, runner->config().vocab_size);
  }
}

// The kernel mode decode graphs rely on: each request cuts its own splits (min_tokens_per_split),
// blocks past its last split write empty partials. Against the float64 reference, on a shuffled
// pool with empty, short and long requests and far more splits than any request uses.
TEST_F(CudaGraphFallbackTest, PerRequestSplitsMatchTheReference) {
  auto cuda = std::move(platform::create_platform(Device{DeviceKind::kCuda, 0}).value());
  constexpr int32_t kPage = 16, kKvHeads = 2, kHeads = 8, kDim = 128, kSplits = 40;
  const std::vector<int32_t> seq_lens = {0, 1, 17, 300, 1100, 5000};
  const auto batch = static_cast<int32_t>(seq_lens.size());
  std::vector<int32_t> indptr = {0}, pages;
  for (const int32_t len : seq_lens)
    indptr.push_back(indptr.back() + (len + kPage - 1) / kPage);
  const int32_t num_pages = indptr.back() + 1;  // page 0 unused
  pages.resize(indptr.back());
  std::iota(pages.begin(), pages.end(), 1);
  std::mt19937_64 rng(99);
  std::shuffle(pages.begin(), pages.end(), rng);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random_bf16 = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v)
      x = float_to_bf16(normal(rng));
    return v;
  };
  const size_t row = size_t{kKvHeads} * kDim;
  const std::vector<uint16_t> k = random_bf16(static_cast<size_t>(num_pages) * kPage * row);
  const std::vector<uint16_t> v = random_bf16(k.size());
  const std::vector<uint16_t> q = random_bf16(static_cast<size_t>(batch) * kHeads * kDim);
  std::vector<int32_t> ints = indptr;
  ints.insert(ints.end(), pages.begin(), pages.end());
  ints.insert(ints.end(), seq_lens.begin(), seq_lens.end());
  auto upload = [&](const void* src, size_t bytes) {
    Buffer b = std::move(cuda->allocate_buffer(bytes).value());
    cuda->copy(b.data(), src, bytes, platform::CopyKind::kHostToDevice);
    return b;
  };
  const Buffer dk = upload(k.data(), k.size() * 2), dv = upload(v.data(), v.size() * 2);
  const Buffer dq = upload(q.data(), q.size() * 2);
  const Buffer di = upload(ints.data(), ints.size() * 4);
  const size_t out_elems = static_cast<size_t>(batch) * kHeads * kDim;
  Buffer out = std::move(cuda->allocate_buffer(out_elems * 2).value());
  Buffer ws = std::move(
      cuda->allocate_buffer(static_cast<size_t>(batch) * kHeads * kSplits * (kDim + 1) * 4)
          .value());
  const auto* dints = di.data_as<int32_t>();
  ops::PagedDecodeParams p{
      .q = dq.data(),
      .k_cache = dk.data(),
      .v_cache = dv.data(),
      .page_indptr = dints,
      .page_ids = dints + indptr.size(),
      .seq_lens = dints + indptr.size() + pages.size(),
      .out = out.data(),
      .partial_out = ws.data_as<float>(),
      .partial_lse = ws.data_as<float>() + static_cast<size_t>(batch) * kHeads * kSplits * kDim,
      .batch = batch,
      .num_q_heads = kHeads,
      .num_kv_heads = kKvHeads,
      .head_dim = kDim,
      .page_size = kPage,
      .num_splits = kSplits,
      .tokens_per_split = 0,
      .min_tokens_per_split = 256,
      .sm_scale = 1.0f / std::sqrt(float(kDim))};
  auto run = [&](const ops::PagedDecodeParams& params) {
    ops::paged_decode(*cuda, params);
    std::vector<uint16_t> host(out_elems);
    cuda->copy(host.data(), out.data(), out_elems * 2, platform::CopyKind::kDeviceToHost);
    cuda->synchronize();
    return host;
  };
  const std::vector<uint16_t> got = run(p);
  ops::PagedDecodeParams hp = p;
  hp.q = q.data();
  hp.k_cache = k.data();
  hp.v_cache = v.data();
  hp.page_indptr = indptr.data();
  hp.page_ids = pages.data();
  hp.seq_lens = seq_lens.data();
  std::vector<float> ref(out_elems);
  ops::reference::paged_decode(hp, ref.data());
  double worst_ulps = 0;
  for (size_t i = 0; i < out_elems; ++i) {
    const float r = ref[i];
    // bf16's ulp at the reference, at least 2^-10 (as bench-attention's check).
    const float ulp = r == 0 ? std::ldexp(1.0f, -10)
                             : std::max(std::ldexp(1.0f, std::ilogb(r) - 7), std::ldexp(1.0f, -10));
    worst_ulps = std::max(worst_ulps, std::abs(double(bf16_to_float(got[i])) - r) / ulp);
  }
  EXPECT_LE(worst_ulps, 1.0);
  for (size_t i = 0; i < size_t{kHeads} * kDim; ++i)
    EXPECT_EQ(got[i], 0) << "the empty request gives zeros";
  // One split: the per-request mode is the fixed one, bit for bit.
  ops::PagedDecodeParams one = p;
  one.num_splits = 1;
  one.partial_out = one.partial_lse = nullptr;
  const std::vector<uint16_t> dynamic1 = run(one);
  one.min_tokens_per_split = 0;
  one.tokens_per_split = 5000;
  EXPECT_EQ(run(one), dynamic1);
}

TEST_F(CudaGraphFallbackTest, DisabledOrRaggedBackendCapturesNothing) {
  auto off = make_runner(model_dir(), 16, /*graphs=*/false);
  EXPECT_EQ(off->decode_graphs(), nullptr);
  model::ModelRunnerOptions o;
  o.device = Device{DeviceKind::kCuda, 0};
  o.page_size = 16;
  o.max_total_tokens = 8192;
  o.max_running_requests = 8;
  o.device_pool.reserve = false;
  o.attention_backend = attention::AttentionBackendKind::kCudaRagged;
  auto ragged = model::ModelRunner::create(model_dir(), o);
  ASSERT_TRUE(ragged.is_ok()) << ragged.status().to_string();
  EXPECT_EQ((*ragged)->decode_graphs(), nullptr);
  // Capture sizes are capped by the request rows.
  o.attention_backend.reset();
  o.max_running_requests = 5;
  o.cuda_graph_max_bs = 160;
  auto small = model::ModelRunner::create(model_dir(), o);
  ASSERT_TRUE(small.is_ok()) << small.status().to_string();
  ASSERT_NE((*small)->decode_graphs(), nullptr);
  EXPECT_EQ((*small)->decode_graphs()->batch_sizes(), (std::vector<int32_t>{1, 2, 4, 5}));
}

}  // namespace
}  // namespace kvserve

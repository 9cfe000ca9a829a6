// The whole model on CUDA (bf16 weights, activations and KV cache; cuBLASLt; cuda-paged attention)
// against the same checkpoint on the CPU (f32, the `cpu` backend, itself checked against
// transformers by the oracle tests):
//   * a random-weight Qwen2.5-0.5B-shaped model (q/k/v bias, GQA 14/2, head_dim 64): logits of a
//     prefill, of an extend over a cached prefix and of decode steps, teacher-forced with the
//     CPU's greedy tokens, for page sizes 1, 16, 64 and 128 and requests of 1, 33 and 200 tokens;
//   * the same with an fp8 KV cache (e4m3 and e5m2) on both sides, through cuda-paged and
//     cuda-ragged, against the CPU (bounds from fp8's rounding step: see the tests);
//   * cuda-ragged (gather + the kernels' contiguous mode) against cuda-paged (in place): logits
//     equal bit for bit, bf16 and fp8, every page size;
//   * the trained demo model (models/demo-lm): greedy tokens over 32 steps equal the CPU's, except
//     where bf16 flips a near-tie (the CPU's logprobs of both tokens within 0.05 nats).
// Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <type_traits>

#include "kvserve/engine/generate.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/chunk_cache.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/platform/platform.h"
#include "kvserve/tokenizer/tokenizer.h"
#include "support/logits_agreement.h"
#include "support/model_session.h"
#include "support/scratch_dir.h"
#include "support/typed_options.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;

bool have_cuda() {
  return platform::create_platform(Device{DeviceKind::kCuda, 0}).is_ok();
}

std::unique_ptr<model::ModelRunner> make_runner(const fs::path& dir, const std::string& device,
                                                int32_t page_size,
                                                const std::string& kv_cache_dtype = "auto",
                                                const std::string& backend = "") {
  model::ModelRunnerOptions o;
  o.device = test_support::device_of(device);
  o.page_size = page_size;
  o.kv_cache_dtype = test_support::kv_dtype_of(kv_cache_dtype);
  o.attention_backend = test_support::backend_of(backend);
  o.max_total_tokens = 4096;
  o.max_running_requests = 8;
  // No device pool: GPU suites run side by side (ctest -j), none may take the whole GPU.
  o.device_pool.reserve = false;
  auto r = model::ModelRunner::create(dir, o);
  KV_CHECK(r.is_ok(), "{}: {}", dir.string(), r.status().to_string());
  return std::move(r).value();
}

using test_support::argmax_rows;
using test_support::ModelSession;

// A random-weight Qwen2.5-0.5B-shaped checkpoint, made once per suite (one directory per
// parameter type: the suites run one after the other and each removes its own).
template <typename Param>
class RandomModelSuite : public testing::TestWithParam<Param> {
 protected:
  static void SetUpTestSuite() {
    if (!have_cuda()) return;
    dir_ = new fs::path(test_support::make_scratch_dir(std::is_same_v<Param, int32_t>
                                                           ? "kvserve-gpu-model-test-qwen"
                                                           : "kvserve-gpu-model-test-qwen-fp8"));
    makemodel::MakeModelOptions o;
    o.preset = "qwen2.5-0.5b-shape";
    o.output = *dir_;
    o.seed = 7;
    o.force = true;
    auto made = makemodel::make_model(o);
    KV_CHECK(made.is_ok(), "{}", made.status().to_string());
  }
  static void TearDownTestSuite() {
    if (dir_ != nullptr) fs::remove_all(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  }
  static inline fs::path* dir_ = nullptr;
};

using RandomModelTest = RandomModelSuite<int32_t>;

// Prefill, extend over the cached prefix and decode steps teacher-forced with the reference's
// greedy tokens: the tested runner's logits against the reference runner's at every stage, within
// `rel_l2_bound`; with `check_top1`, the confident rows' top-1 must agree too (meaningless where
// the noise is as large as the confidence margin, as with fp8 against f32). A negative bound asks
// for equal logits, bit for bit.
void logits_match(model::ModelRunner& ref, model::ModelRunner& test, const std::string& label,
                  double rel_l2_bound, uint64_t seed, bool check_top1 = true) {
  const int64_t vocab = ref.config().vocab_size;
  std::cout << "[ seed     ] " << seed << std::endl;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, 20000);
  auto random_ids = [&](int n) {
    std::vector<int32_t> v(n);
    for (int32_t& x : v)
      x = id(rng);
    return v;
  };
  const std::vector<int> lens = {1, 33, 200};
  ModelSession sr(ref, lens.size()), st(test, lens.size());
  auto check = [&](const char* stage, const std::vector<std::vector<int32_t>>& add, bool decode) {
    const std::vector<float> lr = sr.logits(add, decode);
    const std::vector<float> lt = st.logits(add, decode);
    const test_support::LogitsAgreement a = test_support::logits_agreement(lr, lt, vocab);
    std::cout << "[ " << stage << " ] " << label << ": rel L2 " << a.rel_l2 << ", max |diff| "
              << a.max_abs << ", confident top-1 " << a.confident_agree << "/" << a.confident
              << std::endl;
    if (rel_l2_bound < 0) {
      EXPECT_EQ(lr, lt) << stage << ": max |diff| " << a.max_abs;
    } else {
      EXPECT_LT(a.rel_l2, rel_l2_bound) << stage;
    }
    if (check_top1) {
      EXPECT_GE(a.confident_agree, a.confident - a.confident / 10) << stage;
    }
    return argmax_rows(lr, vocab);
  };
  // Prefill of the first 40%, an extend of the rest over the cached prefix, then decode steps
  // fed with the reference's greedy tokens.
  std::vector<std::vector<int32_t>> first, rest;
  for (int n : lens) {
    std::vector<int32_t> p = random_ids(n);
    const int cut = std::max(1, n * 2 / 5);
    first.emplace_back(p.begin(), p.begin() + cut);
    rest.emplace_back(p.begin() + cut, p.end());
  }
  check("prefill", first, false);
  for (size_t b = 0; b < rest.size(); ++b) {
    if (rest[b].empty()) rest[b].push_back(id(rng));  // every request computes something
  }
  std::vector<int32_t> next = check("extend ", rest, false);
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<int32_t>> add;
    for (int32_t t : next)
      add.push_back({t});
    next = check("decode ", add, true);
  }
}

// CUDA (bf16 compute) against the CPU (f32) on one page size, KV dtype and backend.
void logits_match_cpu(const fs::path& dir, int32_t page_size, const std::string& kv_cache_dtype,
                      const std::string& backend, double rel_l2_bound, uint64_t seed,
                      bool check_top1 = true) {
  auto cpu = make_runner(dir, "cpu", page_size, kv_cache_dtype);
  auto gpu = make_runner(dir, "cuda", page_size, kv_cache_dtype, backend);
  const std::string label = "page " + std::to_string(page_size) + " KV " + kv_cache_dtype + " " +
                            (backend.empty() ? "default" : backend) + " vs cpu";
  logits_match(*cpu, *gpu, label, rel_l2_bound, seed, check_top1);
}

TEST_P(RandomModelTest, LogitsMatchCpuThroughPrefillExtendAndDecode) {
  const int32_t page_size = GetParam();
  logits_match_cpu(*dir_, page_size, "auto", "", 0.03, 1234 + page_size);
}

// The same with a bf16 cache (prefill, extend over a cached prefix, decode: the prefill kernel and
// the tensor-core decode kernel in both addressings).
TEST_P(RandomModelTest, PagedAndRaggedGiveTheSameLogits) {
  const int32_t page_size = GetParam();
  auto paged = make_runner(*dir_, "cuda", page_size, "auto", "cuda-paged");
  auto ragged = make_runner(*dir_, "cuda", page_size, "auto", "cuda-ragged");
  logits_match(*paged, *ragged, "page " + std::to_string(page_size) + " paged vs ragged",
               /*rel_l2_bound=*/-1, 4321 + page_size);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, RandomModelTest, testing::Values(1, 16, 64, 128),
                         [](const testing::TestParamInfo<int32_t>& i) {
                           return "page" + std::to_string(i.param);
                         });

struct Fp8ModelCase {
  const char* kv_dtype;
  const char* backend;
  int32_t page_size;
};

using RandomModelFp8Test = RandomModelSuite<Fp8ModelCase>;

// fp8 KV on both sides, against the CPU. Both sides quantise their own K/V, and those differ by
// bf16 compute (CUDA) vs f32 (CPU) before the rounding to fp8. fp8 amplifies that difference: an
// element whose two values straddle a rounding boundary lands on neighbouring fp8 values (a step
// of 6-12 % in e4m3, 12-25 % in e5m2), so the K/V seen by attention differ by a few % rms instead
// of bf16's ~0.2 %. Measured on the H200 (docs/perf/2026-12-02-gpu-suites-and-benches.md):
// logits rel L2 4.7-6.3 % (e4m3) and 7.5-10.5 % (e5m2) against bf16's 1.6-1.9 %; the bounds are
// ~1.4x those. A kernel bug (a wrong page, a lost scale) shows as tens of %. The fp8 kernels are
// checked tightly against float64 on the same bytes in paged_*_test's Fp8 grids.
double fp8_bound(const std::string& kv_dtype, double e4m3, double e5m2) {
  return kv_dtype == "fp8_e5m2" ? e5m2 : e4m3;
}

TEST_P(RandomModelFp8Test, LogitsMatchCpuWithItsOwnFp8Cache) {
  const Fp8ModelCase c = GetParam();
  logits_match_cpu(*dir_, c.page_size, c.kv_dtype, c.backend, fp8_bound(c.kv_dtype, 0.09, 0.15),
                   5678 + c.page_size + (std::string(c.backend) == "cuda-ragged" ? 1000 : 0),
                   /*check_top1=*/false);
}

// Two CUDA runners read the same fp8 cache through the two attention paths: cuda-paged (in place
// through the page table) and cuda-ragged (the slots gathered, fp8 bytes as stored, then the same
// kernels in their contiguous mode). The same kernels, tiles and splits: equal logits, bit for bit.
TEST_P(RandomModelFp8Test, PagedAndRaggedGiveTheSameLogits) {
  const Fp8ModelCase c = GetParam();
  if (std::string(c.backend) != "cuda-paged") GTEST_SKIP() << "one run per page size";
  auto paged = make_runner(*dir_, "cuda", c.page_size, c.kv_dtype, "cuda-paged");
  auto ragged = make_runner(*dir_, "cuda", c.page_size, c.kv_dtype, "cuda-ragged");
  logits_match(*paged, *ragged,
               "page " + std::to_string(c.page_size) + " KV " + c.kv_dtype + " paged vs ragged",
               /*rel_l2_bound=*/-1, 91 + c.page_size);
}

INSTANTIATE_TEST_SUITE_P(KvFp8, RandomModelFp8Test,
                         testing::Values(Fp8ModelCase{"fp8_e4m3", "cuda-paged", 1},
                                         Fp8ModelCase{"fp8_e4m3", "cuda-paged", 16},
                                         Fp8ModelCase{"fp8_e4m3", "cuda-paged", 64},
                                         Fp8ModelCase{"fp8_e5m2", "cuda-paged", 16},
                                         Fp8ModelCase{"fp8_e4m3", "cuda-ragged", 16},
                                         Fp8ModelCase{"fp8_e5m2", "cuda-ragged", 1}),
                         [](const testing::TestParamInfo<Fp8ModelCase>& i) {
                           std::string name = std::string(i.param.kv_dtype) + "_" +
                                              i.param.backend + "_page" +
                                              std::to_string(i.param.page_size);
                           std::replace(name.begin(), name.end(), '-', '_');
                           return name;
                         });

fs::path demo_model_dir() {
  if (const char* env = std::getenv("KVSERVE_DEMO_MODEL")) return env;
  for (const fs::path& p : {fs::path("models/demo-lm"), fs::path("../models/demo-lm"),
                            fs::path(KVSERVE_SOURCE_MODELS_DIR) / "demo-lm"}) {
    if (fs::exists(p / "config.json")) return p;
  }
  return {};
}

TEST(DemoModelGpuTest, GreedyTokensEqualTheCpus) {
  if (!have_cuda()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = demo_model_dir();
  ASSERT_FALSE(dir.empty()) << "models/demo-lm not found (set KVSERVE_DEMO_MODEL)";
  auto tok = tokenizer::Tokenizer::from_directory(dir);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  std::vector<std::string> prompts = {
      "The", "Q: What is the difference between a duck?\nA:",
      "A computer scientist is someone who, when told to \"Go to Hell\", sees the \"go to\", "
      "rather than the destination, as harmful.",
      ""};
  for (int i = 0; i < 12; ++i)
    prompts.back() +=
        "It is a truth universally acknowledged that every program has one more bug. ";
  int identical = 0, prompts_run = 0;
  for (const int32_t page_size : {1, 16, 64, 128}) {
    auto cpu = make_runner(dir, "cpu", page_size);
    auto gpu = make_runner(dir, "cuda", page_size);
    std::vector<engine::GenerateRequest> reqs;
    for (const std::string& p : prompts) {
      engine::GenerateRequest r;
      r.input_ids = (*tok)->encode(p);
      r.sampling.temperature = 0;
      r.sampling.max_new_tokens = 32;
      r.sampling.ignore_eos = true;
      r.sampling.return_logprob = true;
      r.sampling.top_logprobs_num = 5;
      reqs.push_back(std::move(r));
    }
    mem::HostKvMemory cc(cpu->kv_shape(), mem::PrefixCacheKind::kChunk);
    mem::HostKvMemory cg(gpu->kv_shape(), mem::PrefixCacheKind::kChunk);
    auto out_cpu = engine::generate(*cpu, cc, reqs);
    auto out_gpu = engine::generate(*gpu, cg, reqs);
    ASSERT_TRUE(out_cpu.is_ok()) << out_cpu.status().to_string();
    ASSERT_TRUE(out_gpu.is_ok()) << out_gpu.status().to_string();
    for (size_t i = 0; i < reqs.size(); ++i) {
      const engine::GenerateResult& c = (*out_cpu)[i];
      const engine::GenerateResult& g = (*out_gpu)[i];
      ASSERT_EQ(c.output_ids.size(), g.output_ids.size());
      const auto diverge = static_cast<size_t>(
          std::mismatch(c.output_ids.begin(), c.output_ids.end(), g.output_ids.begin()).first -
          c.output_ids.begin());
      ++prompts_run;
      if (diverge == c.output_ids.size()) {
        ++identical;
        continue;
      }
      // bf16 may flip a near-tie: allowed only where the CPU's own logprobs of the two tokens
      // are within 0.05 nats (after that the sequences legitimately differ).
      float gap = INFINITY;
      for (const auto& [id, lp] : c.top_logprobs[diverge]) {
        if (id == g.output_ids[diverge]) gap = c.output_logprobs[diverge] - lp;
      }
      std::cout << "[ near-tie ] page " << page_size << ", prompt " << i << ": step " << diverge
                << " of 32, CPU logprob gap " << gap
                << "\nCPU: " << (*tok)->decode(c.output_ids, true)
                << "\nGPU: " << (*tok)->decode(g.output_ids, true) << std::endl;
      EXPECT_LT(gap, 0.05f) << "page " << page_size << ", prompt " << i << " ("
                            << reqs[i].input_ids.size() << " tokens) diverges at step " << diverge;
    }
  }
  std::cout << "[ greedy   ] " << identical << " of " << prompts_run
            << " (page size, prompt) pairs identical over 32 steps" << std::endl;
  EXPECT_GE(identical, prompts_run * 3 / 4);
}

}  // namespace
}  // namespace kvserve

// Device sampling time (issue 21 item 4): ops::sample_rows on CUDA over rows x vocab f32 logits,
// the binned-select kernel (platform/cuda/sampling_bins.cu, the default) against the radix-select
// one (platform/cuda/sampling.cu). Each row is N(0, 3) logits with a head of 30 tokens near 12
// (an LLM-like peak over a long tail), its own seed. Filters:
//   temperature  temperature 0.8 only (no boundary search: the max pass and the draw)
//   top_p        temperature 0.8, top-p 0.9
//   combined     temperature 0.8, top-k 50, top-p 0.95, min-p 0.05
//   greedy       the argmax only (the penalty / max pass)
// Time per launch: 50 launches queued back to back on the platform's stream, then one
// synchronize (manual time, so the launches overlap the host loop as in serving), 20 times. Skips
// without a CUDA device. Run: build/bench/sampling_bench [--benchmark_filter=...]; results in
// docs/perf/.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>
#include <vector>

#include "kvserve/core/check.h"
#include "kvserve/platform/ops/sampling.h"
#include "kvserve/platform/platform.h"

namespace kvserve {
namespace {

enum Filter : int64_t { kTemperature, kTopP, kCombined, kGreedy };

platform::Platform* gpu() {
  static std::unique_ptr<platform::Platform> p = [] {
    auto r = platform::create_platform(Device{DeviceKind::kCuda, 0});
    return r.is_ok() ? std::move(r).value() : nullptr;
  }();
  return p.get();
}

Tensor upload(platform::Platform& p, const void* data, size_t bytes) {
  auto t = p.empty(DType::kU8, {static_cast<int64_t>(std::max<size_t>(bytes, 1))});
  KV_CHECK(t.is_ok(), "{}", t.status().to_string());
  p.copy(t->data(), data, bytes, platform::CopyKind::kHostToDevice);
  return std::move(t).value();
}

void BM_SampleRows(benchmark::State& state) {
  platform::Platform* p = gpu();
  if (p == nullptr) {
    state.SkipWithError("no CUDA device");
    return;
  }
  const int64_t rows = state.range(0);
  const int64_t vocab = state.range(1);
  const auto filter = static_cast<Filter>(state.range(2));
  const auto select = state.range(3) == 0 ? ops::SampleSelect::kBins : ops::SampleSelect::kRadix;
  std::mt19937_64 rng(1234);
  std::normal_distribution<float> tail(0.0f, 3.0f);
  std::normal_distribution<float> head(12.0f, 0.7f);
  std::vector<float> logits(static_cast<size_t>(rows * vocab));
  for (float& v : logits)
    v = tail(rng);
  std::vector<ops::SampleRowParams> params(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    for (int i = 0; i < 30; ++i)
      logits[static_cast<size_t>(r * vocab) + rng() % vocab] = head(rng);
    ops::SampleRowParams& rp = params[static_cast<size_t>(r)];
    rp.temperature = 0.8f;
    rp.seed = rng();
    rp.step = 7;
    rp.greedy = filter == kGreedy ? 1 : 0;
    if (filter == kTopP) rp.top_p = 0.9f;
    if (filter == kCombined) {
      rp.top_k = 50;
      rp.top_p = 0.95f;
      rp.min_p = 0.05f;
    }
  }
  Tensor dev_logits = upload(*p, logits.data(), logits.size() * sizeof(float));
  Tensor dev_params = upload(*p, params.data(), params.size() * sizeof(params[0]));
  auto tokens = p->empty(DType::kI32, {rows});
  KV_CHECK(tokens.is_ok(), "{}", tokens.status().to_string());
  const ops::SampleRowsParams sp{.logits = dev_logits.data_as<float>(),
                                 .rows = rows,
                                 .vocab = vocab,
                                 .ld = vocab,
                                 .row_params = dev_params.data_as<const ops::SampleRowParams>(),
                                 .out_tokens = tokens->data_as<int32_t>()};
  ops::sample_rows(*p, sp, {}, select);  // warm-up
  p->synchronize();
  constexpr int kLaunches = 50;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLaunches; ++i)
      ops::sample_rows(*p, sp, {}, select);
    p->synchronize();
    const std::chrono::duration<double> s = std::chrono::steady_clock::now() - start;
    state.SetIterationTime(s.count() / kLaunches);
  }
  state.counters["rows"] = static_cast<double>(rows);
  state.counters["GB/s_1pass"] = benchmark::Counter(static_cast<double>(rows * vocab * 4),
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(select == ops::SampleSelect::kBins ? "bins" : "radix") + " " +
                 (filter == kTemperature ? "temperature"
                  : filter == kTopP      ? "top_p"
                  : filter == kCombined  ? "combined"
                                         : "greedy"));
}

void Shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "vocab", "filter", "radix"});
  for (const auto& [rows, vocab] :
       {std::pair<int64_t, int64_t>{64, 128256}, {1, 128256}, {256, 32000}}) {
    for (const int64_t filter : {kTemperature, kTopP, kCombined, kGreedy}) {
      for (const int64_t radix : {0, 1})
        b->Args({rows, vocab, filter, radix});
    }
  }
}
// 20 iterations of 50 launches: the manual time is per launch, so a time-based iteration count
// would run each case 50 times longer than asked.
BENCHMARK(BM_SampleRows)
    ->Apply(Shapes)
    ->UseManualTime()
    ->Iterations(20)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();

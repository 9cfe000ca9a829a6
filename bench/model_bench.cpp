// CPU model benchmarks: the GEMM peak of this machine (OpenBLAS sgemm) and decode steps of a
// checkpoint at batch 1 and 16, reported as tokens/s and as the GFLOP/s the decode reaches.
//
//   build/bench/model_bench                                   # the tiny preset (made on the fly)
//   KVSERVE_BENCH_MODEL=/path/to/checkpoint build/bench/model_bench --benchmark_filter=Decode
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/model_runner.h"

namespace kvserve {
namespace {

void BM_SgemmPeak(benchmark::State& state) {
  const auto n = static_cast<int>(state.range(0));
  std::vector<float> a(size_t(n) * n, 1.0f), b(size_t(n) * n, 0.5f), c(size_t(n) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * state.iterations() / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_SgemmPeak)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond)->UseRealTime();

std::filesystem::path bench_model() {
  if (const char* m = std::getenv("KVSERVE_BENCH_MODEL")) return m;
  static const std::filesystem::path tiny = [] {
    const auto dir = std::filesystem::temp_directory_path() / "kvserve-bench-tiny";
    std::filesystem::remove_all(dir);
    makemodel::MakeModelOptions o;
    o.preset = "tiny";
    o.output = dir;
    if (!makemodel::make_model(o).is_ok()) std::abort();
    return dir;
  }();
  return tiny;
}

// One decode step for `batch` requests that each hold a 128-token prompt; the step is rolled back
// after every iteration so the context stays the same.
void BM_Decode(benchmark::State& state) {
  const auto bs = static_cast<int32_t>(state.range(0));
  model::ModelRunnerOptions o;
  o.max_total_tokens = 64 * 1024;
  o.max_running_requests = bs;
  auto created = model::ModelRunner::create(bench_model(), o);
  if (!created.is_ok()) {
    state.SkipWithError(created.status().to_string().c_str());
    return;
  }
  model::ModelRunner& r = **created;
  mem::HostKvMemory host(r.kv_shape(), mem::PrefixCacheKind::kChunk);
  const mem::KvMemory memory = host.view();
  const checkpoint::ModelConfig& c = r.config();
  constexpr int32_t kPrompt = 128;
  std::mt19937 rng(1);
  std::vector<mem::KvReqState> kv(bs);
  std::vector<mem::KvReqState*> ptrs;
  std::vector<mem::ForwardRequest> fwd;
  for (auto& k : kv)
    ptrs.push_back(&k);
  std::vector<int32_t> lens(bs, kPrompt);
  std::vector<int32_t> loc;
  if (!mem::alloc_for_extend(memory, ptrs, lens, loc).is_ok()) std::abort();
  for (int32_t b = 0; b < bs; ++b) {
    std::vector<int32_t> ids(kPrompt);
    for (auto& t : ids)
      t = static_cast<int32_t>(rng() % c.vocab_size);
    fwd.push_back({kv[b].row, 0, ids});
  }
  std::vector<float> logits;
  auto prefill = mem::make_forward_batch(mem::ForwardMode::kExtend, fwd, loc, host.req_to_token());
  if (!r.forward(prefill, logits).is_ok()) std::abort();
  for (auto _ : state) {
    const mem::AllocatorState saved = host.allocator().backup_state();
    std::vector<int32_t> dloc;
    if (!mem::alloc_for_decode(memory, ptrs, dloc).is_ok()) std::abort();
    std::vector<mem::ForwardRequest> step;
    for (int32_t b = 0; b < bs; ++b)
      step.push_back({kv[b].row, kPrompt, {b + 1}});
    auto batch =
        mem::make_forward_batch(mem::ForwardMode::kDecode, step, dloc, host.req_to_token());
    if (!r.forward(batch, logits).is_ok()) std::abort();
    benchmark::DoNotOptimize(logits.data());
    for (auto& k : kv) {
      --k.kv_allocated_len;
      --k.kv_committed_len;
    }
    host.allocator().restore_state(saved);
  }
  // Matrix FLOPs of one token: every linear layer plus the LM head (2 per weight).
  const double h = c.hidden_size, inter = c.intermediate_size, layers = c.num_hidden_layers;
  const double qd = double(c.num_attention_heads) * c.head_dim;
  const double kvd = double(c.num_key_value_heads) * c.head_dim;
  const double per_token =
      2 * (layers * (h * (qd + 2 * kvd) + qd * h + 3 * h * inter) + h * c.vocab_size);
  state.counters["tok/s"] =
      benchmark::Counter(double(bs) * state.iterations(), benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(per_token * bs * state.iterations() / 1e9, benchmark::Counter::kIsRate);
  state.SetLabel(c.architecture_name + " " + std::to_string(c.num_hidden_layers) + "L h" +
                 std::to_string(c.hidden_size));
}
BENCHMARK(BM_Decode)->Arg(1)->Arg(16)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace kvserve

BENCHMARK_MAIN();

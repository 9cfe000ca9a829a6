// Memory-system benchmarks: the host work SGLang does with GPU kernel launches plus Python per
// scheduler step. Targets (docs/perf/): a 256-request alloc_decode under 5 us, match_prefix of a
// 32k-token prompt under 100 us.
//
// Each benchmark times only the call under test (manual time); set-up and roll-back run outside.
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <random>

#include "kvserve/mem/allocation.h"
#include "kvserve/mem/radix_cache.h"

namespace kvserve::mem {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// alloc_extend for `bs` requests: each has a random prefix (often ending mid-page, with its
// partial last page already allocated) and extends by 1..256 tokens.
void BM_AllocExtend(benchmark::State& state) {
  const auto ps = static_cast<int32_t>(state.range(0));
  const auto bs = static_cast<int32_t>(state.range(1));
  auto alloc = make_allocator(int64_t{4} << 20, ps);
  std::mt19937 rng(1);
  std::vector<int32_t> prefix(bs), seq(bs), last(bs);
  std::vector<int32_t> out;
  for (int32_t i = 0; i < bs; ++i) {
    prefix[i] = static_cast<int32_t>(rng() % 2048);
    seq[i] = prefix[i] + 1 + static_cast<int32_t>(rng() % 256);
    // Give the prefix a real partial page so part 1 of the paged algorithm runs.
    last[i] = kNoSlot;
    if (prefix[i] > 0) {
      std::vector<int32_t> page;
      (void)alloc->alloc(ps, page);
      last[i] = page[(prefix[i] - 1) % ps];
    }
  }
  int64_t tokens = 0;
  for (auto _ : state) {
    const AllocatorState saved = alloc->backup_state();
    const auto t0 = Clock::now();
    const Status s = alloc->alloc_extend(prefix, seq, last, out);
    state.SetIterationTime(seconds_since(t0));
    if (!s.is_ok()) state.SkipWithError(s.message().c_str());
    tokens += static_cast<int64_t>(out.size());
    alloc->restore_state(saved);
  }
  state.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
  state.SetBytesProcessed(tokens * static_cast<int64_t>(sizeof(int32_t)));  // out_cache_loc
}

// The ceiling for steps that mostly write slot ids: a memcpy of `bytes` (cache-resident sizes,
// like the out_cache_loc arrays above).
void BM_MemcpyBaseline(benchmark::State& state) {
  const auto bytes = static_cast<size_t>(state.range(0));
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// alloc_decode for `bs` running requests at random lengths (a new page for ~1/ps of them).
void BM_AllocDecode(benchmark::State& state) {
  const auto ps = static_cast<int32_t>(state.range(0));
  const auto bs = static_cast<int32_t>(state.range(1));
  auto alloc = make_allocator(int64_t{4} << 20, ps);
  std::mt19937 rng(2);
  std::vector<int32_t> seq(bs), last(bs);
  std::vector<int32_t> out;
  for (int32_t i = 0; i < bs; ++i) {
    seq[i] = 2 + static_cast<int32_t>(rng() % 4096);
    std::vector<int32_t> page;
    (void)alloc->alloc(ps, page);
    last[i] = page[(seq[i] - 2) % ps];
  }
  for (auto _ : state) {
    const AllocatorState saved = alloc->backup_state();
    const auto t0 = Clock::now();
    const Status s = alloc->alloc_decode(seq, last, out);
    state.SetIterationTime(seconds_since(t0));
    if (!s.is_ok()) state.SkipWithError(s.message().c_str());
    alloc->restore_state(saved);
  }
}

// A tree like a serving workload's: 64 cached prompts sharing system prompts, plus the probe.
struct TreeFixture {
  ReqToTokenPool rows{4, 64};
  std::unique_ptr<BaseTokenToKVPoolAllocator> alloc;
  RadixCache tree;
  std::mt19937 rng{3};

  explicit TreeFixture(int32_t ps)
      : alloc(make_allocator(int64_t{8} << 20, ps)), tree(rows, *alloc) {
    std::vector<std::vector<int32_t>> system_prompts;
    for (int i = 0; i < 4; ++i)
      system_prompts.push_back(random_tokens(1024));
    for (int i = 0; i < 64; ++i) {
      std::vector<int32_t> prompt = system_prompts[i % 4];
      const std::vector<int32_t> user = random_tokens(256 + static_cast<int32_t>(rng() % 2048));
      prompt.insert(prompt.end(), user.begin(), user.end());
      insert(prompt);
    }
  }

  std::vector<int32_t> random_tokens(int32_t n) {
    std::vector<int32_t> t(n);
    for (auto& x : t)
      x = static_cast<int32_t>(rng() % 128000);
    return t;
  }

  // Inserts the page-aligned part of `key` with freshly allocated slots (frees duplicates).
  void insert(const std::vector<int32_t>& key) {
    const int64_t n = floor_align(static_cast<int64_t>(key.size()), alloc->page_size());
    std::vector<int32_t> slots;
    if (!alloc->alloc(n, slots).is_ok()) std::abort();
    const int64_t cached = tree.insert(std::span(key).first(n), slots);
    alloc->free(std::span(slots).first(cached));
  }
};

void BM_RadixMatchPrefix(benchmark::State& state) {
  const auto ps = static_cast<int32_t>(state.range(0));
  const auto len = static_cast<int32_t>(state.range(1));
  TreeFixture f(ps);
  const std::vector<int32_t> prompt = f.random_tokens(len);
  f.insert(prompt);
  for (auto _ : state) {
    const auto t0 = Clock::now();
    MatchResult m = f.tree.match_prefix(prompt);
    state.SetIterationTime(seconds_since(t0));
    if (static_cast<int32_t>(m.indices.size()) != floor_align(len, ps)) state.SkipWithError("miss");
    benchmark::DoNotOptimize(m.indices.data());
  }
}

// Insert of a `len`-token prompt whose first half is cached (locked, so eviction keeps it) and
// whose second half is new every iteration.
void BM_RadixInsert(benchmark::State& state) {
  const auto ps = static_cast<int32_t>(state.range(0));
  const auto len = static_cast<int32_t>(state.range(1));
  TreeFixture f(ps);
  std::vector<int32_t> base = f.random_tokens(len);
  const std::vector<int32_t> half(base.begin(), base.begin() + len / 2);
  f.insert(half);
  f.tree.inc_lock_ref(f.tree.match_prefix(half).last_node);
  std::vector<int32_t> slots;
  for (auto _ : state) {
    for (int32_t i = len / 2; i < len; ++i)
      base[i] = static_cast<int32_t>(f.rng() % 128000);
    const int64_t n = floor_align(len, ps);
    if (!f.alloc->alloc(n, slots).is_ok()) state.SkipWithError("pool exhausted");
    const auto t0 = Clock::now();
    const int64_t cached = f.tree.insert(std::span(base).first(n), slots);
    state.SetIterationTime(seconds_since(t0));
    f.alloc->free(std::span(slots).first(cached));
    f.tree.evict(n - cached);  // keep the tree's size steady (LRU: the oldest leaves go first)
  }
}

// Eviction of `len` tokens' worth of leaves.
void BM_RadixEvict(benchmark::State& state) {
  const auto ps = static_cast<int32_t>(state.range(0));
  const auto len = static_cast<int32_t>(state.range(1));
  TreeFixture f(ps);
  for (auto _ : state) {
    f.insert(f.random_tokens(len));
    const auto t0 = Clock::now();
    const int64_t freed = f.tree.evict(len);
    state.SetIterationTime(seconds_since(t0));
    benchmark::DoNotOptimize(freed);
  }
}

void page_and_batch(benchmark::internal::Benchmark* b) {
  for (const int ps : {1, 64}) {
    for (const int bs : {1, 8, 64, 256, 512})
      b->Args({ps, bs});
  }
}

void page_and_length(benchmark::internal::Benchmark* b) {
  for (const int ps : {1, 64}) {
    for (const int len : {1024, 4096, 16384, 32768})
      b->Args({ps, len});
  }
}

BENCHMARK(BM_MemcpyBaseline)->Arg(4 << 10)->Arg(64 << 10)->Arg(256 << 10);
BENCHMARK(BM_AllocExtend)->Apply(page_and_batch)->ArgNames({"page", "batch"})->UseManualTime();
BENCHMARK(BM_AllocDecode)->Apply(page_and_batch)->ArgNames({"page", "batch"})->UseManualTime();
BENCHMARK(BM_RadixMatchPrefix)->Apply(page_and_length)->ArgNames({"page", "len"})->UseManualTime();
BENCHMARK(BM_RadixInsert)->Apply(page_and_length)->ArgNames({"page", "len"})->UseManualTime();
BENCHMARK(BM_RadixEvict)->Apply(page_and_length)->ArgNames({"page", "len"})->UseManualTime();

}  // namespace
}  // namespace kvserve::mem

BENCHMARK_MAIN();

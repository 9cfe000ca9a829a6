// Tokenizer benchmarks: encode and decode of English-like text with the small fixture tokenizers
// (tests/fixtures/tokenizers/), and streaming detokenization per token.
// Run: build/bench/tokenizer_bench (the fixtures are found next to this source file).
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

const char* const kNames[] = {"gpt2", "qwen2", "llama3", "sp_llama"};

std::unique_ptr<Tokenizer> load(int index) {
  const auto dir = std::filesystem::path(__FILE__).parent_path().parent_path() / "tests" /
                   "fixtures" / "tokenizers" / kNames[index];
  auto t = Tokenizer::from_directory(dir);
  KV_CHECK(t.is_ok(), "{}", t.status().to_string());
  return std::move(t).value();
}

std::string english(size_t bytes) {
  static const char* kWords[] = {"the",     "of",     "and",    "to",        "in",     "is",
                                 "was",     "for",    "it",     "with",      "as",     "on",
                                 "serving", "engine", "cache",  "attention", "prefix", "radix",
                                 "kernel",  "batch",  "decode", "prefill",   "memory", "GPU"};
  std::mt19937 rng(1);
  std::string s;
  while (s.size() < bytes) {
    s += kWords[rng() % std::size(kWords)];
    s += rng() % 15 == 0 ? ". " : " ";
  }
  return s;
}

void BM_Encode(benchmark::State& state) {
  auto tok = load(static_cast<int>(state.range(0)));
  const std::string text = english(static_cast<size_t>(state.range(1)));
  for (auto _ : state)
    benchmark::DoNotOptimize(tok->encode(text, true));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.SetLabel(kNames[state.range(0)]);
}
BENCHMARK(BM_Encode)->ArgsProduct({{0, 1, 2, 3}, {1 << 10, 1 << 16}});

void BM_Decode(benchmark::State& state) {
  auto tok = load(static_cast<int>(state.range(0)));
  const auto ids = tok->encode(english(1 << 16), true);
  for (auto _ : state)
    benchmark::DoNotOptimize(tok->decode(ids, true));
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
  state.SetLabel(kNames[state.range(0)]);
}
BENCHMARK(BM_Decode)->DenseRange(0, 3);

// One push per generated token, as the server streams a response.
void BM_IncrementalDetokenize(benchmark::State& state) {
  auto tok = load(static_cast<int>(state.range(0)));
  const auto ids = tok->encode(english(1 << 12), false);
  for (auto _ : state) {
    IncrementalDetokenizer detok(*tok);
    for (const int32_t id : ids)
      benchmark::DoNotOptimize(detok.push(id));
    benchmark::DoNotOptimize(detok.finish());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
  state.SetLabel(kNames[state.range(0)]);
}
BENCHMARK(BM_IncrementalDetokenize)->DenseRange(0, 3);

}  // namespace
}  // namespace kvserve::tokenizer

BENCHMARK_MAIN();

#include "kvserve/bench/one_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <tuple>

#include "kvserve/bench/one_batch_sweep.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/host_kv_memory.h"

namespace kvserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kPromptIdLimit = 10000;  // SGLang: np.random.randint(0, 10000)

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

nlohmann::json OneBatchResult::to_json() const {
  nlohmann::json j;
  j["run_name"] = run_name;
  j["batch_size"] = batch_size;
  j["input_len"] = input_len;
  j["output_len"] = output_len;
  j["prefill_latency"] = prefill_latency;
  j["prefill_throughput"] = prefill_throughput;
  add_json(j);
  return j;
}

std::optional<std::string> one_batch_misfit(const model::ModelRunner& runner, int32_t batch_size,
                                            int32_t input_len, int32_t output_len) {
  const int64_t seq = int64_t{input_len} + output_len;
  if (seq > runner.context_len()) {
    return fmt::format("input + output ({}) exceeds the context length {}", seq,
                       runner.context_len());
  }
  const int64_t per_request = mem::ceil_align(seq, runner.page_size());
  const int64_t max_batch = runner.max_total_tokens() / per_request;
  if (batch_size > max_batch) {
    return fmt::format("max batch size limit ({} for {} KV tokens)", max_batch,
                       runner.max_total_tokens());
  }
  if (batch_size > runner.max_running_requests()) {
    return fmt::format("max_running_requests limit ({})", runner.max_running_requests());
  }
  return std::nullopt;
}

Result<OneBatchResult> run_one_batch_once(model::ModelRunner& runner, const std::string& run_name,
                                          int32_t batch_size, int32_t input_len, int32_t output_len,
                                          uint64_t seed,
                                          const std::function<void(std::string_view)>& log) {
  KV_CHECK(batch_size >= 1 && input_len >= 1 && output_len >= 1, "({}, {}, {})", batch_size,
           input_len, output_len);
  // The run's own host KV memory (nothing shared, nothing cached), released at the end.
  mem::HostKvMemory host(runner.kv_shape(), mem::PrefixCacheKind::kChunk);
  const mem::KvMemory memory = host.view();
  platform::Platform& platform = runner.platform();
  const int32_t vocab = runner.config().vocab_size;

  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, std::min(vocab, kPromptIdLimit) - 1);
  const auto bs = static_cast<size_t>(batch_size);
  std::vector<std::vector<int32_t>> tokens(bs);
  for (std::vector<int32_t>& t : tokens) {
    t.resize(static_cast<size_t>(input_len));
    for (int32_t& id : t)
      id = token(rng);
  }
  std::vector<mem::KvReqState> kv(bs);
  auto release_all = [&] {
    const mem::FreeGroup group(host.allocator());
    for (size_t b = 0; b < bs; ++b) {
      if (kv[b].row != mem::kNoRow) mem::release_kv_cache(memory, kv[b], tokens[b], false);
    }
  };

  OneBatchResult r;
  r.run_name = run_name;
  r.batch_size = batch_size;
  r.input_len = input_len;
  r.output_len = output_len;
  std::vector<int32_t> next;
  std::vector<mem::BatchEntry> entries;

  // Prefill: allocation, forward and the greedy pick, as SGLang's extend() + sample.
  platform.synchronize();
  auto t0 = Clock::now();
  for (size_t b = 0; b < bs; ++b)
    entries.push_back({&kv[b], tokens[b]});
  Result<mem::ForwardBatch> prefill = mem::prepare_extend(memory, entries);
  if (!prefill.is_ok()) {
    return out_of_memory("prefill of ({}, {}, {}): {}", batch_size, input_len, output_len,
                         prefill.status().message());
  }
  mem::ForwardBatch batch = std::move(prefill).value();
  if (Status s = runner.forward_greedy(batch, next); !s.is_ok()) {
    release_all();
    return make_status(s.code(), "prefill of ({}, {}, {}): {}", batch_size, input_len, output_len,
                       s.message());
  }
  platform.synchronize();
  r.prefill_latency = seconds(t0, Clock::now());
  r.total_latency = r.prefill_latency;
  r.prefill_throughput = static_cast<double>(input_len) * batch_size / r.prefill_latency;
  log(fmt::format("Prefill. latency: {:6.5f} s, throughput: {:9.2f} token/s", r.prefill_latency,
                  r.prefill_throughput));

  for (int32_t i = 0; i < output_len - 1; ++i) {
    platform.synchronize();
    t0 = Clock::now();
    for (size_t b = 0; b < bs; ++b) {
      tokens[b].push_back(next[b]);
      entries[b].new_tokens = {next[b]};
    }
    Result<mem::ForwardBatch> step = mem::prepare_decode(memory, entries);
    if (!step.is_ok()) {
      release_all();
      return out_of_memory("decode step {} of ({}, {}, {}): {}", i, batch_size, input_len,
                           output_len, step.status().message());
    }
    batch = std::move(step).value();
    if (Status s = runner.forward_greedy(batch, next); !s.is_ok()) {
      release_all();
      return make_status(s.code(), "decode step {} of ({}, {}, {}): {}", i, batch_size, input_len,
                         output_len, s.message());
    }
    platform.synchronize();
    r.add_step(seconds(t0, Clock::now()), batch_size, log);
  }
  for (size_t b = 0; b < bs; ++b)
    tokens[b].push_back(next[b]);
  release_all();
  KV_CHECK(host.all_rows_free() && host.allocator().available_size() == host.allocator().size(),
           "a one-batch run leaves every row and slot free");

  r.finish(batch_size, (static_cast<double>(input_len) + output_len) * batch_size, log);
  return r;
}

Status check_sweep_lists(const SweepLists& lists) {
  for (const auto& [values, flag, min] :
       {std::tuple{&lists.batch_sizes, "--batch-size", 1},
        std::tuple{&lists.input_lens, "--input-len", lists.min_input_len},
        std::tuple{&lists.output_lens, "--output-len", 1}}) {
    if (values->empty()) return invalid_argument("{} needs at least one value", flag);
    for (const int32_t v : *values) {
      if (v < min) return invalid_argument("{} values must be >= {}, got {}", flag, min, v);
    }
  }
  return Status::ok();
}

Result<std::vector<OneBatchResult>> run_one_batch_sweep(
    model::ModelRunner& runner, const OneBatchOptions& o,
    const std::function<void(std::string_view)>& log) {
  return run_sweep<OneBatchResult>(
      {o.batch_sizes, o.input_lens, 1, o.output_lens}, o.warmup, o.seed,
      [&](int32_t b, int32_t i, int32_t out) { return one_batch_misfit(runner, b, i, out); },
      [&](int32_t b, int32_t i, int32_t out, uint64_t seed) {
        return run_one_batch_once(runner, o.run_name, b, i, out, seed, log);
      },
      log);
}

}  // namespace kvserve::bench

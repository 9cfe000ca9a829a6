#include "kvserve/engine/generate.h"

#include <algorithm>
#include <random>

#include "kvserve/engine/sampler.h"
#include "kvserve/mem/batch_lifecycle.h"

namespace kvserve::engine {
namespace {

struct Running {
  const GenerateRequest* request = nullptr;
  GenerateResult* result = nullptr;
  mem::KvReqState kv;
  std::vector<int32_t> tokens;  // input, then output
  uint64_t seed = 0;
  bool done = false;
};

Status validate_request(const GenerateRequest& r, size_t i, const model::ModelRunner& runner) {
  const int32_t vocab = runner.config().vocab_size;
  if (r.input_ids.empty()) return invalid_argument("request {}: empty input", i);
  for (const int32_t id : r.input_ids) {
    if (id < 0 || id >= vocab) {
      return invalid_argument("request {}: token id {} is outside the vocabulary of {}", i, id,
                              vocab);
    }
  }
  const int64_t total = static_cast<int64_t>(r.input_ids.size()) + r.sampling.max_new_tokens;
  if (total > runner.context_len()) {
    return invalid_argument(
        "request {}: {} input tokens + max_new_tokens {} exceed the context length of {}", i,
        r.input_ids.size(), r.sampling.max_new_tokens, runner.context_len());
  }
  if (Status s = validate(r.sampling, vocab); !s.is_ok()) {
    return invalid_argument("request {}: {}", i, s.message());
  }
  return Status::ok();
}

// Appends the sampled token and decides whether the request stops.
void accept(Running& r, const SampledToken& t, const GenerateOptions& options) {
  GenerateResult& out = *r.result;
  out.output_ids.push_back(t.token);
  r.tokens.push_back(t.token);
  const SamplingParams& p = r.request->sampling;
  if (p.return_logprob) out.output_logprobs.push_back(t.logprob);
  if (p.top_logprobs_num > 0) out.top_logprobs.push_back(t.top_logprobs);
  const auto n = static_cast<int32_t>(out.output_ids.size());
  const bool is_stop =
      std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), t.token) !=
          p.stop_token_ids.end() ||
      (!p.ignore_eos && std::find(options.eos_token_ids.begin(), options.eos_token_ids.end(),
                                  t.token) != options.eos_token_ids.end());
  if (is_stop && n >= p.min_new_tokens) {
    out.finish_reason = "stop";
    out.matched_stop = t.token;
    r.done = true;
  } else if (n >= p.max_new_tokens) {
    out.finish_reason = "length";
    r.done = true;
  }
}

void sample_into(Running& r, std::span<const float> logits, const GenerateOptions& options) {
  const auto prompt = std::span<const int32_t>(r.request->input_ids);
  const SampledToken t = sample(logits, r.request->sampling, prompt, r.result->output_ids, r.seed,
                                static_cast<int64_t>(r.result->output_ids.size()));
  accept(r, t, options);
}

}  // namespace

Result<std::vector<GenerateResult>> generate(model::ModelRunner& runner, mem::HostKvMemory& host,
                                             std::span<const GenerateRequest> requests,
                                             const GenerateOptions& options) {
  for (size_t i = 0; i < requests.size(); ++i) {
    KV_RETURN_IF_ERROR(validate_request(requests[i], i, runner));
  }
  std::vector<GenerateResult> results(requests.size());
  if (requests.empty()) return results;
  const mem::KvMemory memory = host.view();
  mem::PrefixCache& cache = host.cache();
  const int32_t vocab = runner.config().vocab_size;
  std::random_device entropy;

  // Admission: match each prompt's prefix (at most len - 1 tokens) and lock it.
  std::vector<Running> reqs(requests.size());
  std::vector<mem::BatchEntry> entries;
  for (size_t i = 0; i < requests.size(); ++i) {
    Running& r = reqs[i];
    r.request = &requests[i];
    r.result = &results[i];
    r.tokens = requests[i].input_ids;
    r.seed = requests[i].sampling.seed.value_or((uint64_t{entropy()} << 32) | entropy());
    const std::span<const int32_t> key(r.tokens.data(), r.tokens.size() - 1);
    mem::MatchResult m = cache.match_prefix(key);
    cache.inc_lock_ref(m.last_node);
    r.kv.cache_protected_len = static_cast<int32_t>(m.indices.size());
    r.kv.last_node = m.last_node;
    r.kv.prefix_indices = std::move(m.indices);
    r.result->cached_tokens = r.kv.cache_protected_len;
    entries.push_back(
        {&r.kv, std::vector<int32_t>(r.tokens.begin() + r.kv.cache_protected_len, r.tokens.end())});
  }
  Result<mem::ForwardBatch> prefill = mem::prepare_extend(memory, entries);
  if (!prefill.is_ok()) {
    for (Running& r : reqs)
      cache.dec_lock_ref(r.kv.last_node);
    return out_of_memory("the batch does not fit the KV cache ({} tokens): {}",
                         runner.max_total_tokens(), prefill.status().message());
  }

  // Prefill.
  mem::ForwardBatch batch = std::move(prefill).value();
  std::vector<float> logits;
  // A forward that fails (a device buffer that cannot grow) frees every request's KV, as running
  // out of KV slots does.
  auto release_all = [&] {
    for (Running& r : reqs) {
      if (r.kv.row != mem::kNoRow) mem::release_kv_cache(memory, r.kv, r.tokens, false);
    }
  };
  if (Status s = runner.forward(batch, logits); !s.is_ok()) {
    release_all();
    return s;
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    Running& r = reqs[i];
    if (r.request->sampling.max_new_tokens == 0) {
      r.result->finish_reason = "length";
      r.done = true;
      continue;
    }
    sample_into(r, std::span<const float>(logits).subspan(i * vocab, vocab), options);
  }
  // Finished requests give their KV to the cache; the others share their prompt now.
  auto retire_finished = [&] {
    const mem::FreeGroup group(host.allocator());
    for (Running& r : reqs) {
      if (r.done && r.kv.row != mem::kNoRow) {
        mem::release_kv_cache(memory, r.kv, r.tokens, /*insert=*/true);
      }
    }
  };
  retire_finished();
  for (Running& r : reqs) {
    if (!r.done) cache.cache_unfinished_req(r.kv, r.request->input_ids);
  }

  // Decode until every request stops.
  while (true) {
    std::vector<Running*> running;
    entries.clear();
    for (Running& r : reqs) {
      if (r.done) continue;
      running.push_back(&r);
      entries.push_back({&r.kv, {r.tokens.back()}});
    }
    if (running.empty()) break;
    Result<mem::ForwardBatch> step = mem::prepare_decode(memory, entries);
    if (!step.is_ok()) {
      release_all();
      return out_of_memory("out of KV cache during decode ({} tokens): {}",
                           runner.max_total_tokens(), step.status().message());
    }
    batch = std::move(step).value();
    if (Status s = runner.forward(batch, logits); !s.is_ok()) {
      release_all();
      return s;
    }
    for (size_t i = 0; i < running.size(); ++i) {
      sample_into(*running[i], std::span<const float>(logits).subspan(i * vocab, vocab), options);
    }
    retire_finished();
  }
  return results;
}

}  // namespace kvserve::engine

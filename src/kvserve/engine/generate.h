// Offline batch generation: admit every request at once (prefix match + lock), one batched
// prefill, then batched decode steps until every request stops. What `kvserve generate` and the
// model tests run; the continuous-batching scheduler (chunked prefill, retraction, admission
// budgets) is the serving engine's.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvserve/engine/sampling_params.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/model_runner.h"

namespace kvserve::engine {

struct GenerateRequest {
  std::vector<int32_t> input_ids;
  SamplingParams sampling;
};

struct GenerateResult {
  std::vector<int32_t> output_ids;
  std::vector<float> output_logprobs;                                // when sampling.return_logprob
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;  // top_logprobs_num each
  std::string finish_reason;                                         // "stop" or "length"
  std::optional<int32_t> matched_stop;                               // the stop token that ended it
  int32_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

struct GenerateOptions {
  std::vector<int32_t> eos_token_ids;  // stop unless ignore_eos (from generation_config.json)
};

// kInvalidArgument for a bad request (empty prompt, token id outside the vocabulary, prompt plus
// max_new_tokens beyond the context, bad sampling parameters), kOutOfMemory when the batch does
// not fit the KV cache. `memory` is the host side of the runner's KV memory (of its kv_shape());
// its prefix cache keeps what the requests computed.
Result<std::vector<GenerateResult>> generate(model::ModelRunner& runner, mem::HostKvMemory& memory,
                                             std::span<const GenerateRequest> requests,
                                             const GenerateOptions& options = {});

}  // namespace kvserve::engine

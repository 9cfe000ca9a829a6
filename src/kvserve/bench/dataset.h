// bench-serving datasets (SGLang's sample_random_requests / sample_sharegpt_requests) and the
// arrival times of a Poisson process (SGLang's get_request).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::bench {

// One request of a benchmark: a prompt (text, or token ids for random-ids on /generate) and how
// many tokens to ask for.
struct DatasetRow {
  std::string prompt;              // empty when input_ids carries the prompt
  std::vector<int32_t> input_ids;  // the prompt as ids (random-ids, sent as /generate input_ids)
  int32_t prompt_len = 0;          // tokens in the prompt, as the dataset counted them
  int32_t output_len = 0;          // max_new_tokens / max_tokens to request
};

// Lengths uniform in [max(int(len * range_ratio), 1), len] (numpy's randint(lo, len + 1)).
struct LengthRange {
  int32_t lo = 1;
  int32_t hi = 1;
};
LengthRange random_length_range(int32_t len, double range_ratio);

struct RandomDatasetOptions {
  int32_t num_prompts = 1000;
  int32_t input_len = 1024;
  int32_t output_len = 1024;
  double range_ratio = 0.0;
  bool return_text = true;  // decode the ids to text; false: keep them as input_ids
};

// Prompts of random token ids drawn uniformly from the tokenizer's vocabulary minus its special
// tokens. With return_text the ids are decoded to text (a server re-encoding the text may count
// a few tokens more or less; prompt_len is the number of ids drawn, as in SGLang). Without a
// tokenizer (ids only) the ids are drawn from [0, fallback_vocab_size).
// kInvalidArgument for a length < 1, a ratio outside [0, 1], or text without a tokenizer.
Result<std::vector<DatasetRow>> sample_random_requests(const RandomDatasetOptions& options,
                                                       const tokenizer::Tokenizer* tokenizer,
                                                       std::mt19937_64& rng,
                                                       int32_t fallback_vocab_size = 10000);

struct ShareGptOptions {
  std::filesystem::path path;
  int32_t num_prompts = 1000;
  std::optional<int32_t> fixed_output_len;  // --sharegpt-output-len
  std::optional<int32_t> context_len;       // --sharegpt-context-len: drop prompt + output over
};

// A ShareGPT JSON file: a list of {"conversations": [{"from", "value"}, ...]} ("conversation" is
// accepted too). Conversations with fewer than two turns are dropped; the first two turns are
// the prompt and the reference output; they are shuffled with `rng`, then taken in order while
// dropping prompts or outputs under 2 tokens and prompt + output over context_len, until
// num_prompts are found (fewer when the file runs out). Output lengths are the reference output's
// token count unless fixed_output_len. kNotFound / kInvalidArgument name the file and the entry.
Result<std::vector<DatasetRow>> sample_sharegpt_requests(const ShareGptOptions& options,
                                                         const tokenizer::Tokenizer& tokenizer,
                                                         std::mt19937_64& rng);

// Send times, in seconds after the start, of `n` requests: all 0 for an infinite rate, else a
// Poisson process (the first at 0, then exponential gaps of mean 1 / rate).
std::vector<double> poisson_arrival_times(int32_t n, double request_rate, std::mt19937_64& rng);

}  // namespace kvserve::bench

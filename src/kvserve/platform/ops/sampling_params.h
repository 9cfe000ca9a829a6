// Parameters of token sampling over rows of f32 logits (fmt-free: CUDA sources include it).
//
// One semantics for the host and the device (ops::sample_rows, engine::sample), so the two can be
// compared token for token. Per row, in this order:
//   1. penalties, from the row's penalty entries (PenaltyEntry): for a token seen in the prompt or
//      the output, repetition (HF style: a positive logit divided by it, a negative one
//      multiplied); then, for a token in the output, frequency * output_count + presence
//      subtracted;
//   2. greedy: the argmax (lowest id on ties); otherwise
//   3. the kept set, over the order (logit desc, id asc): the first top_k tokens; of those the
//      smallest prefix whose probability mass (softmax of logit / temperature over the top-k
//      tokens) reaches top_p, at least one token; of those the tokens whose probability is at least
//      min_p times the most likely one's;
//   4. the draw: u = uniform01(seed, step) * (the kept set's mass); the kept tokens are visited in
//      token-id order and the first whose cumulative mass exceeds u is the token (the last kept
//      one if rounding leaves u at the total). Visiting in id order instead of probability order
//      samples the same distribution and lets the device find the token with one prefix sum
//      instead of a sort.
// uniform01(seed, step) = (splitmix64(splitmix64(seed) ^ step) >> 11) * 2^-53: counter-based, so a
// seeded request draws the same token whatever else is in its batch.
// The chosen token's logprob is log_softmax of the RAW row (before penalties and temperature).
#pragma once

#include <cstdint>

namespace kvserve::ops {

// One token of one row's penalty set: the row's entries are unique by token.
struct PenaltyEntry {
  int32_t token = 0;
  int32_t output_count = 0;  // occurrences in the output (frequency and presence penalties)
  int32_t in_prompt = 0;     // 1 when the token occurs in the prompt (repetition penalty)
};

// Per-row sampling parameters (engine::SamplingParams reduced to what the kernel reads).
struct SampleRowParams {
  float temperature = 1.0f;  // > 0 unless greedy
  int32_t top_k = -1;        // <= 0 or >= vocab: the whole vocabulary
  float top_p = 1.0f;        // in (0, 1]
  float min_p = 0.0f;        // in [0, 1]
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  int32_t greedy = 0;  // 1: the argmax of the penalized row, nothing drawn
  uint64_t seed = 0;
  int64_t step = 0;  // tokens the request has generated so far
};

// out_tokens[r] = the token sampled from row r of `logits` with rows[r]. Rows with penalty entries
// are penalized IN PLACE (the logits are a scratch buffer the forward rewrites every step; no copy
// of a 600 KB row is made). A row without entries costs nothing for penalties. All pointers are in
// the memory of the platform that runs the op (device memory on CUDA).
struct SampleRowsParams {
  float* logits = nullptr;  // [rows, vocab], row stride ld (>= vocab)
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t ld = 0;
  const SampleRowParams* row_params = nullptr;  // [rows]
  // Penalty entries in CSR form: row r's are entries[offsets[r] .. offsets[r + 1]). Offsets null:
  // no row has penalties.
  const int32_t* penalty_offsets = nullptr;       // [rows + 1], or null: no row has penalties
  const PenaltyEntry* penalty_entries = nullptr;  // may be null when every row has zero entries
  int32_t* out_tokens = nullptr;                  // [rows]
  // [rows] the chosen token's raw logprob, or null: not computed. A row with penalty entries gets
  // NaN: its raw logits were rewritten in place (the engine keeps such requests on the host).
  float* out_logprobs = nullptr;
};

}  // namespace kvserve::ops

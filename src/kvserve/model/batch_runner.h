// BatchRunner: what a scheduler needs of a model runner, and nothing more: forwards of a batch
// the scheduler built (logits, greedy ids, or ids sampled where the logits are), and the few
// sizes that shape its decisions. ModelRunner implements it; scheduler tests run a fake.
//
// Data flows one way through it: the batch carries everything the forward reads of the
// scheduler's memory (its rows, new slots and row rewrites, made by make_forward_batch); the
// runner only adds its own device buffers to it (ModelRunner::bind) and never writes the
// scheduler's tables.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/platform/ops/sampling_params.h"

namespace kvserve::model {

// Per-logits-row sampling inputs of forward_sample (host memory; ops/sampling_params.h).
struct SamplingInputs {
  std::span<const ops::SampleRowParams> rows;
  std::span<const int32_t> penalty_offsets;  // [rows + 1], or empty: no row has penalties
  std::span<const ops::PenaltyEntry> penalty_entries;
  // Rows whose raw logits the caller reads after sampling (top-N logprobs; the chosen token's
  // logprob of a penalized row, which the sampler rewrites in place): forward_sample copies them,
  // in this order, into its `raw_logits` [raw_rows.size(), vocab] before the sampler runs.
  std::span<const int32_t> raw_rows;
};

class BatchRunner {
 public:
  virtual ~BatchRunner() = default;

  virtual int32_t vocab_size() const = 0;
  // Positions a request may reach (prompt + output).
  virtual int32_t context_len() const = 0;
  // Whether forward_sample draws on the device (only tokens come back): a scheduler prefers it
  // there to copying logits to the host sampler.
  virtual bool samples_on_device() const = 0;

  // Each forward returns kOutOfMemory (or another error) when it could not run: its outputs are
  // garbage and the batch's new KV slots hold nothing usable; the runner serves the next batch.
  // Logits of batch.logits_indices, [rows, vocab], f32, host.
  virtual Status forward(mem::ForwardBatch& batch, std::vector<float>& logits) = 0;
  // Each logits row's argmax (lowest id on ties).
  virtual Status forward_greedy(mem::ForwardBatch& batch, std::vector<int32_t>& tokens) = 0;
  // Each logits row sampled with `sampling` (ops::sample_rows semantics); `logprobs` gets each
  // chosen token's raw logprob, `raw_logits` the rows sampling.raw_rows names.
  virtual Status forward_sample(mem::ForwardBatch& batch, const SamplingInputs& sampling,
                                std::vector<int32_t>& tokens,
                                std::vector<float>* logprobs = nullptr,
                                std::vector<float>* raw_logits = nullptr) = 0;
};

}  // namespace kvserve::model

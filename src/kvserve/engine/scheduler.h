// Scheduler: continuous batching over one model runner (sglang-notes §5). Engine-thread only.
//
// It owns the host side of the KV memory (mem::HostKvMemory: request-to-token table, slot
// allocator, prefix cache) and depends on the runner only through model::BatchRunner: it builds
// each batch (mem/batch_lifecycle.h) and hands it over; nothing downstream writes its tables.
//
// Each step either runs a prefill batch (prefill has priority) or one decode step of every
// running request:
//   prefill: the chunked request continues first; waiting requests, ordered by the policy, are
//            matched against the prefix cache (at most len - 1 tokens) and admitted while the
//            PrefillAdder's budgets allow; one may be chunked. After the forward, intermediate
//            chunks are cached (cache_unfinished_req); complete prompts sample their first token,
//            share their prompt through the prefix cache and join the running batch.
//   decode:  if the next step needs more KV than is free (after evicting), requests are
//            retracted (fewest outputs first, then longest prompt): their KV is freed and they
//            go back to the waiting queue to recompute input + output; new_token_ratio rises,
//            then decays back while memory suffices.
// Finished requests (stop token, stop string, length) give their KV to the prefix cache; aborted
// ones free it. A forward that fails with an expected error (a device buffer that cannot grow)
// fails the requests of its batch (FinishKind::kError, KV freed) and the next step goes on.
//
// Encoder-decoder models (SchedulerOptions::encoder set; Whisper): a request's prefill takes its
// whole row, [encoder region | prompt + output so far], laid out by mem::prepare_extend with the
// EncoderSplit; the batch carries the request's encoder input (ForwardBatch::encoder_inputs) and
// the runner runs the encoder on it as part of that forward, storing its cross-attention K/V once
// in the encoder region. Such a prefill is never chunked and shares nothing (the engine gives
// these models a ChunkCache); decode steps (mem::prepare_decode with the same split) batch
// continuously across requests as for decoder-only models, a failed forward fails its batch as
// for any other, and a retracted request recomputes its encoder on readmission. Requests with
// logit rules (logit_rules.h) sample on the host.
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvserve/engine/disagg_options.h"
#include "kvserve/engine/metrics.h"
#include "kvserve/engine/req.h"
#include "kvserve/engine/sampler.h"
#include "kvserve/engine/schedule_policy.h"
#include "kvserve/engine/stream_dispatcher.h"
#include "kvserve/mem/allocation.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/batch_runner.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::engine {

struct SchedulerOptions {
  SchedulePolicy policy = SchedulePolicy::kFcfs;
  int64_t chunked_prefill_size = 8192;  // <= 0: no chunking
  int64_t max_prefill_tokens = 16384;
  double schedule_conservativeness = 1.0;
  std::vector<int32_t> eos_token_ids;
  uint64_t seed = 42;  // for the random policy
  // Encoder-decoder models: how rows lay out their encoder regions (the runner's page size and
  // encoder KV layout); nullopt for decoder-only models.
  std::optional<mem::EncoderSplit> encoder;
};

struct SchedulerStats {
  int32_t running = 0;
  int32_t waiting = 0;
  int64_t total_tokens = 0;
  int64_t used_tokens = 0;  // held by requests or locked in the cache
  int64_t available_tokens = 0;
  int64_t evictable_tokens = 0;
  double new_token_ratio = 0;
  int64_t retractions = 0;
  int64_t prefill_batches = 0;
  int64_t decode_steps = 0;
  // Batches whose forward failed (an expected failure, e.g. a device buffer that could not grow):
  // their requests finished with FinishKind::kError and their memory was freed.
  int64_t failed_batches = 0;
  // Where the engine thread's time goes (seconds, cumulative): whole steps (batch selection,
  // memory, forward, sampling, stop checks, streaming out), the model forward, and sampling.
  // step - forward - sample is the scheduler's own overhead.
  double step_seconds = 0;
  double forward_seconds = 0;
  double sample_seconds = 0;
  // The same for decode steps only (the steady state of a serving run).
  double decode_step_seconds = 0;
  double decode_forward_seconds = 0;
  double decode_sample_seconds = 0;
  // CPU time of the engine thread (excludes time it was descheduled): whole steps, the forward
  // (this thread's share), and decode steps minus forward and sampling (the scheduler's own work).
  double step_cpu_seconds = 0;
  double forward_cpu_seconds = 0;
  double decode_scheduler_cpu_seconds = 0;
};

class PrefillDisagg;
class DecodeDisagg;

class Scheduler {
 public:
  // `memory` is the host side of `runner`'s KV memory (of its shape: ModelRunner::kv_shape).
  Scheduler(model::BatchRunner& runner, mem::HostKvMemory memory,
            const tokenizer::Tokenizer* tokenizer, const SchedulerOptions& options,
            Metrics* metrics);
  ~Scheduler();

  void add_request(std::unique_ptr<Req> req);
  // Aborts a request wherever it is; its KV and row are freed now. False if unknown.
  bool abort(const std::string& rid, const std::string& why);
  // Aborts every request (shutdown): each stream gets its final event.
  void abort_all(const std::string& why);
  // One prefill or decode batch; false when there was nothing to run.
  bool step();
  bool idle() const;
  // Prefill/decode disaggregation (docs/disaggregation.md): this scheduler becomes a prefill or
  // a decode server's; requests that carry a DisaggTarget go through its queues, the others are
  // served here alone. Before the first step.
  void enable_disaggregation(DisaggContext context);
  // Whether steps must run even when idle (control messages and heartbeats arrive on their own).
  bool needs_polling() const { return pd_prefill_ != nullptr || pd_decode_ != nullptr; }
  DisaggStats disagg_stats() const;
  // The memory invariants with no request alive (only meaningful when idle).
  Status check_idle_invariants() const;
  // The memory invariants over every request alive now (tests run it after every step).
  Status check_memory_invariants() const;
  SchedulerStats stats() const;
  mem::PrefixCache& cache() { return kv_.cache(); }
  const mem::HostKvMemory& memory() const { return kv_; }
  // The stream events produced since the last call (by steps and aborts), in order; the engine
  // hands them to its StreamDispatcher once per step.
  StreamOutputs take_outputs();
  // Where a step hands its events early, before its forward, when a KV hand-off produced some (a
  // decode server's first token arrives with the prefill's done: without this it would wait for
  // the step's decode forward). The engine sets it to its StreamDispatcher; unset: only
  // take_outputs.
  void set_early_outputs(std::function<void(StreamOutputs)> sink) {
    early_outputs_ = std::move(sink);
  }

 private:
  std::vector<Req*> get_new_batch_prefill();
  void run_extend(const std::vector<Req*>& batch);
  void run_decode();
  bool ensure_decode_memory();
  void retract(Req* r);
  void init_next_round_input(Req& r);
  // A forward that failed (Status from the runner): every request of `batch` finishes with
  // FinishKind::kError naming `why`, its KV and row are freed (not cached), and the scheduler goes
  // on with the others.
  void fail_batch(const std::vector<Req*>& batch, const Status& why);
  // Whether `reqs` sample on the host whatever the device: an encoder-decoder model (its logits
  // come to the host) or a request with logit rules.
  bool host_sampling(const std::vector<Req*>& reqs) const;
  // runner_.forward into logits_ (the encoder first on batch.encoder_inputs), timed
  Status timed_forward(mem::ForwardBatch& batch);
  // runner_.forward_greedy into greedy_tokens_ (argmax on the device), timed as a forward
  Status timed_forward_greedy(mem::ForwardBatch& batch);
  // Whether batches sample on the device (BatchRunner::samples_on_device): every row's token is
  // drawn there; the rows whose logprobs need their raw logits (top-N logprobs, a penalized row's
  // chosen-token logprob: needs_raw_logits) come back to the host alone, not the whole batch.
  bool device_sampling() const;
  // runner_.forward_sample for `reqs` (row i samples reqs[i]) into sampled_, timed as a forward;
  // the raw rows' logprobs are filled on the host (fill_logprobs).
  Status timed_forward_sample(mem::ForwardBatch& batch, const std::vector<Req*>& reqs);
  std::span<const ops::PenaltyEntry> penalty_entries(Req& r);
  void accept_token(Req& r, std::span<const float> logits);  // sample, then accept_sampled
  void accept_sampled(Req& r, const SampledToken& t);
  void check_finished(Req& r);
  void emit(Req& r, StreamEvent event);
  void finish_and_release(Req& r);
  void forget(Req* r);

  // The disaggregation queues work on the scheduler's state directly, on its thread.
  friend class PrefillDisagg;
  friend class DecodeDisagg;

  model::BatchRunner& runner_;
  mem::HostKvMemory kv_;
  mem::PrefixCache& cache_;     // kv_'s
  mem::KvMemory memory_;        // kv_'s view
  const bool encoder_decoder_;  // options_.encoder is set
  const tokenizer::Tokenizer* tokenizer_;
  SchedulerOptions options_;
  Metrics* metrics_;
  std::mt19937_64 rng_;

  std::unordered_map<uint64_t, std::unique_ptr<Req>> reqs_;
  std::deque<Req*> waiting_;
  std::vector<Req*> running_;
  Req* chunked_ = nullptr;

  double init_new_token_ratio_;
  double min_new_token_ratio_;
  double new_token_ratio_decay_;
  double new_token_ratio_;
  int64_t retractions_ = 0;
  int64_t prefill_batches_ = 0;
  int64_t decode_steps_ = 0;
  int64_t failed_batches_ = 0;
  SchedulerStats time_;  // only the *_seconds fields are used
  std::vector<float> logits_;
  std::vector<float> ruled_logits_;  // a row with its request's logit rules applied
  std::vector<int32_t> greedy_tokens_;
  // forward_sample's inputs and outputs, reused every step.
  std::vector<ops::SampleRowParams> sample_rows_;
  PenaltyCsr penalty_csr_;
  std::vector<SampledToken> sampled_;
  std::vector<float> sampled_logprobs_;
  std::vector<int32_t> raw_rows_;  // rows of the sampled batch whose raw logits come back
  std::vector<float> raw_logits_;  // [raw_rows_.size(), vocab]
  StreamOutputs outbox_;
  std::function<void(StreamOutputs)> early_outputs_;
  std::unique_ptr<PrefillDisagg> pd_prefill_;  // a prefill server's hand-offs
  std::unique_ptr<DecodeDisagg> pd_decode_;    // a decode server's
};

}  // namespace kvserve::engine

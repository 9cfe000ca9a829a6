// Engine: the thread-safe front of one model instance (SGLang's Engine / TokenizerManager +
// Scheduler in one process). One engine thread owns all mutable engine state (pools, prefix
// cache, batches) and runs the scheduler; HTTP handlers and `kvserve generate` talk to it only
// through submit / abort / stats, and read results from the request's RequestStream.
// Tokenization and detokenization happen on the callers' threads.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kvserve/checkpoint/config.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/disagg/kv_transport.h"
#include "kvserve/engine/disagg_options.h"
#include "kvserve/engine/logit_rules.h"
#include "kvserve/engine/metrics.h"
#include "kvserve/engine/scheduler.h"
#include "kvserve/model/model_runner.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::engine {

struct EngineOptions {
  std::filesystem::path model_path;
  model::ModelRunnerOptions runner;
  SchedulerOptions scheduler;
  std::string schedule_policy = "fcfs";
  bool disable_radix_cache = false;
  std::string radix_eviction_policy = "lru";
  bool allow_auto_truncate = false;
  bool check_invariants_when_idle = true;
  // Prefill/decode disaggregation (docs/disaggregation.md); mode kNone: a server of its own.
  DisaggOptions disagg;
};

struct SubmitRequest {
  std::vector<int32_t> input_ids;  // encoder-decoder models: the decoder's prompt
  SamplingParams sampling;
  std::vector<std::string> stop;   // stop strings
  int32_t logprob_start_len = -1;  // >= 0 with return_logprob: input token logprobs from here
  std::string rid;                 // empty: the engine makes one
  // Encoder-decoder models: the encoder's input (Whisper: log-mel features [num_mel_bins,
  // input_frames] row-major); null for a text-only request. Decoder-only models: null.
  std::shared_ptr<const std::vector<float>> encoder_input;
  // Rules for the raw logits before sampling; null: the model's (Whisper: its suppress and
  // begin-suppress tokens), none for decoder-only models.
  std::shared_ptr<const LogitRules> logit_rules;
  // Disaggregated serving: the request's other half (bootstrap host, port and room); null: served
  // here alone.
  std::optional<DisaggTarget> disagg;
};

struct EngineStatus {
  SchedulerStats scheduler;
  MetricsSnapshot metrics;
  int64_t invariant_checks = 0;
  int64_t invariant_violations = 0;
  std::string last_violation;
  DisaggStats disagg;
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const EngineOptions& options);
  ~Engine();  // shutdown()

  // Stops the engine thread: every request in flight or queued ends with finish reason abort
  // ("server shutting down") and later submits fail with kUnavailable. Idempotent, any thread.
  void shutdown();

  // kInvalidArgument (empty input, ids outside the vocabulary, prompt over the context unless
  // allow_auto_truncate, prompt that can never fit the KV cache, bad sampling parameters, an
  // encoder input of the wrong size or for a model without an encoder). max_new_tokens is clipped
  // to what the context leaves (an encoder-decoder model's decoder context counts the prompt and
  // every generated token, as transformers' max_length). The rid is set on `request`.
  Result<std::shared_ptr<RequestStream>> submit(SubmitRequest& request);
  // Aborts a request (client gone, or asked); its KV is freed within one scheduler step.
  void abort(const std::string& rid);
  // Drops the prefix cache; kUnavailable while requests are in flight.
  Status flush_cache();

  EngineStatus status() const;
  std::string prometheus_metrics() const;
  const checkpoint::ModelConfig& model_config() const { return config_; }
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const checkpoint::GenerationConfig& generation_config() const { return generation_config_; }
  // Encoder-decoder models (Whisper): their configs; null for decoder-only models. Immutable.
  bool is_encoder_decoder() const { return whisper_config_.has_value(); }
  const checkpoint::WhisperConfig* whisper_config() const {
    return whisper_config_ ? &*whisper_config_ : nullptr;
  }
  const checkpoint::WhisperGenerationConfig* whisper_generation_config() const {
    return whisper_generation_ ? &*whisper_generation_ : nullptr;
  }
  const EngineOptions& options() const { return options_; }
  int32_t context_len() const { return context_len_; }
  int64_t max_total_tokens() const { return max_total_tokens_; }
  int32_t max_running_requests() const { return max_running_requests_; }
  std::string model_name() const;
  std::string summary() const { return summary_; }
  const std::string& attention_backend() const { return attention_backend_; }
  // Disaggregation: this server's role, its control-plane port (prefill) and KV layout.
  DisaggMode disagg_mode() const { return options_.disagg.mode; }
  int32_t disagg_bootstrap_port() const { return bootstrap_port_; }
  const pd::KvLayout& disagg_layout() const { return disagg_layout_; }

 private:
  Engine() = default;
  void loop();
  // The status snapshot /get_server_info and health read, after a step; the memory invariants
  // checked once when idle after work (checked_since_work says whether they were).
  void publish_status(bool& checked_since_work);
  // The transport, the pool's registration and the control plane (create, for a disaggregated
  // server).
  Status init_disaggregation();
  // The staging buffer, when options or the backend ask for one (ctx.staging).
  Status init_staging(DisaggContext& ctx);
  // The device memory the staging buffer will take from the runner's pool (0: none or host).
  static size_t device_staging_bytes(const EngineOptions& options);

  EngineOptions options_;
  checkpoint::ModelConfig config_;
  checkpoint::GenerationConfig generation_config_;
  std::optional<checkpoint::WhisperConfig> whisper_config_;
  std::optional<checkpoint::WhisperGenerationConfig> whisper_generation_;
  std::shared_ptr<const LogitRules> model_logit_rules_;  // what requests get by default
  int64_t encoder_input_size_ = 0;
  int32_t encoder_len_ = 0;       // positions of one encoder output
  int64_t encoder_reserved_ = 0;  // row positions its region takes (page / layout padding)
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  std::unique_ptr<model::ModelRunner> runner_;
  // The disaggregation staging buffer (one of the two): outlives the transport and the
  // scheduler's stagers.
  Buffer staging_device_;
  std::unique_ptr<void, std::function<void(void*)>> staging_host_;
  // Writes into runner_'s KV pool: destroyed before it, after the scheduler.
  std::unique_ptr<disagg::KvTransport> transport_;
  int32_t bootstrap_port_ = 0;
  pd::KvLayout disagg_layout_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<StreamDispatcher> dispatcher_;  // engine thread -> request streams
  Metrics metrics_;
  int32_t context_len_ = 0;
  int64_t max_total_tokens_ = 0;
  int32_t max_running_requests_ = 0;
  std::string summary_;
  std::string attention_backend_;

  // Inbox from other threads.
  struct Command {
    enum Kind { kSubmit, kAbort, kFlush } kind;
    std::unique_ptr<Req> req;
    std::string rid;
    std::shared_ptr<std::promise<Status>> done;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Command> inbox_;
  bool stopping_ = false;
  std::atomic<uint64_t> next_id_{1};
  EngineStatus status_;  // under mu_, refreshed by the engine thread
  std::mutex shutdown_mu_;
  std::thread thread_;
};

}  // namespace kvserve::engine

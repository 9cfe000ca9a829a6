// The transcription service: one worker thread owns the WhisperTranscriber's runner (KV pool,
// rows, allocator: invariant 13, one thread touches model state). HTTP threads prepare the
// features themselves (decode, resample and log-mel are CPU work that needs no model state),
// submit a job and wait on its future; the worker takes up to max_running_requests queued jobs
// at a time and decodes them as one batch (whisper_generate). Each job carries its own
// prompt (language, task), so requests in different languages still share a batch.
//
// shutdown(): the batch in progress finishes; jobs still queued, and later submissions, fail with
// kUnavailable. Every submitted job's future is made ready exactly once.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kvserve/model/whisper_transcriber.h"

namespace kvserve::server {

struct TranscriptionServiceOptions {
  model::WhisperRunnerOptions runner;  // max_running_requests: jobs per batch
  int32_t max_new_tokens = 0;          // 0: until the model's max_length
};

struct TranscriptionStats {
  int64_t requests_served = 0;  // jobs that got their tokens
  int64_t requests_failed = 0;  // jobs failed by the worker (a batch error, or shutdown)
  int64_t batches_served = 0;   // whisper_generate calls
  int64_t largest_batch = 0;
  int64_t waiting = 0;  // queued, not yet taken by the worker
  int64_t running = 0;  // in the batch being decoded
};

class TranscriptionService {
 public:
  static Result<std::unique_ptr<TranscriptionService>> create(
      const std::filesystem::path& model_dir, const TranscriptionServiceOptions& options);
  ~TranscriptionService();  // shutdown()

  // For preparing features and rendering text on the caller's thread (const methods only).
  const model::WhisperTranscriber& transcriber() const { return *transcriber_; }
  const TranscriptionServiceOptions& options() const { return options_; }

  // Queues one clip's request (features, decoder prompt from model::whisper_prompt, temperature
  // and seed); the future yields the generated tokens (a final eos included), or kUnavailable
  // after shutdown, or the batch's error. Thread-safe.
  std::future<Result<std::vector<int32_t>>> submit(model::WhisperRequest request);

  TranscriptionStats stats() const;

  // Stops the worker (see above). Idempotent; thread-safe.
  void shutdown();

  // Tests: while paused the worker takes no new batch, so that queued jobs pile up.
  void set_paused(bool paused);

 private:
  struct Job {
    model::WhisperRequest request;
    std::promise<Result<std::vector<int32_t>>> result;
  };

  TranscriptionService() = default;
  void worker_loop();
  void run_batch(std::vector<Job>& batch);

  TranscriptionServiceOptions options_;
  std::unique_ptr<model::WhisperTranscriber> transcriber_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  bool paused_ = false;
  TranscriptionStats stats_;
  std::thread worker_;
};

}  // namespace kvserve::server

#include "kvserve/server/transcription_service.h"

#include <pthread.h>

#include <algorithm>

#include "kvserve/core/logging.h"

namespace kvserve::server {

Result<std::unique_ptr<TranscriptionService>> TranscriptionService::create(
    const std::filesystem::path& model_dir, const TranscriptionServiceOptions& options) {
  if (options.runner.max_running_requests < 1) {
    return invalid_argument("--max-running-requests must be >= 1, got {}",
                            options.runner.max_running_requests);
  }
  if (options.max_new_tokens < 0) {
    return invalid_argument("max_new_tokens must be >= 0, got {}", options.max_new_tokens);
  }
  std::unique_ptr<TranscriptionService> s(new TranscriptionService());
  s->options_ = options;
  KV_ASSIGN_OR_RETURN(s->transcriber_, model::WhisperTranscriber::load(model_dir, options.runner));
  s->worker_ = std::thread([p = s.get()] {
    pthread_setname_np(pthread_self(), "kvserve-whisper");
    p->worker_loop();
  });
  return s;
}

TranscriptionService::~TranscriptionService() {
  shutdown();
}

std::future<Result<std::vector<int32_t>>> TranscriptionService::submit(
    model::WhisperRequest request) {
  Job job;
  job.request = std::move(request);
  auto future = job.result.get_future();
  {
    std::lock_guard lock(mu_);
    if (!stopping_) {
      queue_.push_back(std::move(job));
      ++stats_.waiting;
      cv_.notify_one();
      return future;
    }
  }
  job.result.set_value(unavailable("the server is shutting down"));
  return future;
}

TranscriptionStats TranscriptionService::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

void TranscriptionService::shutdown() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
}

void TranscriptionService::set_paused(bool paused) {
  std::lock_guard lock(mu_);
  paused_ = paused;
  cv_.notify_all();
}

void TranscriptionService::worker_loop() {
  const auto max_batch = static_cast<size_t>(options_.runner.max_running_requests);
  std::vector<Job> batch;
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || (!paused_ && !queue_.empty()); });
      if (stopping_) break;
      const size_t n = std::min(max_batch, queue_.size());
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      stats_.waiting -= static_cast<int64_t>(n);
      stats_.running = static_cast<int64_t>(n);
    }
    run_batch(batch);
    batch.clear();
  }
  // Stopping: fail what is still queued (no new job can arrive once stopping_ is set).
  std::deque<Job> left;
  {
    std::lock_guard lock(mu_);
    left.swap(queue_);
    stats_.waiting = 0;
    stats_.requests_failed += static_cast<int64_t>(left.size());
  }
  for (Job& job : left)
    job.result.set_value(unavailable("the server is shutting down"));
  if (!left.empty()) KV_LOG_INFO("failed {} queued transcriptions at shutdown", left.size());
}

void TranscriptionService::run_batch(std::vector<Job>& batch) {
  std::vector<model::WhisperRequest> requests;
  requests.reserve(batch.size());
  for (Job& job : batch)
    requests.push_back(std::move(job.request));
  const model::WhisperGenerateOptions gopt{.max_new_tokens = options_.max_new_tokens};
  auto results = model::whisper_generate(transcriber_->runner(), requests, gopt);
  {
    std::lock_guard lock(mu_);
    stats_.running = 0;
    ++stats_.batches_served;
    stats_.largest_batch = std::max<int64_t>(stats_.largest_batch, batch.size());
    if (results.is_ok()) {
      stats_.requests_served += static_cast<int64_t>(batch.size());
    } else {
      stats_.requests_failed += static_cast<int64_t>(batch.size());
    }
  }
  if (!results.is_ok()) {
    KV_LOG_ERROR("a transcription batch of {} failed: {}", batch.size(),
                 results.status().message());
    for (Job& job : batch)
      job.result.set_value(results.status());
    return;
  }
  for (size_t i = 0; i < batch.size(); ++i)
    batch[i].result.set_value(std::move((*results)[i].tokens));
}

}  // namespace kvserve::server

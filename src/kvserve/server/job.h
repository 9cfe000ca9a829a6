// Job: the engine requests behind one HTTP request (prompts x n choices), their output
// collectors, and waiting on all of them. Used from one HTTP worker thread.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "kvserve/engine/engine.h"
#include "kvserve/server/errors.h"
#include "kvserve/server/output_collector.h"
#include "kvserve/server/request_parsing.h"

namespace kvserve::server {

struct Choice {
  size_t spec = 0;  // which prompt
  std::string rid;
  std::shared_ptr<engine::RequestStream> stream;
  std::unique_ptr<OutputCollector> output;
  bool done = false;
};

class Job {
 public:
  using Clock = std::chrono::steady_clock;

  // Submits n choices for every spec; on an error nothing stays submitted.
  static std::variant<std::unique_ptr<Job>, ApiError> start(
      engine::Engine& engine, const std::vector<GenerationSpec>& specs, int32_t n,
      const std::vector<std::string>& rids = {});
  ~Job();

  // Waits up to `timeout` for news; `on_event(choice, new_text, event)` for each event.
  void poll(
      std::chrono::milliseconds timeout,
      const std::function<void(size_t, const std::string&, const engine::StreamEvent&)>& on_event);
  bool all_done() const;
  // Client gone: abort every unfinished choice.
  void abort();

  std::vector<Choice>& choices() { return choices_; }
  const std::vector<Choice>& choices() const { return choices_; }
  const std::vector<GenerationSpec>& specs() const { return specs_; }
  double seconds() const;
  int64_t created_unix() const { return created_; }

  // The job's places under --max-queued-requests (server/admission.h), held while it lives.
  std::shared_ptr<void> admission;

 private:
  explicit Job(engine::Engine& engine) : engine_(engine) {}

  engine::Engine& engine_;
  std::vector<GenerationSpec> specs_;
  std::vector<Choice> choices_;
  Clock::time_point start_ = Clock::now();
  int64_t created_ = 0;
};

}  // namespace kvserve::server

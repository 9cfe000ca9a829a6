// RequestStream: the channel from the engine thread to the one client waiting for a request.
// The engine pushes events (new tokens with their logprobs; the last one carries the finish
// reason); the client side pops them, blocking with a timeout. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kvserve::engine {

// kError: the engine failed the request (an expected failure such as a device buffer that could
// not grow for its batch, not a bug); `message` says what, the server answers with an
// OpenAI-style error (an SSE error chunk when streaming), and the engine keeps serving.
enum class FinishKind { kNone, kStopToken, kStopString, kLength, kAbort, kError };

struct FinishReason {
  FinishKind kind = FinishKind::kNone;
  int32_t matched_token = -1;
  std::string matched_string;
  std::string message;  // for aborts and errors: why

  // OpenAI's finish_reason: "stop", "length", "abort" or "error".
  const char* openai_name() const {
    switch (kind) {
      case FinishKind::kLength:
        return "length";
      case FinishKind::kAbort:
        return "abort";
      case FinishKind::kError:
        return "error";
      default:
        return "stop";
    }
  }
  // Whether the request ended before it could finish (its KV is not worth caching).
  bool cut_short() const { return kind == FinishKind::kAbort || kind == FinishKind::kError; }
};

struct StreamEvent {
  std::vector<int32_t> token_ids;  // new output tokens since the last event
  std::vector<float> logprobs;     // one per new token when requested
  std::vector<std::vector<std::pair<int32_t, float>>> top_logprobs;
  std::vector<float> input_logprobs;  // once, with the first event, when requested
  bool finished = false;
  FinishReason finish;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // total so far
  int32_t cached_tokens = 0;
};

class RequestStream {
 public:
  void push(StreamEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }

  // Waits up to `timeout` for an event; false on timeout.
  bool pop(StreamEvent& out, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out = std::move(events_.front());
    events_.pop_front();
    return true;
  }

  // Waits up to `timeout` for events, then takes every event queued (in order) into `out`
  // (cleared first); false on timeout. One lock and one wake-up however far the reader lags.
  bool pop_all(std::deque<StreamEvent>& out, std::chrono::milliseconds timeout) {
    out.clear();
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
    out.swap(events_);
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamEvent> events_;
};

}  // namespace kvserve::engine

// RequestStream: the channel from the engine thread to the one client waiting for a request.
// The engine pushes events (new tokens with their logprobs; the last one carries the finish
// reason); the client side pops them, blocking with a timeout, or is told of each push through a
// notifier (an event-driven reader: the asynchronous server). Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
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
  using Notifier = std::function<void()>;

  void push(StreamEvent e) {
    std::shared_ptr<const Notifier> notify;
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(e));
      notify = notify_;
    }
    cv_.notify_one();
    if (notify) (*notify)();
  }

  // Calls `notify` (on the pushing thread: the engine's dispatcher; it must be short and must not
  // call back into this stream's push) after every push from now on, and once now if events are
  // already queued. Null stops notifying (a push already running may still call the old one).
  void set_notifier(Notifier notify) {
    std::shared_ptr<const Notifier> n =
        notify ? std::make_shared<const Notifier>(std::move(notify)) : nullptr;
    bool queued = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      notify_ = n;
      queued = !events_.empty();
    }
    if (n && queued) (*n)();
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
  std::shared_ptr<const Notifier> notify_;
};

}  // namespace kvserve::engine

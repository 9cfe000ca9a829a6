// Answers one HTTP request from its Job's engine output, driven by events: each of the job's
// request streams notifies (engine/request_stream.h: set_notifier, on the engine's dispatcher
// thread) and the notification posts one drain to the connection's strand; the drain takes what
// every stream queued (Job::poll with no wait), renders it and writes it. No thread waits and
// nothing polls on a timer.
//
// Back-pressure: while a write is in flight nothing more is rendered; the events wait in their
// streams and the next drain merges them into one piece, so a client that reads slowly costs its
// queued token ids, not a growing text buffer (and one that stops reading for the write timeout
// is gone). A client that goes away aborts the job (its KV is freed by the engine).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "kvserve/server/http_exchange.h"
#include "kvserve/server/job.h"

namespace kvserve::server {

class JobResponder : public std::enable_shared_from_this<JobResponder> {
 public:
  // Renders the SSE text of one merged event of choice i (possibly empty).
  using OnEvent =
      std::function<std::string(size_t, const std::string&, const engine::StreamEvent&)>;
  // What follows the last event (usage chunks, [DONE]).
  using Finish = std::function<std::string()>;
  // The whole body of a finished job.
  using Render = std::function<HttpResponse()>;

  // Server-sent events (text/event-stream, chunked).
  static void stream(std::shared_ptr<Exchange> exchange, std::shared_ptr<Job> job, OnEvent on_event,
                     Finish finish);
  // One answer when every choice has finished: `render()`, or the OpenAI-style error of a choice
  // the engine failed (FinishKind::kError, status 503).
  static void whole(std::shared_ptr<Exchange> exchange, std::shared_ptr<Job> job, Render render);

  ~JobResponder();

 private:
  JobResponder(std::shared_ptr<Exchange> exchange, std::shared_ptr<Job> job)
      : exchange_(std::move(exchange)), job_(std::move(job)) {}

  void begin();
  void schedule();  // any thread: one drain posted until it runs
  void drain();     // on the connection's strand
  void drain_stream();
  void written(bool ok);
  void gone();

  std::shared_ptr<Exchange> exchange_;
  std::shared_ptr<Job> job_;
  OnEvent on_event_;
  Finish finish_;
  Render render_;
  bool streaming_ = false;
  std::atomic<bool> scheduled_{false};
  bool head_sent_ = false;
  bool writing_ = false;
  bool ended_ = false;
};

}  // namespace kvserve::server

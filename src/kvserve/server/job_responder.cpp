#include "kvserve/server/job_responder.h"

#include "kvserve/server/responses.h"

namespace kvserve::server {

void JobResponder::stream(std::shared_ptr<Exchange> exchange, std::shared_ptr<Job> job,
                          OnEvent on_event, Finish finish) {
  std::shared_ptr<JobResponder> r(new JobResponder(std::move(exchange), std::move(job)));
  r->streaming_ = true;
  r->on_event_ = std::move(on_event);
  r->finish_ = std::move(finish);
  r->begin();
}

void JobResponder::whole(std::shared_ptr<Exchange> exchange, std::shared_ptr<Job> job,
                         Render render) {
  std::shared_ptr<JobResponder> r(new JobResponder(std::move(exchange), std::move(job)));
  r->render_ = std::move(render);
  r->begin();
}

JobResponder::~JobResponder() {
  for (Choice& c : job_->choices())
    c.stream->set_notifier(nullptr);
}

void JobResponder::begin() {
  // The exchange holds the responder while the client is there (on_gone); the streams only
  // point at it. The first drain also covers events queued before the notifiers were set.
  exchange_->on_gone([self = shared_from_this()] { self->gone(); });
  std::weak_ptr<JobResponder> weak = weak_from_this();
  for (Choice& c : job_->choices()) {
    c.stream->set_notifier([weak] {
      if (auto self = weak.lock()) self->schedule();
    });
  }
  schedule();
}

void JobResponder::schedule() {
  if (scheduled_.exchange(true)) return;
  auto self = shared_from_this();
  if (exchange_->post([self] { self->drain(); })) return;
  // The server is being destroyed (its io_context is going): this may be the last reference,
  // on the engine's dispatcher thread, and the connection must not be destroyed after its
  // io_context. Keep it (once, at shutdown) instead.
  new std::shared_ptr<JobResponder>(std::move(self));  // NOLINT: deliberately never freed
}

void JobResponder::gone() {
  ended_ = true;
  job_->abort();
  exchange_->on_gone(nullptr);  // drops the exchange's hold on this responder
}

void JobResponder::drain() {
  scheduled_ = false;              // a push from now on posts another drain
  if (ended_ || writing_) return;  // a write in flight drains again when it completes
  if (streaming_) return drain_stream();
  job_->poll(std::chrono::milliseconds(0),
             [](size_t, const std::string&, const engine::StreamEvent&) {});
  if (!job_->all_done()) return;
  ended_ = true;
  // The old server sent its headers before the engine answered, so an engine failure came with
  // status 200 and the error document as the body; clients rely on that body, kept here.
  HttpResponse res;
  if (const std::optional<ApiError> failed = job_error(*job_)) {
    res.body = failed->body();
  } else {
    res = render_();
  }
  exchange_->respond(std::move(res));
  exchange_->on_gone(nullptr);
}

void JobResponder::drain_stream() {
  if (!head_sent_) {
    head_sent_ = true;
    writing_ = true;
    return exchange_->start_stream(200, "text/event-stream", {{"Cache-Control", "no-cache"}},
                                   [self = shared_from_this()](bool ok) { self->written(ok); });
  }
  std::string out;
  job_->poll(std::chrono::milliseconds(0),
             [&](size_t i, const std::string& delta, const engine::StreamEvent& e) {
               out += on_event_(i, delta, e);
             });
  const bool done = job_->all_done();
  if (done) {
    out += finish_();
    ended_ = true;
  }
  if (out.empty()) return;
  writing_ = true;
  exchange_->stream_piece(std::move(out), [self = shared_from_this(), done](bool ok) {
    if (done && ok) {
      self->exchange_->end_stream();
      self->exchange_->on_gone(nullptr);
      return;
    }
    self->written(ok);
  });
}

void JobResponder::written(bool ok) {
  writing_ = false;
  if (!ok) return gone();
  drain();
}

}  // namespace kvserve::server

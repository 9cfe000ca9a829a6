// SGLang's --max-queued-requests: when this many requests already wait for the engine, a new
// generation request is refused with 503 and Retry-After instead of joining the queue.
//
// Waiting requests are counted as the larger of the engine's waiting count (refreshed every
// scheduler step) and the requests this server has in flight minus those the engine runs, so
// that a burst arriving between two steps is counted at once.
#pragma once

#include <atomic>
#include <memory>
#include <variant>

#include "kvserve/engine/engine.h"
#include "kvserve/server/errors.h"

namespace kvserve::server {

class Admission {
 public:
  // Holds its requests' places until destroyed.
  using Ticket = std::shared_ptr<void>;

  Admission(const engine::Engine& engine, int max_queued) : engine_(engine), max_(max_queued) {}

  // A ticket for `requests` engine requests, or the 503.
  std::variant<Ticket, ApiError> admit(int64_t requests);
  int64_t in_flight() const { return live_->load(); }

 private:
  const engine::Engine& engine_;
  const int max_;  // 0: no limit
  std::shared_ptr<std::atomic<int64_t>> live_ = std::make_shared<std::atomic<int64_t>>(0);
};

}  // namespace kvserve::server

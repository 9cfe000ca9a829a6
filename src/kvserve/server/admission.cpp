#include "kvserve/server/admission.h"

#include <fmt/format.h>

#include <algorithm>

namespace kvserve::server {

std::variant<Admission::Ticket, ApiError> Admission::admit(int64_t requests) {
  const int64_t before = live_->fetch_add(requests);
  Ticket ticket(nullptr, [live = live_, requests](void*) { live->fetch_sub(requests); });
  if (max_ <= 0) return ticket;
  const engine::SchedulerStats s = engine_.status().scheduler;
  const int64_t waiting = std::max<int64_t>(s.waiting, before - s.running);
  if (waiting + requests > max_) {
    ApiError e{503,
               fmt::format("The request queue is full ({} waiting, --max-queued-requests {}); "
                           "retry later",
                           waiting, max_),
               "service_unavailable", "", "queue_full"};
    e.retry_after_s = 1;
    return e;  // the ticket gives its places back
  }
  return ticket;
}

}  // namespace kvserve::server

#include "kvserve/pd/kv_poll.h"

namespace kvserve::pd {

std::string_view kv_poll_name(KvPoll s) {
  switch (s) {
    case KvPoll::kFailed:
      return "Failed";
    case KvPoll::kBootstrapping:
      return "Bootstrapping";
    case KvPoll::kWaitingForInput:
      return "WaitingForInput";
    case KvPoll::kTransferring:
      return "Transferring";
    case KvPoll::kSuccess:
      return "Success";
  }
  return "?";
}

bool KvPollState::advance(KvPoll to, Clock::time_point now) {
  if (terminal()) return false;
  if (to != KvPoll::kFailed && static_cast<int>(to) <= static_cast<int>(state_)) return false;
  state_ = to;
  since_ = now;
  return true;
}

bool KvPollState::fail(std::string reason, Clock::time_point now) {
  if (!advance(KvPoll::kFailed, now)) return false;
  reason_ = std::move(reason);
  return true;
}

}  // namespace kvserve::pd

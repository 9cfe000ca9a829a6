// The per-request state of a prefill/decode KV hand-off, as both sides see it (SGLang's KVPoll):
//
//   Bootstrapping    the two sides are finding each other (decode: peer handshake, no slots sent
//                    yet; prefill: the request is here, the decode's destination pages are not)
//   WaitingForInput  the destination pages are known; nothing written yet
//   Transferring     writes are posted (prefill) / expected (decode)
//   Success          every write is visible at the decode side and the first token delivered
//   Failed           the hand-off is over without a result (timeout, abort, dead peer, transport
//                    error); `reason` says which
//
// A state only moves forward; Failed overrides every state but the two terminal ones (a late
// failure report cannot undo a completed transfer, nor a late success revive a failed one). Each
// state records when it was entered, so timeouts can cover WaitingForInput and Transferring alike.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace kvserve::pd {

enum class KvPoll : int8_t {
  kFailed = 0,
  kBootstrapping = 1,
  kWaitingForInput = 2,
  kTransferring = 3,
  kSuccess = 4,
};

std::string_view kv_poll_name(KvPoll s);

class KvPollState {
 public:
  using Clock = std::chrono::steady_clock;

  explicit KvPollState(Clock::time_point now = Clock::now()) : since_(now), created_(now) {}

  KvPoll state() const { return state_; }
  bool terminal() const { return state_ == KvPoll::kSuccess || state_ == KvPoll::kFailed; }
  // When the current state was entered, and when the hand-off began.
  Clock::time_point since() const { return since_; }
  Clock::time_point created() const { return created_; }
  const std::string& reason() const { return reason_; }

  // Moves to `to` when that is forward (or Failed from a non-terminal state); true if it moved.
  // A repeat of the current state, a step back, or anything after a terminal state is ignored.
  bool advance(KvPoll to, Clock::time_point now = Clock::now());
  // advance(kFailed) recording why; the first reason is kept.
  bool fail(std::string reason, Clock::time_point now = Clock::now());

 private:
  KvPoll state_ = KvPoll::kBootstrapping;
  Clock::time_point since_;
  Clock::time_point created_;
  std::string reason_;
};

}  // namespace kvserve::pd

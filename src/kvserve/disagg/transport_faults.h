// What the backends share: drawing injected faults per transfer, and checking a batch of writes
// against both regions.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <random>
#include <span>

#include "kvserve/core/status.h"
#include "kvserve/disagg/kv_transport.h"

namespace kvserve::disagg {

// One posted transfer's injected fate.
struct FaultDraw {
  enum class Kind { kNone, kFail, kDrop };
  Kind kind = Kind::kNone;
  std::chrono::milliseconds delay{0};
};

// Thread-safe; one generator per transport, seeded once (TransportFaults::seed), one draw per post.
class FaultInjector {
 public:
  explicit FaultInjector(const TransportFaults& faults);
  FaultDraw draw();

 private:
  TransportFaults faults_;
  std::mutex mu_;
  std::mt19937_64 rng_;
};

// kInvalidArgument unless every op has a nonzero length and lies inside [0, local_bytes) on the
// source side and [0, remote_bytes) on the destination side (no overflow), and the batch is not
// empty.
Status check_write_ops(std::span<const WriteOp> ops, uint64_t local_bytes, uint64_t remote_bytes);

}  // namespace kvserve::disagg

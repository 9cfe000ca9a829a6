// AllocationFaults: test-only fault injection on device-buffer allocation.
//
// Growing a device buffer on the request path (activation workspaces, attention metadata, page
// lists, split workspaces, sampling buffers) can run out of memory; that is an expected failure
// (kOutOfMemory) which fails the requests of one batch and keeps the server serving. Real device
// memory rarely runs out on cue, so tests arm this hook instead: every Platform::allocate_buffer
// (hence every Platform::empty) asks it first, and an armed fault fails the allocation exactly as
// an exhausted device would. A runner installs the instance its options carry
// (ModelRunnerOptions::allocation_faults); production runners carry none, and the check is one
// null test per allocation (allocations are rare: buffers grow geometrically and are reused).
// Thread-safe: a test arms it from its own thread while the engine thread allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>

namespace kvserve::platform {

class AllocationFaults {
 public:
  // Fails the next `count` allocations of at least `min_bytes` bytes (smaller ones succeed and do
  // not count). Re-arming replaces the previous setting; count 0 disarms.
  void arm(int64_t count, size_t min_bytes = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    remaining_ = count;
    min_bytes_ = min_bytes;
  }
  void disarm() { arm(0); }

  // Called by the platform before each allocation: true when this one must fail (and counts it).
  bool should_fail(size_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    if (remaining_ <= 0 || bytes < min_bytes_) return false;
    --remaining_;
    ++injected_;
    return true;
  }

  // How many allocations failed by injection so far.
  int64_t injected() const {
    std::lock_guard<std::mutex> lock(mu_);
    return injected_;
  }

 private:
  mutable std::mutex mu_;
  int64_t remaining_ = 0;
  size_t min_bytes_ = 1;
  int64_t injected_ = 0;
};

}  // namespace kvserve::platform

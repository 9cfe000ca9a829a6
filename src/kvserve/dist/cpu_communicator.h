// The `cpu` communicator: collectives between processes of one machine through a POSIX
// shared-memory segment (shm_open + mmap), host memory only. Rank 0 creates the segment under a
// unique name; the other ranks attach to it by that name. Each rank has a staging slot of
// `chunk_bytes` in the segment; a collective moves its data through the slots chunk by chunk,
// two barriers per chunk (a sense-reversing barrier on process-shared atomics, waiting on a futex).
// Sums are taken in rank order 0..N-1 by every rank, so every rank gets the same bits.
//
// A dead peer never hangs a call: a waiting rank wakes every few milliseconds, and a rank whose
// process is gone (or a zombie) or a group marked failed (abort) makes every pending and later
// call fail with kUnavailable naming the rank.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "kvserve/dist/communicator.h"

namespace kvserve::dist {

struct CpuCommunicatorOptions {
  std::string name;  // the segment's name ("/kvserve-..."; unique_shm_name())
  int32_t rank = 0;
  int32_t size = 1;
  int64_t chunk_bytes = int64_t{4} << 20;  // each rank's staging slot
  // How long a rank waits for the group to form (rank 0 for every rank to attach, the others for
  // the segment to appear).
  std::chrono::milliseconds attach_timeout{120000};
  // The longest a collective may wait for its peers while they are alive; 0: no limit (an idle
  // worker waits for the next command as long as rank 0 lives).
  std::chrono::milliseconds op_timeout{0};
  // Rank 0, while it waits for the others to attach: an error (a worker it launched exited)
  // stops the wait with that error.
  std::function<Status()> attach_check;
};

// "/kvserve-<pid>-<random hex>": a name no other process group uses.
std::string unique_shm_name();

class CpuCommunicator final : public Communicator {
 public:
  static constexpr int32_t kMaxRanks = 64;

  // Rank 0 creates the segment, the others attach; returns once every rank has attached (the
  // segment's name is then unlinked: nothing is left in /dev/shm whatever happens next).
  static Result<std::unique_ptr<CpuCommunicator>> create(const CpuCommunicatorOptions& options);
  ~CpuCommunicator() override;

  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }
  std::string_view backend() const override { return "cpu"; }
  Status all_reduce_sum(void* data, int64_t count, DType dtype,
                        platform::StreamHandle stream) override;
  Status all_gather(const void* send, void* recv, int64_t bytes_per_rank,
                    platform::StreamHandle stream) override;
  Status broadcast(void* data, int64_t bytes, int32_t root, platform::StreamHandle stream) override;
  void abort(std::string_view reason) override;

  // Every rank arrives before any leaves.
  Status barrier();

 private:
  struct Header;
  CpuCommunicator() = default;
  Status attach(const CpuCommunicatorOptions& o);
  Status failed_status() const;
  // Null when every peer is alive, else the first dead rank's description.
  Status check_peers() const;
  uint8_t* slot(int32_t r) const;

  int32_t rank_ = 0;
  int32_t size_ = 1;
  int64_t chunk_bytes_ = 0;
  std::string name_;
  bool unlinked_ = false;
  std::chrono::milliseconds op_timeout_{0};
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  Header* header_ = nullptr;
  uint8_t* data_ = nullptr;
};

}  // namespace kvserve::dist

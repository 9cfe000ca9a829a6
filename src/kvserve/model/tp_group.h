// TpGroup: rank 0's side of a tensor-parallel group (docs/tensor-parallel.md). It launches ranks
// 1..N-1 as worker processes (`kvserve tp-worker`, posix_spawn of the kvserve binary), forms the
// control channel with them (the cpu communicator over shared memory), sends the setup (checkpoint,
// runner options, which communicator carries the forward's collectives: NCCL's unique id on
// CUDA), and then, before each of rank 0's forwards, the batch the workers run too. Workers
// answer nothing: their part of each forward is the collectives themselves. Owned by rank 0's
// ModelRunner; the scheduler never sees it.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/dist/cpu_communicator.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/model/tensor_parallel.h"

namespace kvserve::model {

struct ModelRunnerOptions;

class TpGroup {
 public:
  // Launches the workers of options.tp_size and waits until every rank has joined the control
  // channel and (CUDA) NCCL. kUnavailable when a worker cannot start or exits first.
  static Result<std::unique_ptr<TpGroup>> launch(const std::filesystem::path& model_dir,
                                                 const ModelRunnerOptions& options);
  // Sends shutdown (if the group still works), then reaps the workers (SIGKILL after a grace
  // period).
  ~TpGroup();

  // What rank 0's model takes part in the group through.
  TensorParallel tp() const;
  // Every rank has created its runner (rank 0 last): a barrier on the control channel.
  Status ready();
  // Sends `batch` to the workers, who run the same forward.
  Status announce_forward(const mem::ForwardBatch& batch);
  // The group is unusable (a worker died, a forward failed): marks it failed so every rank's
  // pending and later collectives fail and the workers exit.
  void fail(std::string_view reason);
  bool failed() const { return failed_; }
  // Why the group failed (kUnavailable naming the first reason); ok while it works.
  const Status& failure() const { return failure_; }
  // Whether the forward's collectives run on the device (NCCL): a dead rank then leaves them, and
  // any wait on rank 0's stream, waiting forever unless the group is aborted.
  bool device_collectives() const { return data_ != nullptr; }
  // The wait watch rank 0's platform runs while it waits on the device (Platform::set_wait_watch):
  // a worker that has exited, or NCCL's asynchronous error, fails the group, which aborts NCCL so
  // that the wait ends. On the engine thread, like every other call here.
  void watch();
  // The workers' process ids, rank r at r - 1 (-1 once reaped).
  const std::vector<pid_t>& workers() const { return workers_; }

 private:
  TpGroup() = default;
  // kUnavailable naming the first worker that has exited (reaped here) and `when` it was seen
  // ("before joining the group", "during a forward").
  Status check_workers(std::string_view when);

  std::vector<pid_t> workers_;  // rank r at r - 1
  std::unique_ptr<dist::CpuCommunicator> control_;
  std::unique_ptr<dist::Communicator> data_;  // NCCL; null when control_ carries the forwards
  std::vector<uint8_t> message_;
  bool failed_ = false;
  Status failure_;
};

}  // namespace kvserve::model

// A worker rank of a tensor-parallel group (`kvserve tp-worker`, launched by rank 0's TpGroup):
// joins the control channel, takes the setup, creates its ModelRunner (its shard, a KV pool of
// its KV heads with rank 0's slot count), then runs every forward rank 0 announces, on a replica
// of the request-to-token rows rebuilt from each batch (its new slots and row rewrites), until
// rank 0 sends shutdown. It answers nothing: its part of each forward is the collectives.
#pragma once

#include <cstdint>
#include <string>

#include "kvserve/core/status.h"

namespace kvserve::model {

struct TpWorkerArgs {
  std::string shm_name;
  int32_t rank = 1;
  int32_t size = 2;
};

// Ok after shutdown; an error when the group fails (rank 0 gone, a collective failed) or this
// rank cannot load (the group is then marked failed with the reason, so rank 0 reports it).
Status run_tp_worker(const TpWorkerArgs& args);

}  // namespace kvserve::model

// A fixed set of requests on one ModelRunner, driven batch by batch without the scheduler: the
// GPU suites use it to run the same extends and decodes on two runners (CUDA vs CPU, graph vs
// eager). Its own host KV memory (a ChunkCache); every request's row and slots are released on
// destruction.
#pragma once

#include <cstdint>
#include <vector>

#include "kvserve/mem/forward_batch.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/model/model_runner.h"

namespace kvserve::test_support {

class ModelSession {
 public:
  ModelSession(model::ModelRunner& runner, size_t num_requests);
  ~ModelSession();
  ModelSession(const ModelSession&) = delete;
  ModelSession& operator=(const ModelSession&) = delete;

  // Appends add[b] to request b (a prefill, an extend over what it has, or with `decode` one
  // token), allocates their slots and returns the batch, not yet run.
  mem::ForwardBatch batch(const std::vector<std::vector<int32_t>>& add, bool decode);
  // The same, run: the logits of each request's last token, [n, vocab].
  std::vector<float> logits(const std::vector<std::vector<int32_t>>& add, bool decode);

 private:
  model::ModelRunner& runner_;
  mem::HostKvMemory memory_;
  std::vector<mem::KvReqState> kv_;
  std::vector<std::vector<int32_t>> tokens_;
};

}  // namespace kvserve::test_support

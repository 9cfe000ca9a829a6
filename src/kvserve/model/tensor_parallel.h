// Tensor parallelism of a decoder model (docs/tensor-parallel.md): what one rank of a group of
// `size` holds, as SGLang's Llama/Qwen2 shard it. q/k/v by heads (KV heads replicated when the
// group is larger than them), o_proj and down_proj row-parallel (their outputs all-reduced),
// gate/up column-parallel, embedding and lm_head by vocabulary rows (a masked lookup summed over
// the ranks; each rank's logits columns summed into the full rows). Norms are replicated.
#pragma once

#include <cstdint>

#include "kvserve/checkpoint/config.h"
#include "kvserve/core/status.h"
#include "kvserve/dist/communicator.h"

namespace kvserve::model {

// The group a model instance is one rank of. Null communicators: one rank (no tensor
// parallelism).
struct TensorParallel {
  // The forward's collectives (nccl on CUDA, cpu on the CPU), on the runner's stream.
  dist::Communicator* comm = nullptr;
  // Host-memory collectives at startup (the cpu communicator of the control channel); null: comm
  // (which must then take host memory).
  dist::Communicator* control = nullptr;

  int32_t rank() const { return comm != nullptr ? comm->rank() : 0; }
  int32_t size() const { return comm != nullptr ? comm->size() : 1; }
  dist::Communicator* host_comm() const { return control != nullptr ? control : comm; }
};

struct TpShard {
  int32_t rank = 0;
  int32_t size = 1;
  int32_t heads = 0;  // query heads of this rank: [head_start, head_start + heads)
  int32_t head_start = 0;
  int32_t kv_heads = 0;  // KV heads of this rank: [kv_head_start, kv_head_start + kv_heads)
  int32_t kv_head_start = 0;
  int64_t inter = 0;  // MLP columns: [inter_start, inter_start + inter)
  int64_t inter_start = 0;
  int64_t vocab = 0;  // embedding / lm_head rows: [vocab_start, vocab_start + vocab)
  int64_t vocab_start = 0;
};

// Rank `rank` of `size` of the model in `config`. kInvalidArgument naming --tp-size when the
// group does not divide the attention heads, the KV heads (or they it), the intermediate size,
// or is larger than the vocabulary.
Result<TpShard> make_tp_shard(const checkpoint::ModelConfig& config, int32_t rank, int32_t size);

// The config with this rank's heads, KV heads and intermediate size (what its workspace, KV pool
// and attention see).
checkpoint::ModelConfig shard_config(const checkpoint::ModelConfig& config, const TpShard& shard);

}  // namespace kvserve::model

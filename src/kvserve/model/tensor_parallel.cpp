#include "kvserve/model/tensor_parallel.h"

#include <algorithm>

namespace kvserve::model {

Result<TpShard> make_tp_shard(const checkpoint::ModelConfig& c, int32_t rank, int32_t size) {
  if (size < 1) return invalid_argument("--tp-size must be >= 1, got {}", size);
  KV_CHECK(rank >= 0 && rank < size, "rank {} of {}", rank, size);
  if (c.num_attention_heads % size != 0) {
    return invalid_argument(
        "--tp-size {} does not divide the model's {} attention heads (num_attention_heads)", size,
        c.num_attention_heads);
  }
  const int32_t kv = c.num_key_value_heads;
  if (kv % size != 0 && size % kv != 0) {
    return invalid_argument(
        "--tp-size {} and the model's {} KV heads (num_key_value_heads): one must divide the "
        "other",
        size, kv);
  }
  if (c.intermediate_size % size != 0) {
    return invalid_argument("--tp-size {} does not divide the model's intermediate_size {}", size,
                            c.intermediate_size);
  }
  if (c.vocab_size < size) {
    return invalid_argument("--tp-size {} is larger than the vocabulary ({})", size, c.vocab_size);
  }
  TpShard s;
  s.rank = rank;
  s.size = size;
  s.heads = c.num_attention_heads / size;
  s.head_start = rank * s.heads;
  if (kv >= size) {
    s.kv_heads = kv / size;
    s.kv_head_start = rank * s.kv_heads;
  } else {
    // Fewer KV heads than ranks: each is replicated on size / kv consecutive ranks, the ones
    // whose query heads read it.
    s.kv_heads = 1;
    s.kv_head_start = rank / (size / kv);
  }
  s.inter = c.intermediate_size / size;
  s.inter_start = rank * s.inter;
  // Equal slices of ceil(vocab / size) rows, the last one shorter.
  const int64_t per_rank = (c.vocab_size + size - 1) / size;
  s.vocab_start = std::min<int64_t>(int64_t{rank} * per_rank, c.vocab_size);
  s.vocab = std::min<int64_t>(per_rank, c.vocab_size - s.vocab_start);
  if (s.vocab <= 0) {
    return invalid_argument("--tp-size {}: rank {} would hold no vocabulary rows of {}", size, rank,
                            c.vocab_size);
  }
  return s;
}

checkpoint::ModelConfig shard_config(const checkpoint::ModelConfig& config, const TpShard& shard) {
  checkpoint::ModelConfig c = config;
  c.num_attention_heads = shard.heads;
  c.num_key_value_heads = shard.kv_heads;
  c.intermediate_size = shard.inter;
  return c;
}

}  // namespace kvserve::model

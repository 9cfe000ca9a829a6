// Parameters of paged prefill / extend attention (fmt-free: CUDA sources include it).
//
// Many query tokens per request attend to the request's KV, read in place from the pool through
// the CSR page table of paged decode (paged_decode_params.h):
//   KV position t of request b lives in slot page_ids[page_indptr[b] + t / page_size] * page_size
//   + t % page_size, for t < kv_lens[b].
// Queries are ragged: request b's tokens are rows [qo_indptr[b], qo_indptr[b + 1]) of q and out.
// kv_lens[b] counts the cached prefix and the new tokens, whose K/V are already in the pool.
// Causal: query i of request b (q_len = qo_indptr[b + 1] - qo_indptr[b]) sees KV positions
// [0, kv_lens[b] - q_len + i]; not causal (cross-attention): all kv_lens[b] positions. A query
// that sees no position (kv_lens[b] == 0) gets a zero output.
// GQA: query head h reads KV head h / (num_q_heads / num_kv_heads).
#pragma once

#include <cstdint>

namespace kvserve::ops {

// Tile shapes of the tensor-core kernel (platform/cuda/paged_prefill.cu). The rows of a tile are
// (query token, query head of the GQA group) pairs, so one K/V tile load serves the whole group.
enum class PrefillVariant : int32_t {
  kAuto = 0,
  kM64W4 = 1,   // 64 rows, 4 warps of 16 rows, Q fragments in registers
  kM128W8 = 2,  // 128 rows, 8 warps of 16 rows, Q fragments in registers
  kM128W4 = 3,  // 128 rows, 4 warps of 2 x 16 rows, Q fragments re-read from shared memory
};

struct PagedPrefillParams {
  const void* q = nullptr;        // [total_q, num_q_heads, head_dim] bf16
  const void* k_cache = nullptr;  // [num_slots, num_kv_heads, head_dim] bf16
  const void* v_cache = nullptr;
  const int32_t* qo_indptr = nullptr;    // [batch + 1]
  const int32_t* page_indptr = nullptr;  // [batch] (or [batch + 1]): where b's page list starts
  const int32_t* page_ids = nullptr;
  const int32_t* kv_lens = nullptr;  // [batch]
  void* out = nullptr;               // [total_q, num_q_heads, head_dim] bf16
  int32_t batch = 0;
  int32_t total_q = 0;  // qo_indptr[batch], known on the host (sizes the grid)
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;   // 64 or 128
  int32_t page_size = 1;  // 1, 16, 32, 64 or 128
  bool causal = true;
  float sm_scale = 0;  // 1 / sqrt(head_dim) usually
  PrefillVariant variant = PrefillVariant::kAuto;
};

}  // namespace kvserve::ops

// Parameters of paged decode attention (fmt-free: CUDA sources include it).
//
// One new query token per request attends to its whole KV, read in place from the pool through
// a CSR page table (SGLang's kv_indptr / kv_indices at page granularity):
//   token t of request b lives in slot page_ids[page_indptr[b] + t / page_size] * page_size
//   + t % page_size, for t < seq_lens[b].
// Contiguous K/V (page_ids == nullptr, page_size 1): token t of request b is row
// page_indptr[b] + t of k_cache / v_cache, as in a varlen kernel's cu_seqlens_k layout. This is
// the gather path's read (cuda-ragged: the request's slots copied into one buffer): the same
// kernels, the same tiles and splits, only the address differs, so its output equals the in-place
// read of the same K/V bit for bit (seed 000: FlashAttention's paged and varlen entries are one
// kernel).
// Pool rows are [num_slots, num_kv_heads, head_dim] (MHATokenToKVPool's layout) in bf16, or in
// fp8 (e4m3 / e5m2) with the layer's scales: the value a kernel uses is stored * k_scale (V:
// v_scale), the pool's convention (kv_pool.h: stored = value / scale). Kernels fold k_scale into
// the softmax scale and v_scale into the output rather than multiplying every element.
// GQA: query head h reads KV head h / (num_q_heads / num_kv_heads).
//
// Split-KV: each request's tokens are cut into num_splits chunks of tokens_per_split; with more
// than one split every chunk writes a partial output and its log-sum-exp to the workspace, and a
// merge step combines them. seq_lens[b] == 0 gives a zero output (the empty-KV guard).
// With min_tokens_per_split > 0 each request picks its own chunks instead: as many splits as keep
// at least min_tokens_per_split tokens each, at most num_splits, of equal length (the tensor-core
// kernel: whole 64-position tiles dealt out evenly, decode_tc_split_range); the blocks of the
// splits it does not use find no tokens and write an empty partial (log-sum-exp -inf, weight 0 in
// the merge). The launch then depends only on num_splits, not on the lengths: a decode graph
// captured for a batch size replays any lengths (model/decode_graph_runner.h).
// Split counters (split_counters, the tensor-core kernel only): one uint32 per (query, KV head),
// zero before the first launch. Each split block adds one after writing its partial; the block
// that brings the count to num_splits merges the partials into `out` and sets the counter back to
// zero, so the next launch (or graph replay) finds them zero again and no merge kernel runs.
// Without them (nullptr) a second kernel merges. A plan says how many it needs
// (PagedDecodePlan::workspace_counters, ops/paged_decode.h: a zeroed buffer of their own).
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

#if !defined(KVSERVE_HOST_DEVICE)
#if defined(__CUDACC__)
#define KVSERVE_HOST_DEVICE __host__ __device__
#else
#define KVSERVE_HOST_DEVICE
#endif
#endif

namespace kvserve::ops {

struct PagedDecodeParams {
  const void* q = nullptr;        // [batch, num_q_heads, head_dim] bf16
  const void* k_cache = nullptr;  // [num_slots, num_kv_heads, head_dim] kv_dtype
  const void* v_cache = nullptr;
  DType kv_dtype = DType::kBF16;  // kBF16, kFP8E4M3 or kFP8E5M2
  float k_scale = 1.0f;           // fp8: value = stored * k_scale (1 for bf16)
  float v_scale = 1.0f;
  // Where query b's page list starts in page_ids: a CSR indptr works as is, and queries of one
  // request (the tokens of an extend) may share a list, each seeing its own seq_lens[b] prefix.
  const int32_t* page_indptr = nullptr;  // [batch] (or [batch + 1])
  const int32_t* page_ids = nullptr;     // nullptr: contiguous K/V (page_size 1)
  const int32_t* seq_lens = nullptr;     // [batch]
  void* out = nullptr;                   // [batch, num_q_heads, head_dim] bf16
  float* partial_out = nullptr;        // [batch, num_q_heads, num_splits, head_dim], num_splits > 1
  float* partial_lse = nullptr;        // [batch, num_q_heads, num_splits] (log2 domain)
  uint32_t* split_counters = nullptr;  // [batch, num_kv_heads], zero between launches (or nullptr)
  int32_t batch = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;   // 64, 80, 96, 128 or 256
  int32_t page_size = 1;  // 1, 16, 32, 64 or 128
  int32_t num_splits = 1;
  int32_t tokens_per_split = 0;      // >= the longest sequence when num_splits == 1
  int32_t min_tokens_per_split = 0;  // > 0: per-request splits (tokens_per_split unused)
  float sm_scale = 0;                // 1 / sqrt(head_dim) usually
  // Sliding window and soft-capping, as attention::AttentionLayer (attention/backend.h) defines
  // them: a query at position p sees KV positions [p - window_left, p] (-1: all it may see);
  // score = logit_softcap * tanh(score / logit_softcap) after the scaling (0: none).
  int32_t window_left = -1;
  float logit_softcap = 0.0f;
  // Programmatic dependent launch (platform/cuda/pdl.cuh); the op dispatch sets it from the
  // platform's KernelSwitches::pdl.
  bool pdl = true;
  // With pdl: seq_lens, page_indptr, page_ids and every K/V row before each query's last
  // position were written by work that completed before the kernel launched ahead of this one
  // (true of a decode step: the step's metadata is uploaded before its first kernel and only the
  // new token's row is stored by the kernel before the attention). The tensor-core kernel then
  // reads them before waiting for that kernel (pdl.cuh), overlapping its tail.
  bool stable_before_wait = false;
};

// The first KV position a query at position `seq_len` - 1 reads under a window (window_left < 0:
// none, 0), and how many positions it reads: the decode kernels' range [window_first, seq_len).
KVSERVE_HOST_DEVICE inline int32_t window_first(int32_t seq_len, int32_t window_left) {
  return window_left >= 0 && seq_len - 1 - window_left > 0 ? seq_len - 1 - window_left : 0;
}
KVSERVE_HOST_DEVICE inline int32_t windowed_len(int32_t seq_len, int32_t window_left) {
  return seq_len - window_first(seq_len, window_left);
}

}  // namespace kvserve::ops

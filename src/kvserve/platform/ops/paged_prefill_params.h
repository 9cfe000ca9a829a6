// Parameters of paged prefill / extend attention (fmt-free: CUDA sources include it).
//
// Many query tokens per request attend to the request's KV, read in place from the pool through
// the CSR page table of paged decode (paged_decode_params.h):
//   KV position t of request b lives in slot page_ids[page_indptr[b] + t / page_size] * page_size
//   + t % page_size, for t < kv_lens[b].
// Contiguous K/V (page_ids == nullptr, page_size 1): position t of request b is row
// page_indptr[b] + t (paged_decode_params.h: the gather path, bit-identical to the in-place read).
// Queries are ragged: request b's tokens are rows [qo_indptr[b], qo_indptr[b + 1]) of q and out.
// Rows of q and of the K/V caches are dense ([heads, head_dim]) unless q_stride / kv_stride give
// another distance between consecutive rows, in elements (a multiple of 8, 16-byte aligned bases):
// Whisper's encoder reads its packed q|k|v rows in place (stride 3 x d_model).
// kv_lens[b] counts the cached prefix and the new tokens, whose K/V are already in the pool.
// Causal: query i of request b (q_len = qo_indptr[b + 1] - qo_indptr[b]) sees KV positions
// [0, kv_lens[b] - q_len + i]; not causal (cross-attention): all kv_lens[b] positions. A query
// that sees no position (kv_lens[b] == 0) gets a zero output.
// GQA: query head h reads KV head h / (num_q_heads / num_kv_heads).
#pragma once

#include <cstdint>

#include "kvserve/core/dtype.h"

namespace kvserve::ops {

// The prefill kernels and their tile shapes: the mma.sync kernel's three tiles
// (platform/cuda/paged_prefill.cu) and the Hopper kernel (paged_prefill_sm90.cu). The rows of a
// tile are (query token, query head of the GQA group) pairs, so one K/V tile load serves the
// whole group.
enum class PrefillVariant : int32_t {
  kAuto = 0,
  kM64W4 = 1,         // 64 rows, 4 warps of 16 rows, Q fragments in registers
  kM128W8 = 2,        // 128 rows, 8 warps of 16 rows, Q fragments in registers
  kM128W4 = 3,        // 128 rows, 4 warps of 2 x 16 rows, Q fragments re-read from shared memory
  kSm90 = 4,          // sm_90a: wgmma, a producer warpgroup and two consumers of 64 rows each
  kMma = 5,           // the mma.sync kernel, its tile by shape (never the sm_90a kernel)
  kSm90PingPong = 6,  // kSm90 with the two consumers taking turns at the tensor cores
};

struct PagedPrefillParams {
  const void* q = nullptr;        // [total_q, num_q_heads, head_dim] bf16
  const void* k_cache = nullptr;  // [num_slots, num_kv_heads, head_dim] kv_dtype
  const void* v_cache = nullptr;
  DType kv_dtype = DType::kBF16;  // kBF16, kFP8E4M3 or kFP8E5M2 (paged_decode_params.h)
  float k_scale = 1.0f;           // fp8: value = stored * k_scale (1 for bf16)
  float v_scale = 1.0f;
  const int32_t* qo_indptr = nullptr;    // [batch + 1]
  const int32_t* page_indptr = nullptr;  // [batch] (or [batch + 1]): where b's page list starts
  const int32_t* page_ids = nullptr;     // nullptr: contiguous K/V (page_size 1)
  const int32_t* kv_lens = nullptr;      // [batch]
  void* out = nullptr;                   // [total_q, num_q_heads, head_dim] bf16
  int64_t q_stride = 0;                  // elements between query rows; 0: num_q_heads * head_dim
  int64_t kv_stride = 0;  // elements between K (and V) rows; 0: num_kv_heads * head_dim
  // Rows of k_cache and v_cache: the extent of the sm_90a kernel's TMA tensor maps (0: unknown,
  // that kernel then gathers every tile by cp.async).
  int64_t num_slots = 0;
  int32_t batch = 0;
  int32_t total_q = 0;  // qo_indptr[batch], known on the host (sizes the grid)
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;   // 64, 80, 96, 128 or 256
  int32_t page_size = 1;  // 1, 16, 32, 64 or 128
  bool causal = true;
  float sm_scale = 0;  // 1 / sqrt(head_dim) usually
  // Sliding window and soft-capping, as attention::AttentionLayer (attention/backend.h) defines
  // them: a query at position p sees KV positions [p - window_left, p] (-1: all it may see);
  // score = logit_softcap * tanh(score / logit_softcap) after the scaling (0: none).
  int32_t window_left = -1;
  float logit_softcap = 0.0f;
  PrefillVariant variant = PrefillVariant::kAuto;
  // sm_90a kernel: K/V tiles by TMA where runs of slots allow (contiguous K/V, pages of 8+);
  // false: cp.async everywhere (KernelSwitches::prefill_tma, set at the op dispatch).
  bool tma = true;
};

// --- Decode on tensor cores (ops::paged_decode_tc, platform/cuda/paged_prefill.cu) ------------
// One query token per "query" b of a PagedDecodeParams batch (paged_decode_params.h: the decode
// kernel's inputs, workspace layout and split modes): the GQA group's heads (<= 8) are the N
// dimension of the products, KV positions the M dimension, 64 positions per shared-memory stage.

#if !defined(KVSERVE_HOST_DEVICE)
#if defined(__CUDACC__)
#define KVSERVE_HOST_DEVICE __host__ __device__
#else
#define KVSERVE_HOST_DEVICE
#endif
#endif

inline constexpr int32_t kDecodeTcTileTokens = 64;   // K/V positions per pipeline stage
inline constexpr int32_t kDecodeTcThreads = 128;     // 4 warps, 16 positions of every stage each
inline constexpr int32_t kDecodeTcMaxCtasPerSm = 4;  // register budget: 128 per thread

// Elements of a K/V (or Q) row in the tensor-core kernels' shared memory: head_dim rounded up to
// a multiple of 64, so that the XOR swizzle of a row's 16-byte chunks (chunk ^ row % 8) stays
// inside the row (head dims 80 and 96 take 128-element rows; their last chunks are never read).
KVSERVE_HOST_DEVICE constexpr int32_t tc_smem_row_elems(int32_t head_dim) {
  return (head_dim + 63) / 64 * 64;
}

// Shared memory one block may opt into on the H200 (227 KiB).
inline constexpr int64_t kMaxSmemPerBlock = int64_t{227} * 1024;

// Shared memory of one block: `stages` K and V tiles of kDecodeTcTileTokens rows of
// tc_smem_row_elems(head_dim) elements of kv_bytes (2: bf16; 1: fp8, plus one K and one V tile of
// bf16 that the fp8 bytes are widened into before ldmatrix).
KVSERVE_HOST_DEVICE constexpr int64_t decode_tc_smem_bytes(int32_t head_dim, int32_t stages,
                                                           int32_t kv_bytes = 2) {
  const int64_t row = tc_smem_row_elems(head_dim);
  return int64_t{stages} * 2 * kDecodeTcTileTokens * row * kv_bytes +
         (kv_bytes == 1 ? int64_t{2} * kDecodeTcTileTokens * row * 2 : 0);
}

// Blocks of the kernel that fit on one Hopper SM (228 KiB of shared memory, 1 KiB reserved per
// block), at most kDecodeTcMaxCtasPerSm; the kernel's __launch_bounds__ asks for this many and the
// split plan counts on it. The bf16 count: the fp8 kernel needs less shared memory (as many or
// more blocks fit) but keeps the bf16 kernel's register budget and plan.
KVSERVE_HOST_DEVICE constexpr int32_t decode_tc_ctas_per_sm(int32_t head_dim, int32_t stages) {
  const int64_t per_block = decode_tc_smem_bytes(head_dim, stages) + 1024;
  const int64_t n = int64_t{228} * 1024 / per_block;
  return n < 1 ? 1 : (n > kDecodeTcMaxCtasPerSm ? kDecodeTcMaxCtasPerSm : static_cast<int32_t>(n));
}

struct DecodeSplitRange {
  int32_t begin = 0;
  int32_t end = 0;  // begin == end: an empty split (log-sum-exp -inf, weight 0 in the merge)
};

// The KV positions [begin, end) that split `split` of a query over `seq_len` positions reads in the
// tensor-core decode kernel, for PagedDecodeParams' two split modes (with a sliding window the
// kernel cuts the windowed_len positions the query reads and offsets them by window_first):
//   * num_splits <= 1: everything;
//   * min_tokens_per_split > 0 (per-request splits): the query uses
//     used = min(num_splits, ceil(seq_len / min_tokens_per_split)) splits (at least 1) and deals
//     its ceil(seq_len / 64) tiles out to them as evenly as whole tiles allow (the first
//     tiles % used splits take one tile more), so every used split is non-empty and the longest
//     holds ceil(tiles / used) tiles; the splits past `used` are empty. The cut depends on
//     seq_len and num_splits only, so a decode graph's plan (num_splits for the longest possible
//     request) cuts every request as the eager plan does;
//   * otherwise every query is cut alike in tokens_per_split chunks, and the last split takes
//     whatever a short tokens_per_split would leave over.
// The ranges of splits 0..num_splits-1 are disjoint, in order, and cover [0, seq_len).
KVSERVE_HOST_DEVICE inline DecodeSplitRange decode_tc_split_range(int32_t seq_len, int32_t split,
                                                                  int32_t num_splits,
                                                                  int32_t tokens_per_split,
                                                                  int32_t min_tokens_per_split) {
  if (num_splits <= 1) return {0, seq_len};
  if (min_tokens_per_split > 0) {
    int64_t used = (int64_t{seq_len} + min_tokens_per_split - 1) / min_tokens_per_split;
    used = used < 1 ? 1 : (used > num_splits ? num_splits : used);
    if (split >= used) return {seq_len, seq_len};
    const int64_t tiles = (int64_t{seq_len} + kDecodeTcTileTokens - 1) / kDecodeTcTileTokens;
    const int64_t q = tiles / used;
    const int64_t r = tiles % used;
    const int64_t first = split * q + (split < r ? split : r);
    const int64_t last = first + q + (split < r ? 1 : 0);
    const int64_t begin = first * kDecodeTcTileTokens;
    const int64_t end = last * kDecodeTcTileTokens;
    if (begin >= seq_len) return {seq_len, seq_len};
    return {static_cast<int32_t>(begin), static_cast<int32_t>(end < seq_len ? end : seq_len)};
  }
  int64_t len = tokens_per_split;
  if (len < 1) len = 1;
  const int64_t begin = int64_t{split} * len;
  if (begin >= seq_len) return {seq_len, seq_len};
  const int64_t end = split == num_splits - 1 || begin + len > seq_len ? seq_len : begin + len;
  return {static_cast<int32_t>(begin), static_cast<int32_t>(end)};
}

}  // namespace kvserve::ops

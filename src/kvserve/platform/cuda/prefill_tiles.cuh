// The query tiles of the paged prefill kernels (paged_prefill.cu: mma.sync; paged_prefill_sm90.cu:
// wgmma). A tile is kBlockM rows, a row one (query token, query head of the GQA group) pair. The
// grid's x walks the tiles from the last (the longest causal rows) to the first; request b owns
// tiles [start(b), start(b + 1)) with start(b) = qo_indptr[b] * group / kBlockM + b: at least its
// ceil(q_len * group / kBlockM) tiles with no host-built list (group-independent metadata); a
// spare tile has no rows and exits at once.
#pragma once

#include <cstdint>

#include "kvserve/platform/ops/paged_prefill_params.h"

namespace kvserve::platform::cuda {

// The grid's x: every request's tiles, spare ones included.
inline int64_t prefill_query_tiles(const ops::PagedPrefillParams& p, int block_m) {
  const int group = p.num_q_heads / p.num_kv_heads;
  return static_cast<int64_t>(p.total_q) * group / block_m + p.batch;
}

// Tile `tile` (0 = the first): its request and where its rows start.
struct PrefillTile {
  int b = 0;      // the request
  int q0 = 0;     // its first query row in q / out
  int q_len = 0;  // its query tokens
  int rows = 0;   // q_len * group
  int m0 = 0;     // the tile's first row among the request's rows; >= rows: a spare tile
};

template <int kBlockM>
__device__ __forceinline__ PrefillTile locate_prefill_tile(const ops::PagedPrefillParams& p,
                                                           int group, int tile) {
  auto start = [&](int b) {
    return static_cast<int>(static_cast<int64_t>(p.qo_indptr[b]) * group / kBlockM) + b;
  };
  // The last b with start(b) <= tile (start is increasing).
  int lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (start(mid) <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  PrefillTile t;
  t.b = lo;
  t.q0 = p.qo_indptr[lo];
  t.q_len = p.qo_indptr[lo + 1] - t.q0;
  t.rows = t.q_len * group;
  t.m0 = (tile - start(lo)) * kBlockM;
  return t;
}

}  // namespace kvserve::platform::cuda

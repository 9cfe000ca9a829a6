// The cluster sampler's row machinery (sampling_bins.cu holds the kernel and states the
// algorithm): its constants, the CTAs of one row (RowCluster) and the segment each owns, the
// shared-memory layout, the stream of a segment into shared memory and the passes over it, and
// the distance / bin of a logit below the row's max.
#pragma once

#include <cooperative_groups.h>

#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kvserve/platform/cuda/sampling_radix.cuh"
#include "kvserve/platform/cuda/wgmma_sm90.cuh"

// Internal linkage, as sampling_radix.cuh's: sampling_bins.cu is the one includer.
namespace kvserve::platform::cuda {
namespace {

constexpr int kWarps = kThreads / 32;
constexpr int kTile = 4 * kThreads;  // logits per block-wide float4 step
constexpr int kTileBytes = kTile * static_cast<int>(sizeof(float));
constexpr int kStreamUnroll = 8;  // tiles whose global loads are in flight together
constexpr int kNumBins = 4096;
constexpr float kBinsPerNat = 128.0f;
constexpr float kRange = kNumBins / kBinsPerNat;  // distances at or beyond it overflow
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kBinsPerThread = kNumBins / kThreads;
constexpr int kCap = 2048;  // gathered tokens at most
constexpr int kCapPerThread = kCap / kThreads;
constexpr int kChunk = 128;  // ids per warp per tile
constexpr int kMaxChunks = 4096;
constexpr int kChunksPerThread = kMaxChunks / kThreads;
constexpr int kMaxCluster = 8;        // the portable cluster size
constexpr int kMaxSegmentTiles = 28;  // 224 KiB: more than a CTA's shared memory holds
static_assert(kNumBins % kThreads == 0 && kCap % kThreads == 0 && kMaxChunks % kThreads == 0);
static_assert(kChunk * kWarps == kTile);

// The CTAs that share one row: a thread block cluster on sm_90 (the launch sets its size), a
// cluster of one elsewhere.
struct RowCluster {
  __device__ static int rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return static_cast<int>(cooperative_groups::this_cluster().block_rank());
#else
    return 0;
#endif
  }
  __device__ static int size() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return static_cast<int>(cooperative_groups::this_cluster().num_blocks());
#else
    return 1;
#endif
  }
  // A barrier of every thread of the cluster; memory written before it (shared or global) is
  // visible to every CTA of the cluster after it.
  __device__ static void sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cooperative_groups::this_cluster().sync();
#else
    __syncthreads();
#endif
  }
  // `p` (this CTA's shared memory) in CTA r's shared memory.
  template <typename T>
  __device__ static T* peer(T* p, int r) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    return cooperative_groups::this_cluster().map_shared_rank(p, static_cast<unsigned>(r));
#else
    (void)r;
    return p;
#endif
  }
};

// The tiles [tile0, tile0 + ntiles) of a row that one CTA owns: the first `ncached` of them in
// shared memory (`cache`, kTile per tile; -inf past the row's end), the rest read again from the
// row (`row`, global memory: L2) by each pass. Either source gives the same values, so a row's
// arithmetic does not depend on how much of it the CTA caches.
struct Segment {
  const float* cache;
  int tile0;
  int ntiles;
  int vocab;
  const float* row = nullptr;
  int ncached = 0;
  bool vec = false;  // `row` is 16-byte aligned
};

// CTA `rank`'s tiles of a row of `vocab` logits split over `size` CTAs.
__device__ __forceinline__ void segment_tiles(int vocab, int size, int rank, int* tile0,
                                              int* ntiles) {
  const int total = (vocab + kTile - 1) / kTile;
  const int per = (total + size - 1) / size;
  *tile0 = min(total, rank * per);
  *ntiles = min(total, *tile0 + per) - *tile0;
}

// A thread's bins: tokens, and lower and upper bounds of their mass.
struct BinSums {
  int c = 0;
  double lo = 0;
  double hi = 0;
};
struct AddBinSums {
  __device__ BinSums operator()(const BinSums& a, const BinSums& b) const {
    return {a.c + b.c, a.lo + b.lo, a.hi + b.hi};
  }
};
using BlockScanB = cub::BlockScan<BinSums, kThreads, cub::BLOCK_SCAN_WARP_SCANS>;

// Sums over a row that must not depend on how the row is cut into segments (the cluster size
// follows the batch): each group of 4 logits' f32 sum (its own logits in id order) rounded to a
// multiple of 2^-40 and added as an integer, which is exact and associative, so any cut and any
// order of the partials give the same bits. A group's sum is at most 4 (probabilities relative
// to the row's max), so a row of kMaxChunks * kChunk logits sums to less than 2^59.
using Fixed = unsigned long long;
constexpr float kFixedScale = 0x1p40f;
constexpr double kFixedUnit = 0x1p-40;
__device__ __forceinline__ Fixed to_fixed(float group_sum) {
  return __float2ull_rn(group_sum * kFixedScale);
}
__device__ __forceinline__ double from_fixed(Fixed x) {
  return static_cast<double>(x) * kFixedUnit;
}
using BlockReduceX = cub::BlockReduce<Fixed, kThreads>;
static_assert(double{kMaxChunks} * kChunk * kFixedScale < 0x1p63, "a row's fixed sum fits");

// One CTA's partial results, read by the other CTAs of its cluster.
struct Partial {
  float max;         // of the segment (-FLT_MAX if none)
  int arg;           // lowest id holding it (INT_MAX if none)
  Fixed lse;         // the draw: sum of exp(logit - row max) over the segment (a logprob's row)
  Fixed z;           // step 2: sum of exp((logit - row max) / temperature) (top-p, no top-k)
  int gathered;      // step 3: tokens gathered
  Fixed k_mass;      // step 3: exact mass before the k-th token's bin
  Fixed range_mass;  // step 3: exact mass before the top-p range
};

struct BinsSmem {
  union {
    Smem radix;  // the fallback's (sampling_radix.cuh); its cub storage is its own
    struct {
      int local[kNumBins];  // this CTA's counts (read by the cluster)
    } count;
    // The parts other CTAs read (count.local, sel.local, chunk.local) are laid out so that what a
    // CTA writes next never overlaps what a slower peer may still be reading: sel.local lies past
    // count.local (a CTA gathers while peers still sum its counts) and chunk.local lies before
    // sel.local (a CTA sums its chunks while peers still merge its gathered keys), which saves
    // the cluster barriers that would otherwise wait for every peer's reads.
    struct {
      unsigned long long keys[kCap];   // (~order key) << 32 | id: ascending = (logit desc, id asc)
      unsigned long long local[kCap];  // this CTA's gathered keys (read by the cluster)
    } sel;
    struct {
      float local[kMaxChunks];  // this CTA's chunk sums (read by CTA 0)
      float all[kMaxChunks];    // CTA 0: the row's
    } chunk;
  } u;
  union {
    BlockReduceF::TempStorage rf;
    BlockReduceD::TempStorage rd;
    BlockReduceI::TempStorage ri;
    BlockReduceX::TempStorage rx;
    BlockScanD::TempStorage sd;
    BlockScanB::TempStorage sb;
  } cub;
  Partial part;
  // Broadcast slots (written by one thread, read by all after a barrier).
  float f;
  double d[4];
  int i[8];
};

// The logit of an order key (order_key's inverse; -0 comes back as +0).
__device__ __forceinline__ float key_logit(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

// Logits i0 .. i0 + 3 (-inf past the row's end: a padding logit is an impossible token, outside
// every bin and of no mass, so the passes over bins need no bounds checks).
__device__ __forceinline__ void load4(const float* x, int n, int i0, bool vec, float (&v)[4]) {
  if (vec && i0 + 3 < n) {
    const float4 q = *reinterpret_cast<const float4*>(x + i0);
    v[0] = q.x;
    v[1] = q.y;
    v[2] = q.z;
    v[3] = q.w;
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j)
      v[j] = i0 + j < n ? x[i0 + j] : -INFINITY;
  }
}

// The segment's tiles [first, ntiles) from its row in global memory, kStreamUnroll tiles' loads
// per thread in flight together: each cached tile (t < ncached) into `cache`, and f(i0, v) for
// each of this thread's groups of 4, tiles ascending.
template <typename F>
__device__ __forceinline__ void stream_loads(float* cache, const Segment& seg, int first,
                                             const F& f) {
  const int own = 4 * static_cast<int>(threadIdx.x);
  for (int t0 = first; t0 < seg.ntiles; t0 += kStreamUnroll) {
    float v[kStreamUnroll][4];
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (t0 + u < seg.ntiles) {
        load4(seg.row, seg.vocab, (seg.tile0 + t0 + u) * kTile + own, seg.vec, v[u]);
      }
    }
#pragma unroll
    for (int u = 0; u < kStreamUnroll; ++u) {
      if (t0 + u < seg.ntiles) {
        if (t0 + u < seg.ncached) {
          *reinterpret_cast<float4*>(cache + (t0 + u) * kTile + own) =
              make_float4(v[u][0], v[u][1], v[u][2], v[u][3]);
        }
        f((seg.tile0 + t0 + u) * kTile + own, v[u]);
      }
    }
  }
}

// Step 1's stream: the segment's logits from its row in global memory, its first ncached tiles
// into `cache`, f(i0, v) for each of this thread's groups of 4 logits on the way (ids i0 .. i0 + 3,
// -inf past the row's end; i0 = kTile * tile + 4 * thread, tiles ascending). On sm_90 with a
// 16-byte aligned row, one thread issues a bulk copy (TMA) per tile straight into shared memory,
// each counted on the tile's mbarrier, and the block reads each tile as it lands: the whole segment
// is in flight at once, through no registers and no L1. (On an H100 the change that brought it,
// with two others, moved the sampler bench by -6 % to +5 % against kStreamUnroll per-thread loads:
// the passes after the stream take the time, docs/perf/2026-12-06-cluster-sampler.md.) Otherwise
// kStreamUnroll tiles' loads per thread are in flight together. `bars`: kMaxSegmentTiles mbarriers
// in shared memory.
template <typename F>
__device__ __forceinline__ void stream_segment(float* cache, uint64_t* bars, const Segment& seg,
                                               const F& f) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (seg.vec) {
    const float* x = seg.row;
    const int own = 4 * static_cast<int>(threadIdx.x);
    if (threadIdx.x == 0) {
      for (int t = 0; t < seg.ncached; ++t)
        mbar_init(static_cast<uint32_t>(__cvta_generic_to_shared(bars + t)), 1);
      fence_mbarrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      // The penalties' generic-proxy writes (apply_penalties, before the barrier above) before
      // the bulk copies' async-proxy reads of the same row.
      fence_proxy_async_global();
      for (int t = 0; t < seg.ncached; ++t) {
        const int begin = (seg.tile0 + t) * kTile;
        // Whole 16-byte groups only; the row's last 1-3 logits are read below by their thread.
        const uint32_t bytes = static_cast<uint32_t>(min(kTile, seg.vocab - begin) & ~3) * 4u;
        const uint32_t bar = static_cast<uint32_t>(__cvta_generic_to_shared(bars + t));
        if (bytes == 0) {
          mbar_arrive(bar);
          continue;
        }
        mbar_arrive_expect_tx(bar, bytes);
        bulk_load(static_cast<uint32_t>(__cvta_generic_to_shared(cache + t * kTile)), x + begin,
                  bytes, bar);
      }
    }
    for (int t = 0; t < seg.ncached; ++t) {
      mbar_wait(static_cast<uint32_t>(__cvta_generic_to_shared(bars + t)), 0);
      const int i0 = (seg.tile0 + t) * kTile + own;
      float4* slot = reinterpret_cast<float4*>(cache + t * kTile + own);
      float v[4];
      if (i0 + 3 < seg.vocab) {
        const float4 q = *slot;
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
      } else {
        // The group the bulk copy left out (the row's end): from global memory, -inf past it.
        load4(x, seg.vocab, i0, false, v);
        *slot = make_float4(v[0], v[1], v[2], v[3]);
      }
      f(i0, v);
    }
    // The uncached tiles after (tiles in order: the sums' order is the fully cached kernel's).
    stream_loads(cache, seg, seg.ncached, f);
    return;
  }
#endif
  (void)bars;
  stream_loads(cache, seg, 0, f);
}

// f(tile, i0, v) for each of this thread's groups of 4 cached logits (global tile index, ids
// i0 .. i0 + 3), tiles ascending.
template <typename F>
__device__ __forceinline__ void for_each_tile(const Segment& seg, const F& f) {
  const int own = 4 * static_cast<int>(threadIdx.x);
  for (int t = 0; t < seg.ncached; ++t) {
    const float4 q = *reinterpret_cast<const float4*>(seg.cache + t * kTile + own);
    const float v[4] = {q.x, q.y, q.z, q.w};
    f(seg.tile0 + t, (seg.tile0 + t) * kTile + own, v);
  }
  for (int t = seg.ncached; t < seg.ntiles; ++t) {
    const int i0 = (seg.tile0 + t) * kTile + own;
    float v[4];
    load4(seg.row, seg.vocab, i0, seg.vec, v);
    f(seg.tile0 + t, i0, v);
  }
}

// Inclusive prefix sum over the warp's lanes (one fixed order: the draw pass and the rescan of a
// chunk get bit-equal sums).
__device__ __forceinline__ float warp_inclusive_sum(float v) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += y;
  }
  return v;
}

// Distance below the max in temperature units, and its probability relative to the max token.
struct Dist {
  float max;
  float inv_t;
  __device__ float operator()(float v) const { return (max - v) * inv_t; }
};
__device__ __forceinline__ float dist_prob(float d) {
  return d == d ? exp2f(d * -kLog2e) : 0.0f;  // a NaN logit weighs nothing
}
__device__ __forceinline__ int dist_bin(float d) {
  return d < kRange ? static_cast<int>(d * kBinsPerNat) : kNumBins;  // NaN: overflow
}

// exp(-1 / kBinsPerNat): the ratio of neighbouring bin edges' probabilities.
constexpr double kBinRatio = 0.9922179382602435;

}  // namespace
}  // namespace kvserve::platform::cuda

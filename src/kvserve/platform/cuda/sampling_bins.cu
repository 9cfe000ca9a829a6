// Token sampling on the device, the default kernel (ops::sample_rows; the semantics are in
// ops/sampling_params.h, the CPU implementation in ops/sampling.cpp is the reference, and
// sampling.cu keeps the radix-select kernel for A/B). Each row is split over a cluster of CTAs of
// 512 threads (a thread block cluster on sm_90, up to 8 CTAs; one CTA elsewhere): CTA r owns a
// contiguous run of 2048-logit tiles (its segment) and keeps what its shared memory holds of it
// (the rest is read again from L2 by each pass; with two CTAs per SM, the kernel of half the
// registers, half the shared memory each), and the cluster's CTAs exchange partial results
// through distributed shared memory. The cluster size and the CTAs per SM follow the batch
// (choose_launch: one wave of rows if the device holds it, the fewest tiles per SM slot), and a
// row's result does not depend on them: every sum over a row is fixed-point (Fixed: per group of
// 4 logits, added as integers), the rest are counts, maxima and per-chunk scans. No sort of the
// row and no float64 atomics:
//   1. penalties in place (each CTA its segment's tokens); the segment streamed into shared memory
//      (one bulk copy per tile; per-thread float4 loads for a row that is not 16-byte aligned)
//      with its max and argmax (lowest id on ties). The CTAs' partials combine into the row's
//      (every CTA reads all of them); a greedy row stops here (after a pass for the log-sum-exp
//      when it wants its logprob);
//   2. top-k / top-p: each CTA counts its tokens in 4096 bins of the distance below the max,
//      d = (max - logit) / temperature in [0, 32) (1/128 nat each; the rest overflow), and every
//      CTA sums the cluster's counts (and, for top-p without top-k, the row's mass exp(-d), the
//      base of its target). Bins follow the order (logit desc, id asc), so the scan of
//      the counts names the bin holding the k-th token, and the counts times each bin's
//      probability bounds (exp(-d) at its two edges, widened for f32 rounding) bound the mass
//      before every bin, which places the top-p target (p * M_k, M_k the top-k mass or the row's
//      mass) to the few bins it can fall in;
//   3. each CTA gathers its tokens of those bins ((key, id) packed in 64 bits) with the exact
//      masses before them, and every CTA merges the cluster's (at most 2048 in all); up to 512
//      are ordered by rank counting, more by a bitonic sort; a block scan of their masses places
//      the k-th token (its key and id, and M_k) and the first token whose cumulative mass reaches
//      p * M_k exactly as the host does. Steps 2-3 run alike in every CTA of the cluster, on the
//      same merged data, so all of them reach the same boundaries. A row whose bins cannot decide
//      (the boundary beyond d = 32, more than 2048 tokens to gather, or a target landing in an
//      ungathered bin by rounding) takes the radix select over the whole row in every CTA
//      (sampling_radix.cuh);
//   4. the draw: each CTA sums the kept mass (the two boundaries and min-p) of each of its
//      128-id chunks (a warp scan: warp w of tile t owns ids [2048 t + 128 w, + 128)); CTA 0
//      collects the row's chunk sums, one block scan over them places u * kept mass in a chunk,
//      and one warp rescans that chunk for the first kept token in id order whose cumulative mass
//      exceeds it (the last kept one if rounding leaves none). The same pass sums exp(logit -
//      max) for a row that wants its logprob.
// The draw and the kept set are the host's (one u per (seed, step), kept tokens visited in id
// order), so seeded tokens equal the host's and the radix kernel's except where a draw or a
// threshold falls within float rounding of a boundary. Probabilities are exp(-d) in f32; sums
// over the row are fixed-point at 2^-40 (exact in their integer adds), scans of sorted positions
// and of chunk sums f64.
#include <algorithm>
#include <array>
#include <mutex>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/sampling_cluster.cuh"
#include "kvserve/platform/cuda/sampling_radix.h"

namespace kvserve::platform::cuda {
namespace {

// Steps 2-3 of the header: the top-k and top-p boundaries by bins, or false when the bins cannot
// decide (the caller then runs the radix select). Every thread of every CTA of the cluster calls
// it and returns the same.
__device__ bool bin_boundaries(const Segment& seg, const ops::SampleRowParams& rp, const Dist& dist,
                               BinsSmem& s, Boundary* k_out, Boundary* p_out) {
  const int vocab = seg.vocab;
  const bool use_k = rp.top_k > 0 && rp.top_k < vocab;
  const bool use_p = rp.top_p < 1.0f;
  const int tid = static_cast<int>(threadIdx.x);
  const int csize = RowCluster::size();
  // Top-p without top-k measures its target against the row's mass (z), summed here over the
  // row's max in the probabilities the later passes use.
  const bool want_z = use_p && !use_k;
  // This CTA's counts (and mass), then the cluster's.
  for (int b = tid; b < kNumBins; b += kThreads)
    s.u.count.local[b] = 0;
  __syncthreads();
  Fixed z_sum = 0;
  for_each_tile(seg, [&](int, int, const float(&v)[4]) {
    float z4 = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = dist(v[j]);
      const int b = dist_bin(d);
      if (b < kNumBins) atomicAdd(&s.u.count.local[b], 1);
      if (want_z) z4 += dist_prob(d);
    }
    if (want_z) z_sum += to_fixed(z4);
  });
  if (want_z) {
    const Fixed z = BlockReduceX(s.cub.rx).Sum(z_sum);
    if (tid == 0) s.part.z = z;
  }
  RowCluster::sync();
  Fixed z_fixed = 0;  // the cluster's partials (integers: any order gives the same)
  if (want_z) {
    for (int r = 0; r < csize; ++r)
      z_fixed += RowCluster::peer(&s.part, r)->z;
  }
  const double z_total = from_fixed(z_fixed);
  // Thread t owns bins [kBinsPerThread * t, + kBinsPerThread): their counts summed over the
  // cluster (16-byte loads, every CTA's issued before any is added).
  static_assert(kBinsPerThread == 8);
  int c[kBinsPerThread] = {};
#pragma unroll
  for (int r = 0; r < kMaxCluster; ++r) {
    if (r < csize) {
      const int4* src = reinterpret_cast<const int4*>(RowCluster::peer(s.u.count.local, r) +
                                                      kBinsPerThread * tid);
      const int4 a = src[0];
      const int4 b = src[1];
      c[0] += a.x;
      c[1] += a.y;
      c[2] += a.z;
      c[3] += a.w;
      c[4] += b.x;
      c[5] += b.y;
      c[6] += b.z;
      c[7] += b.w;
    }
  }
  // (No barrier for the peers' reads of count.local: the gather writes sel.local, past it.)

  // Thread t owns bins [kBinsPerThread * t, + kBinsPerThread). A bin's tokens have probabilities
  // within [exp(-(b + 1) / kBinsPerNat), exp(-b / kBinsPerNat)] (widened for f32 rounding): lower
  // and upper bounds of the mass before each bin, which place the top-p target to a few bins; the
  // exact masses come from the gather pass.
  // walk_bins(f): f(j, lower, upper) for this thread's bins in order, with the bounds of bin j's
  // mass. The edges' probabilities: one exp per thread, then products by kBinRatio (the same chain
  // in every walk, so the bounds agree bit for bit; its rounding is far inside the widening).
  const double e_first = exp(-(kBinsPerThread * tid) / static_cast<double>(kBinsPerNat));
  const auto walk_bins = [&](const auto& f) {
    double e_hi = e_first;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const double e_lo = e_hi * kBinRatio;
      f(j, c[j] * e_lo * (1 - 1e-5), c[j] * e_hi * (1 + 1e-5));
      e_hi = e_lo;
    }
  };
  BinSums mine{};
  walk_bins([&](int j, double lo_w, double hi_w) {
    mine = AddBinSums{}(mine, {c[j], lo_w, hi_w});
  });
  // One block scan of the three (count, lower and upper mass bounds): `bins_before` is everything
  // before this thread's first bin.
  BinSums bins_before;
  BinSums bins_total;
  BlockScanB(s.cub.sb).ExclusiveScan(mine, bins_before, BinSums{}, AddBinSums{}, bins_total);
  if (tid == 0) {
    s.i[0] = -1;            // the k-th token's bin
    s.i[1] = kNumBins;      // first bin the target can fall in
    s.i[2] = kNumBins - 1;  // last bin the target can fall in
    s.i[3] = 0;             // tokens before the first of those bins
    s.i[4] = 0;             // tokens before the k-th token's bin
  }
  __syncthreads();

  // The k-th token's bin: the one whose count range holds rank k.
  if (use_k) {
    BinSums acc = bins_before;
    walk_bins([&](int j, double lo_w, double hi_w) {
      if (acc.c < rp.top_k && rp.top_k <= acc.c + c[j]) {
        s.i[0] = kBinsPerThread * tid + j;
        s.i[4] = acc.c;
        s.d[1] = acc.lo;         // at least the mass before it
        s.d[2] = acc.hi + hi_w;  // at most the mass through it
      }
      acc = AddBinSums{}(acc, {c[j], lo_w, hi_w});
    });
  }
  __syncthreads();
  const int k_bin = use_k ? s.i[0] : kNumBins;
  if (use_k && k_bin < 0) return false;  // the k-th token is beyond the bins
  // The bins the top-p target p * M_k can fall in: from the first whose upper bound through it
  // reaches the least target to the first whose lower bound through it reaches the largest
  // (M_k between the mass before the k-th bin and the mass through it; the row's total mass
  // without top-k), widened for rounding.
  if (use_p) {
    const double p = rp.top_p;
    const double t_lo = (use_k ? p * s.d[1] : p * z_total) * (1.0 - 1e-5);
    const double t_hi = (use_k ? p * s.d[2] : p * z_total) * (1.0 + 1e-5);
    BinSums acc = bins_before;
    walk_bins([&](int j, double lo_w, double hi_w) {
      const int b = kBinsPerThread * tid + j;
      if (c[j] > 0 && acc.hi + hi_w >= t_lo && (b == 0 || acc.hi < t_lo)) {
        s.i[1] = b;
        s.i[3] = acc.c;
      }
      if (c[j] > 0 && acc.lo + lo_w >= t_hi && acc.lo < t_hi) s.i[2] = b;
      acc = AddBinSums{}(acc, {c[j], lo_w, hi_w});
    });
  }
  __syncthreads();
  const int lo_bin = use_p ? s.i[1] : kNumBins;
  const int hi_bin = use_p ? min(s.i[2], k_bin) : -1;
  if (use_p && lo_bin > hi_bin) return false;
  const int k_before = s.i[4];
  const int range_before = s.i[3];
  // The bins whose tokens are gathered: [lo_bin, hi_bin] and the k-th token's (two compares per
  // logit in the gather pass; an overflow bin, b == kNumBins, is neither).
  const unsigned range_bins = static_cast<unsigned>(max(0, hi_bin - lo_bin + 1));
  const int k_gather = use_k ? k_bin : -1;
  const auto in_range = [&](int b) { return static_cast<unsigned>(b - lo_bin) < range_bins; };
  const auto gathered = [&](int b) { return in_range(b) || b == k_gather; };
  // Tokens to gather, and how many of them fall in [lo_bin, hi_bin] (they sort first).
  int n_all = 0;
  int n_range = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int b = kBinsPerThread * tid + j;
    if (gathered(b)) n_all += c[j];
    if (in_range(b)) n_range += c[j];
  }
  __syncthreads();
  n_all = BlockReduceI(s.cub.ri).Sum(n_all);
  if (tid == 0) s.i[5] = n_all;
  __syncthreads();
  n_range = BlockReduceI(s.cub.ri).Sum(n_range);
  if (tid == 0) {
    s.i[6] = n_range;
    s.i[7] = 0;  // gather cursor
  }
  __syncthreads();
  n_all = s.i[5];
  n_range = s.i[6];
  if (n_all > kCap || n_all <= 0) return false;

  // Gather (each CTA its segment's tokens), then sort ascending by (~key, id), i.e. (logit desc,
  // id asc); on the way, the exact masses before the k-th token's bin and before the range (the
  // few likeliest tokens).
  auto& sel = s.u.sel;
  const int k_lim = use_k ? k_bin : 0;
  const int range_lim = use_p ? lo_bin : 0;
  const int before_lim = max(k_lim, range_lim);
  Fixed k_fixed = 0;
  Fixed range_fixed = 0;
  for_each_tile(seg, [&](int, int i0, const float(&v)[4]) {
    float k4 = 0.0f;
    float range4 = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = dist(v[j]);
      const int b = dist_bin(d);
      if (b < before_lim) {
        const float pr = dist_prob(d);
        if (b < k_lim) k4 += pr;
        if (b < range_lim) range4 += pr;
      }
      if (gathered(b)) {
        const int slot = atomicAdd(&s.i[7], 1);
        if (slot < kCap) {
          sel.local[slot] = (static_cast<unsigned long long>(~order_key(v[j])) << 32) |
                            static_cast<uint32_t>(i0 + j);
        }
      }
    }
    if (k4 != 0.0f) k_fixed += to_fixed(k4);
    if (range4 != 0.0f) range_fixed += to_fixed(range4);
  });
  k_fixed = BlockReduceX(s.cub.rx).Sum(k_fixed);
  if (tid == 0) s.part.k_mass = k_fixed;
  __syncthreads();
  range_fixed = BlockReduceX(s.cub.rx).Sum(range_fixed);
  if (tid == 0) {
    s.part.range_mass = range_fixed;
    s.part.gathered = min(s.i[7], kCap);
  }
  RowCluster::sync();
  // The cluster's gathered tokens, in CTA order, and its masses (integers: any order).
  k_fixed = 0;
  range_fixed = 0;
  int merged = 0;
  for (int r = 0; r < csize; ++r) {
    const Partial* pr = RowCluster::peer(&s.part, r);
    const int n = pr->gathered;
    const unsigned long long* keys = RowCluster::peer(sel.local, r);
    for (int q = tid; q < n && merged + q < kCap; q += kThreads)
      sel.keys[merged + q] = keys[q];
    merged += n;
    k_fixed += pr->k_mass;
    range_fixed += pr->range_mass;
  }
  const double k_mass_before = from_fixed(k_fixed);
  const double range_mass_before = from_fixed(range_fixed);
  // (No barrier for the peers' reads of sel.local: the sort writes sel.keys and the draw
  // chunk.local, both before it; every CTA has read it by the draw's barrier.)
  __syncthreads();
  if (merged != n_all) return false;  // cannot happen: the counts and the gather bin alike
  int n_pow2 = 1;
  while (n_pow2 < n_all)
    n_pow2 <<= 1;
  if (n_all <= kThreads) {
    // Few tokens: each one's rank is the count of smaller keys (keys are unique by id).
    const unsigned long long e = tid < n_all ? sel.keys[tid] : 0;
    int rank = 0;
    if (tid < n_all) {
      for (int j = 0; j < n_all; ++j)
        rank += sel.keys[j] < e ? 1 : 0;
    }
    __syncthreads();
    if (tid < n_all) sel.keys[kCap / 2 + rank] = e;
    __syncthreads();
    if (tid < n_all) sel.keys[tid] = sel.keys[kCap / 2 + tid];
    n_pow2 = 0;  // sorted: no bitonic stage
  } else {
    for (int j = n_all + tid; j < n_pow2; j += kThreads)
      sel.keys[j] = ~0ull;
  }
  __syncthreads();
  for (int k = 2; k <= n_pow2; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      for (int i = tid; i < n_pow2; i += kThreads) {
        const int partner = i ^ j;
        if (partner > i) {
          const unsigned long long a = sel.keys[i];
          const unsigned long long b = sel.keys[partner];
          if ((a > b) == ((i & k) == 0)) {
            sel.keys[i] = b;
            sel.keys[partner] = a;
          }
        }
      }
      __syncthreads();
    }
  }

  // Thread t owns sorted positions [kCapPerThread * t, + kCapPerThread): their masses, the block
  // scan of them, and each position's rank and mass before it in the whole row.
  float pr[kCapPerThread];
  double local = 0;
#pragma unroll
  for (int j = 0; j < kCapPerThread; ++j) {
    const int q = kCapPerThread * tid + j;
    pr[j] =
        q < n_all ? dist_prob(dist(key_logit(~static_cast<uint32_t>(sel.keys[q] >> 32)))) : 0.0f;
    local += pr[j];
  }
  double before = 0;
  double total = 0;
  BlockScanD(s.cub.sd).ExclusiveSum(local, before, total);
  // The mass of the sorted positions before the first one of the k-th bin (those of the range
  // come first when the k-th bin is not inside it).
  const bool k_in_range = lo_bin <= k_bin && k_bin <= hi_bin;
  if (tid == 0) s.d[0] = 0;
  __syncthreads();
  {
    double acc = before;
#pragma unroll
    for (int j = 0; j < kCapPerThread; ++j) {
      if (kCapPerThread * tid + j == n_range && !k_in_range) s.d[0] = acc;
      acc += pr[j];
    }
  }
  if (tid == 0) {
    s.i[0] = INT_MAX;  // sorted position of the k-th token
    s.i[1] = INT_MAX;  // sorted position of the top-p cut
  }
  __syncthreads();
  const double range_mass = s.d[0];
  // Rank and mass before sorted position q in the whole row.
  const auto place = [&](int q, double scanned, int* rank, double* mass_before) {
    const bool in_k_tail = use_k && !k_in_range && q >= n_range;
    *rank = in_k_tail ? k_before + (q - n_range) : range_before + q;
    *mass_before = in_k_tail ? k_mass_before + (scanned - range_mass) : range_mass_before + scanned;
  };
  // The k-th token and M_k, the top-k mass.
  if (use_k) {
    double acc = before;
#pragma unroll
    for (int j = 0; j < kCapPerThread; ++j) {
      const int q = kCapPerThread * tid + j;
      int rank = 0;
      double mb = 0;
      place(q, acc, &rank, &mb);
      if (q < n_all && rank == rp.top_k - 1) {
        s.i[0] = q;
        s.d[1] = mb + pr[j];
      }
      acc += pr[j];
    }
  }
  __syncthreads();
  Boundary k_bound;
  if (use_k) {
    if (s.i[0] == INT_MAX) return false;
    const unsigned long long e = sel.keys[s.i[0]];
    k_bound.key = ~static_cast<uint32_t>(e >> 32);
    k_bound.id = static_cast<int>(e & 0xffffffffu);
  }
  Boundary p_bound;
  if (use_p) {
    const double m_k = use_k ? s.d[1] : z_total;
    const double target = static_cast<double>(rp.top_p) * m_k;
    int cut = INT_MAX;
    double acc = before;
#pragma unroll
    for (int j = 0; j < kCapPerThread; ++j) {
      const int q = kCapPerThread * tid + j;
      int rank = 0;
      double mb = 0;
      place(q, acc, &rank, &mb);
      const bool in_top_k = !use_k || rank < rp.top_k;
      if (q < n_all && in_top_k && pr[j] > 0 && mb < target && target <= mb + pr[j]) {
        cut = min(cut, q);
      }
      acc += pr[j];
    }
    __syncthreads();
    cut = BlockReduceI(s.cub.ri).Reduce(cut, MinOp{});
    if (tid == 0) s.i[1] = cut;
    __syncthreads();
    cut = s.i[1];
    if (cut != INT_MAX) {
      const unsigned long long e = sel.keys[cut];
      p_bound.key = ~static_cast<uint32_t>(e >> 32);
      p_bound.id = static_cast<int>(e & 0xffffffffu);
    } else if (target < m_k * (1.0 - 1e-6)) {
      return false;  // the target fell between gathered bins (rounding): let the radix decide
    }  // else the target is the whole top-k mass (p within rounding of 1): no top-p cut
  }
  __syncthreads();
  *k_out = k_bound;
  *p_out = p_bound;
  return true;
}

// One row per cluster (blockIdx.y), its CTAs the cluster's ranks; dynamic shared memory holds the
// first tiles of the CTA's segment (kTileBytes each; the rest are read from global memory by each
// pass). MIN_BLOCKS CTAs per SM: 1 caches up to the SM's whole shared memory (~23 tiles), 2
// halves the registers and caches what its half holds (~9 tiles), so that twice the clusters run
// at once; both, and every cluster size, compute the same bits.
template <int MIN_BLOCKS>
__global__ void __launch_bounds__(kThreads, MIN_BLOCKS)
    sample_rows_bins_kernel(const ops::SampleRowsParams p) {
  __shared__ BinsSmem s;
  __shared__ uint64_t tile_bars[kMaxSegmentTiles];
  extern __shared__ float4 dyn_smem[];
  float* const cache = reinterpret_cast<float*>(dyn_smem);
  const int row = static_cast<int>(blockIdx.y);
  const int tid = static_cast<int>(threadIdx.x);
  const int rank = RowCluster::rank();
  const int csize = RowCluster::size();
  float* x = p.logits + static_cast<int64_t>(row) * p.ld;
  const int vocab = static_cast<int>(p.vocab);
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  const ops::SampleRowParams rp = p.row_params[row];
  const int pen_begin = p.penalty_offsets != nullptr ? p.penalty_offsets[row] : 0;
  const int pen_end = p.penalty_offsets != nullptr ? p.penalty_offsets[row + 1] : 0;
  Segment seg{cache, 0, 0, vocab, x, 0, vec};
  segment_tiles(vocab, csize, rank, &seg.tile0, &seg.ntiles);
  uint32_t dyn_bytes = 0;
  asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn_bytes));
  seg.ncached = min(seg.ntiles, static_cast<int>(dyn_bytes / kTileBytes));

  apply_penalties(x, vocab, rp, p.penalty_entries, pen_begin, pen_end, seg.tile0 * kTile,
                  (seg.tile0 + seg.ntiles) * kTile);

  // Step 1: the segment into shared memory, its max and argmax (lowest id on ties, NaNs never
  // win).
  const bool want_lse = p.out_logprobs != nullptr && pen_end == pen_begin;
  float best = -FLT_MAX;
  int best_i = INT_MAX;
  stream_segment(cache, tile_bars, seg, [&](int i0, const float(&v)[4]) {
  // The first max in id order (ids ascend within a thread, so the first max stays).
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (i0 + j < vocab && v[j] > best) {
        best = v[j];
        best_i = i0 + j;
      }
    }
  });
  // This CTA's partial: its max and the lowest id holding it.
  const float seg_max = BlockReduceF(s.cub.rf).Reduce(best, MaxOp{});
  if (tid == 0) s.f = seg_max;
  __syncthreads();
  const float cta_max = s.f;
  const int cta_arg = BlockReduceI(s.cub.ri).Reduce(best == cta_max ? best_i : INT_MAX, MinOp{});
  if (tid == 0) {
    s.part.max = cta_max;
    s.part.arg = cta_arg;
    s.part.lse = 0;
  }
  RowCluster::sync();
  // The row's: every thread combines the cluster's partials.
  float row_max = -FLT_MAX;
  for (int r = 0; r < csize; ++r)
    row_max = fmaxf(row_max, RowCluster::peer(&s.part, r)->max);
  int arg = INT_MAX;
  for (int r = 0; r < csize; ++r) {
    const Partial* pr = RowCluster::peer(&s.part, r);
    if (pr->max == row_max) arg = min(arg, pr->arg);
  }
  // A greedy row's CTAs (but CTA 0) exit next: not before every CTA has read their partials. The
  // other rows' CTAs write only other fields of `part` before their next barrier.
  if (rp.greedy != 0 && !want_lse) RowCluster::sync();
  // A logprob's normaliser: exp(logit - row max) summed per group of 4 (NaN and the -inf padding
  // weigh 0), in the draw's pass or, for a greedy row, a pass of its own; CTA 0 adds the
  // cluster's partials.
  const auto lse_terms = [&](const float(&v)[4]) {
    float e = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      e += v[j] == v[j] ? exp2f((v[j] - row_max) * kLog2e) : 0.0f;
    return to_fixed(e);
  };
  Fixed lse_sum = 0;
  int token = arg < vocab ? arg : 0;

  if (rp.greedy == 0) {
    const Dist dist{row_max, 1.0f / rp.temperature};
    Boundary k_found;
    Boundary p_found;
    const bool bounded = (rp.top_k > 0 && rp.top_k < vocab) || rp.top_p < 1.0f;
    if (bounded) {
      if (!bin_boundaries(seg, rp, dist, s, &k_found, &p_found)) {
        // Every CTA of the cluster gives up at the same point; the radix select's storage
        // overlaps what peers may still be reading.
        RowCluster::sync();
        radix_boundaries(x, vocab, rp, row_max, s.u.radix, &k_found, &p_found);
      }
      __syncthreads();
    }
    // (k_found and p_found are copied: their addresses were taken.)
    // Both keep a prefix of the order (logit desc, id asc): together, the shorter one.
    const bool p_first =
        p_found.key > k_found.key || (p_found.key == k_found.key && p_found.id < k_found.id);
    const Boundary bound = p_first ? p_found : k_found;
    // The draw: the kept mass of each 128-id chunk of the segment. The boundary as a logit:
    // order_key is monotone in the logit with -0 == +0, so (key, id) order is (logit, id) order
    // for every logit but NaN, which weighs nothing either way; no boundary (key 0) keeps all.
    const float min_p = rp.min_p;
    const float bound_v = bounded && bound.key != 0 ? key_logit(bound.key) : -INFINITY;
    const int bound_id = bounded && bound.key != 0 ? bound.id : INT_MAX;
    const auto weight = [&](int i, float v) -> float {
      if (!(v > bound_v || (v == bound_v && i <= bound_id))) return 0.0f;
      const float pr = dist_prob(dist(v));
      return min_p > 0.0f && pr < min_p ? 0.0f : pr;
    };
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int nchunks = (vocab + kChunk - 1) / kChunk;
    for_each_tile(seg, [&](int tile, int i0, const float(&v)[4]) {
      if (want_lse) lse_sum += lse_terms(v);
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        sum += weight(i0 + j, v[j]);  // the -inf padding past the row weighs 0
      // A chunk without kept mass (most of a filtered row) sums to zero without the scan.
      const float incl = __any_sync(0xffffffffu, sum != 0.0f) ? warp_inclusive_sum(sum) : 0.0f;
      if (lane == 31) s.u.chunk.local[(tile - seg.tile0) * kWarps + warp] = incl;
    });
    if (want_lse) {
      lse_sum = BlockReduceX(s.cub.rx).Sum(lse_sum);
      if (tid == 0) s.part.lse = lse_sum;
    }
    RowCluster::sync();
    if (rank == 0) {
      lse_sum = 0;
      for (int r = 0; r < csize; ++r)
        lse_sum += RowCluster::peer(&s.part, r)->lse;
      // CTA r's chunks start at its first tile's.
      const int per = (((vocab + kTile - 1) / kTile) + csize - 1) / csize;
      for (int c = tid; c < nchunks; c += kThreads) {
        const int r = c / kWarps / per;
        s.u.chunk.all[c] = RowCluster::peer(s.u.chunk.local, r)[c - r * per * kWarps];
      }
    }
    RowCluster::sync();  // CTA 0 has read every chunk sum
    if (rank != 0) return;
    float cw[kChunksPerThread];
    double local = 0;
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = kChunksPerThread * tid + j;
      cw[j] = c < nchunks ? s.u.chunk.all[c] : 0.0f;
      local += cw[j];
    }
    double before = 0;
    double total = 0;
    BlockScanD(s.cub.sd).ExclusiveSum(local, before, total);
    const double u = uniform01(rp.seed, rp.step) * total;
    if (tid == 0) {
      s.i[0] = token;  // kept if no chunk has kept mass (a row of NaNs)
      s.i[1] = -1;     // the chunk holding u
      s.i[2] = -1;     // the last chunk with kept mass
    }
    __syncthreads();
    {
      double acc = before;
#pragma unroll
      for (int j = 0; j < kChunksPerThread; ++j) {
        const int c = kChunksPerThread * tid + j;
        if (cw[j] > 0.0f) {
          if (acc <= u && u < acc + cw[j]) {
            s.i[1] = c;
            s.d[0] = acc;
          }
          atomicMax(&s.i[2], c);
        }
        acc += cw[j];
      }
    }
    __syncthreads();
    int c = s.i[1];
    double target = u;
    double c_before = s.d[0];
    if (c < 0) {  // rounding left u at the total: the last kept token
      c = s.i[2];
      target = INFINITY;
      c_before = 0;
    }
    if (c >= 0 && warp == 0) {
      // The chunk again (from global memory: the penalized row), as the pass above summed it:
      // the first kept token whose cumulative mass exceeds u, else the last kept one.
      const int i0 = c * kChunk + 4 * lane;
      float v[4];
      load4(x, vocab, i0, vec, v);
      float wj[4];
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        wj[j] = i0 + j < vocab ? weight(i0 + j, v[j]) : 0.0f;
        sum += wj[j];
      }
      const float incl = warp_inclusive_sum(sum);
      double acc = c_before + static_cast<double>(incl - sum);
      int hit = -1;
      int last = -1;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (wj[j] > 0.0f) {
          acc += wj[j];
          if (hit < 0 && target < acc) hit = i0 + j;
          last = i0 + j;
        }
      }
      const unsigned hits = __ballot_sync(0xffffffffu, hit >= 0);
      const unsigned lasts = __ballot_sync(0xffffffffu, last >= 0);
      if (hits != 0) {
        if (lane == __ffs(hits) - 1) s.i[0] = hit;
      } else if (lasts != 0) {
        if (lane == 31 - __clz(lasts)) s.i[0] = last;
      }
    }
    __syncthreads();
    token = s.i[0];
  } else if (want_lse) {
    for_each_tile(seg, [&](int, int, const float(&v)[4]) { lse_sum += lse_terms(v); });
    lse_sum = BlockReduceX(s.cub.rx).Sum(lse_sum);
    if (tid == 0) s.part.lse = lse_sum;
    RowCluster::sync();
    if (rank == 0) {
      lse_sum = 0;
      for (int r = 0; r < csize; ++r)
        lse_sum += RowCluster::peer(&s.part, r)->lse;
    }
    RowCluster::sync();  // CTA 0 has read the partials
    if (rank != 0) return;
  } else if (rank != 0) {
    return;
  }

  if (tid == 0) {
    p.out_tokens[row] = token;
    if (p.out_logprobs != nullptr) {
      p.out_logprobs[row] =
          pen_end == pen_begin ? static_cast<float>(x[token] - (row_max + log(from_fixed(lse_sum))))
                               : __int_as_float(0x7fc00000);  // NaN: the raw row is gone
    }
  }
}

// How one device runs the kernel: its multiprocessors, whether it has clusters, and the tiles of
// dynamic shared memory a CTA may take beside the kernel's static BinsSmem, with one CTA per SM
// (the whole budget) or two (half of the SM's shared memory each).
struct DeviceLimits {
  int sms = 0;
  bool clusters = false;
  int max_tiles = 0;   // tiles one CTA can cache, one CTA per SM
  int half_tiles = 0;  // the same, two CTAs per SM
};

DeviceLimits device_limits(int device) {
  static std::mutex mu;
  static std::array<DeviceLimits, 64> cache{};
  const std::lock_guard<std::mutex> lock(mu);
  DeviceLimits& d = cache.at(static_cast<size_t>(device));
  if (d.sms == 0) {
    int major = 0;
    int optin = 0;
    int per_sm = 0;
    int reserved = 0;
    KV_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, device));
    KV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    KV_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    KV_CUDA_CHECK(
        cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
    KV_CUDA_CHECK(
        cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
    cudaFuncAttributes attr{};
    KV_CUDA_CHECK(cudaFuncGetAttributes(&attr, sample_rows_bins_kernel<1>));
    const int dynamic = optin - static_cast<int>(attr.sharedSizeBytes);
    d.clusters = major >= 9;
    d.max_tiles = std::min(kMaxSegmentTiles, dynamic / kTileBytes);
    const int half = per_sm / 2 - reserved - static_cast<int>(attr.sharedSizeBytes);
    d.half_tiles = std::clamp(half / kTileBytes, 0, d.max_tiles);
    KV_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_bins_kernel<1>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       d.max_tiles * kTileBytes));
    KV_CUDA_CHECK(cudaFuncSetAttribute(sample_rows_bins_kernel<2>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       d.half_tiles * kTileBytes));
  }
  return d;
}

// The kernel's launch: `rows` clusters of `csize` CTAs (x: the rank, y: the row), each caching up
// to `cached` tiles of its segment of a row of `tiles`; `clusters` false: no cluster attribute
// (a device without clusters, csize 1).
struct BinsLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  BinsLaunch(int64_t csize, int64_t rows, int64_t tiles, int64_t cached, bool clusters,
             cudaStream_t stream) {
    cfg.gridDim = dim3(static_cast<unsigned>(csize), static_cast<unsigned>(rows));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes =
        static_cast<size_t>(std::min((tiles + csize - 1) / csize, cached)) * kTileBytes;
    cfg.stream = stream;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = static_cast<unsigned>(csize);
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = clusters ? 1 : 0;
  }
  BinsLaunch(const BinsLaunch&) = delete;  // cfg points at attr
  BinsLaunch& operator=(const BinsLaunch&) = delete;
};

// Clusters of `csize` CTAs for rows of `tiles` that fit the device at once (its GPCs, with this
// much shared memory per CTA); 0 when none does.
template <int MIN_BLOCKS>
int active_clusters(int64_t csize, int64_t tiles, int64_t cached) {
  const BinsLaunch launch(csize, 1, tiles, cached, true, nullptr);
  int clusters = 0;
  if (cudaOccupancyMaxActiveClusters(&clusters, sample_rows_bins_kernel<MIN_BLOCKS>, &launch.cfg) !=
      cudaSuccess) {
    (void)cudaGetLastError();
    clusters = 0;
  }
  return clusters;
}

// How rows of one vocabulary can run on one device: for each cluster size, how many clusters fit
// at once with one CTA per SM (the whole shared memory each) and with two (half each).
struct VocabPlan {
  int64_t vocab = -1;
  int64_t tiles = 0;
  std::array<int, kMaxCluster + 1> active_one{};
  std::array<int, kMaxCluster + 1> active_two{};
};

// The plan, remembered per device for the last vocabulary asked (the occupancy queries cost
// microseconds and a model has one vocabulary).
VocabPlan cached_plan(int64_t vocab, int device, const DeviceLimits& d) {
  static std::mutex mu;
  static std::array<VocabPlan, 64> cache{};
  const std::lock_guard<std::mutex> lock(mu);
  VocabPlan& e = cache.at(static_cast<size_t>(device));
  if (e.vocab != vocab) {
    e = {vocab, (vocab + kTile - 1) / kTile, {}, {}};
    for (int c = 1; d.clusters && c <= kMaxCluster && c <= e.tiles; ++c) {
      e.active_one[c] = active_clusters<1>(c, e.tiles, d.max_tiles);
      e.active_two[c] = active_clusters<2>(c, e.tiles, d.half_tiles);
    }
  }
  return e;
}

// One launch: `size` CTAs per row, and whether two CTAs share an SM (the kernel that caches half
// as much); size 0: the radix kernel.
struct RowLaunch {
  int size = 0;
  bool two = false;
};

// The launch for `rows` rows. Every cluster size gives a row the same bits (its sums are fixed-
// point, Fixed), so the size follows the batch: among the sizes (and CTAs per SM) that run every
// row in one wave, the one that leaves the fewest tiles per SM slot (a row's latency is its
// dependent passes over its CTA's tiles plus a fixed chain of reductions and cluster barriers);
// when none does, four-CTA-ish clusters (about 16 tiles each), two per SM, for throughput.
// Devices without clusters run one CTA per row that caches the whole row, or the radix kernel.
RowLaunch choose_launch(int64_t rows, const VocabPlan& v, const DeviceLimits& d) {
  const int64_t tiles = v.tiles;
  if (tiles * kWarps > kMaxChunks || d.max_tiles <= 0 || rows > 65535) return {};
  if (!d.clusters) return tiles <= d.max_tiles ? RowLaunch{1, false} : RowLaunch{};
  RowLaunch best;
  int64_t best_load = INT64_MAX;
  for (int c = 1; c <= kMaxCluster && c <= tiles; ++c) {
    const int64_t per = (tiles + c - 1) / c;
    for (const bool two : {false, true}) {
      const int active = two ? v.active_two[c] : v.active_one[c];
      if (active <= 0 || rows > active) continue;
      // CTAs an SM runs at once: one, or two when the rows' CTAs outnumber the SMs.
      const int64_t per_sm = two && rows * c > d.sms ? 2 : 1;
      const int64_t load = per * per_sm;
      if (load < best_load) {
        best_load = load;
        best = {c, two};
      }
    }
  }
  if (best.size > 0) return best;
  constexpr int64_t kTargetTiles = 16;  // 128 KiB of logits per CTA
  const int c = static_cast<int>(
      std::clamp<int64_t>((tiles + kTargetTiles - 1) / kTargetTiles, 1, kMaxCluster));
  if (v.active_two[c] > 0) return {c, true};
  if (v.active_one[c] > 0) return {c, false};
  return {};
}

}  // namespace

void sample_rows(const ops::SampleRowsParams& params, StreamHandle stream) {
  if (params.rows == 0) return;
  int device = 0;
  KV_CUDA_CHECK(cudaGetDevice(&device));
  const DeviceLimits d = device_limits(device);
  const VocabPlan plan = cached_plan(params.vocab, device, d);
  const RowLaunch launch = choose_launch(params.rows, plan, d);
  if (launch.size == 0) return sample_rows_radix(params, stream);
  const BinsLaunch cfg(launch.size, params.rows, plan.tiles,
                       launch.two ? d.half_tiles : d.max_tiles, d.clusters,
                       static_cast<cudaStream_t>(stream.ptr));
  if (launch.two) {
    KV_CUDA_CHECK(cudaLaunchKernelEx(&cfg.cfg, sample_rows_bins_kernel<2>, params));
  } else {
    KV_CUDA_CHECK(cudaLaunchKernelEx(&cfg.cfg, sample_rows_bins_kernel<1>, params));
  }
}

}  // namespace kvserve::platform::cuda

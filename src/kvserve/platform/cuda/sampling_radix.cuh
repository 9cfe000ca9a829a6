// The device sampler's shared pieces (sampling.cu: the radix-select kernel; sampling_bins.cu: the
// binned-select kernel, which falls back to the radix select for rows its bins cannot resolve):
// block size, the penalties, the order key of a logit, the kept-set boundary, the counter-based
// uniform, and the radix select of the top-k and top-p boundaries (ops/sampling_params.h states
// the semantics).
#pragma once

#include <cfloat>
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kvserve/platform/ops/sampling_params.h"

// Internal linkage: each including .cu file gets its own copy of these device functions.
namespace kvserve::platform::cuda {
namespace {

// 512 threads leave 128 registers per thread (1024 would spill); a row of 128k logits is 250
// per thread per pass.
constexpr int kThreads = 512;
constexpr int kMaxBins = 2048;  // the first two radix rounds take 11 bits, the last 10
constexpr int kPerThread = kMaxBins / kThreads;
static_assert(kMaxBins % kThreads == 0);

using BlockReduceF = cub::BlockReduce<float, kThreads>;
using BlockReduceD = cub::BlockReduce<double, kThreads>;
using BlockReduceI = cub::BlockReduce<int, kThreads>;
using BlockScanD = cub::BlockScan<double, kThreads>;

struct MinOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <typename T>
  __device__ T operator()(T a, T b) const {
    return b > a ? b : a;
  }
};

struct Smem {
  union {
    BlockReduceF::TempStorage rf;
    BlockReduceD::TempStorage rd;
    BlockReduceI::TempStorage ri;
    BlockScanD::TempStorage sd;
  } cub;
  double hist[kMaxBins];
  // Broadcast slots (written by one thread, read by all after a barrier).
  float f;
  double d0, d1;
  int i0, i1;
};

// Larger logit, larger key; -0 and +0 are one key (the host compares them equal).
__device__ __forceinline__ uint32_t order_key(float v) {
  if (v == 0.0f) v = 0.0f;
  const uint32_t u = __float_as_uint(v);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Kept by a boundary: at or before (key, id) in the order (key desc, id asc).
struct Boundary {
  uint32_t key = 0;
  int id = INT_MAX;
  __device__ bool keeps(uint32_t k, int i) const { return k > key || (k == key && i <= id); }
};

// Repetition, frequency and presence penalties of one row, in place on its logits x from the
// row's entries [begin, end) (unique by token, so no two threads write one logit), for the tokens
// of ids [lo, hi) (a CTA that owns part of the row rewrites only its part); every thread of the
// block calls it, and the rewritten logits are visible to the whole block on return.
__device__ __forceinline__ void apply_penalties(float* x, int vocab, const ops::SampleRowParams& rp,
                                                const ops::PenaltyEntry* entries, int begin,
                                                int end, int lo = 0, int hi = INT_MAX) {
  lo = max(lo, 0);
  hi = min(hi, vocab);
  for (int e = begin + static_cast<int>(threadIdx.x); e < end; e += kThreads) {
    const ops::PenaltyEntry pe = entries[e];
    if (pe.token < lo || pe.token >= hi) continue;
    float l = x[pe.token];
    if (rp.repetition_penalty != 1.0f && (pe.in_prompt != 0 || pe.output_count > 0)) {
      l = l > 0 ? __fdiv_rn(l, rp.repetition_penalty) : __fmul_rn(l, rp.repetition_penalty);
    }
    if (pe.output_count > 0) {
      const float f = __fmul_rn(rp.frequency_penalty, static_cast<float>(pe.output_count));
      l = __fsub_rn(l, __fadd_rn(f, rp.presence_penalty));
    }
    x[pe.token] = l;
  }
  __syncthreads();
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ double uniform01(uint64_t seed, int64_t step) {
  const uint64_t bits = splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(step));
  return static_cast<double>(bits >> 11) * (1.0 / 9007199254740992.0);
}

// Probability relative to the most likely token: exp((x - max) / temperature).
struct Prob {
  float max;
  double inv_t;
  __device__ float operator()(float x) const {
    return expf(static_cast<float>((static_cast<double>(x) - max) * inv_t));
  }
};

// The largest key T with weight(key > T) < target <= weight(key >= T), over tokens where
// weight(i, x, key) > 0 (target is clamped into (0, total]). Returns T; `above` = weight(key > T),
// `at` = weight(key == T). A radix select: each round histograms the next bits of the keys that
// share the prefix fixed so far, then the block scans the bins from the top.
template <typename Weight>
__device__ uint32_t select_boundary(const float* x, int vocab, double target, const Weight& weight,
                                    Smem& s, double* above_out, double* at_out) {
  constexpr int kBits[3] = {11, 11, 10};
  uint32_t prefix = 0;
  int fixed = 0;
  double above = 0;
  double at = 0;
  for (int round = 0; round < 3; ++round) {
    const int bits = kBits[round];
    const int shift = 32 - fixed - bits;
    const int bins = 1 << bits;
    for (int b = threadIdx.x; b < bins; b += kThreads)
      s.hist[b] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < vocab; i += kThreads) {
      const float v = x[i];
      const uint32_t key = order_key(v);
      if (fixed > 0 && (key >> (32 - fixed)) != (prefix >> (32 - fixed))) continue;
      const double w = weight(i, v, key);
      if (w > 0) atomicAdd(&s.hist[(key >> shift) & (bins - 1)], w);
    }
    __syncthreads();
    // Thread t owns the kPerThread bins at descending positions kPerThread * t + j.
    double h[kPerThread];
    double local = 0;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      const int bin = bins - 1 - (kPerThread * static_cast<int>(threadIdx.x) + j);
      h[j] = bin >= 0 ? s.hist[bin] : 0.0;
      local += h[j];
    }
    double before = 0;
    double total = 0;
    BlockScanD(s.cub.sd).ExclusiveSum(local, before, total);
    __syncthreads();
    // Rounding (mass sums in another order) may leave target outside (above, above + total].
    const double t = fmin(fmax(target, above), above + total);
    // First non-empty bin (from the top) whose inclusive weight reaches t; else the last one.
    int first = INT_MAX;
    int last = -1;
    double acc = above + before;
#pragma unroll
    for (int j = 0; j < kPerThread; ++j) {
      if (h[j] > 0) {
        if (first == INT_MAX && acc + h[j] >= t) first = kPerThread * threadIdx.x + j;
        last = kPerThread * threadIdx.x + j;
      }
      acc += h[j];
    }
    const int first_all = BlockReduceI(s.cub.ri).Reduce(first, MinOp{});
    __syncthreads();
    const int last_all = BlockReduceI(s.cub.ri).Reduce(last, MaxOp{});
    if (threadIdx.x == 0) s.i0 = first_all != INT_MAX ? first_all : last_all;
    __syncthreads();
    const int pos = s.i0;
    if (pos >= 0 && static_cast<int>(threadIdx.x) == pos / kPerThread) {
      double above_bin = above + before;
#pragma unroll
      for (int j = 0; j < kPerThread; ++j) {
        if (j < pos % kPerThread) above_bin += h[j];
        if (j == pos % kPerThread) s.d1 = h[j];
      }
      s.d0 = above_bin;
    }
    __syncthreads();
    if (pos < 0) {  // nothing has weight: cannot happen (the top token always does)
      *above_out = 0;
      *at_out = 0;
      return 0;
    }
    above = s.d0;
    at = s.d1;
    prefix |= static_cast<uint32_t>(bins - 1 - pos) << shift;
    fixed += bits;
    __syncthreads();
  }
  *above_out = above;
  *at_out = at;
  return prefix;
}

// The n-th (1-based) token in id order with pred(i, x, key); the last such token when fewer.
// Threads take contiguous id chunks so that a block prefix sum orders them.
template <typename Pred>
__device__ int nth_in_id_order(const float* x, int vocab, int n, const Pred& pred, Smem& s) {
  const int chunk = (vocab + kThreads - 1) / kThreads;
  const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
  const int end = min(vocab, begin + chunk);
  int count = 0;
  int last = -1;
  for (int i = begin; i < end; ++i) {
    if (pred(i, x[i], order_key(x[i]))) {
      ++count;
      last = i;
    }
  }
  double before = 0;
  double total = 0;
  BlockScanD(s.cub.sd).ExclusiveSum(static_cast<double>(count), before, total);
  __syncthreads();
  const int last_all = BlockReduceI(s.cub.ri).Reduce(last, MaxOp{});
  if (threadIdx.x == 0) s.i1 = last_all;
  __syncthreads();
  const int b = static_cast<int>(before);
  if (b < n && n <= b + count) {
    int seen = b;
    for (int i = begin; i < end; ++i) {
      if (pred(i, x[i], order_key(x[i])) && ++seen == n) {
        s.i1 = i;
        break;
      }
    }
  }
  __syncthreads();
  const int id = s.i1;
  __syncthreads();
  return id;
}

// The top-k and top-p boundaries of one row by radix select (the kept set is what both keep):
// top-k, the k-th key by count with its ties cut by id; top-p, the boundary by mass within the
// top-k tokens, its ties cut by id. A boundary that does not apply keeps everything.
__device__ void radix_boundaries(const float* x, int vocab, const ops::SampleRowParams& rp,
                                 float row_max, Smem& s, Boundary* k_out, Boundary* p_out) {
  const Prob prob{row_max, 1.0 / static_cast<double>(rp.temperature)};
  Boundary k_bound;
  if (rp.top_k > 0 && rp.top_k < vocab) {
    double above = 0;
    double at = 0;
    const auto all = [](int, float, uint32_t) { return 1.0; };
    k_bound.key = select_boundary(x, vocab, rp.top_k, all, s, &above, &at);
    const int need = rp.top_k - static_cast<int>(above);
    if (need < static_cast<int>(at)) {
      const uint32_t key = k_bound.key;
      const auto tie = [key](int, float, uint32_t k) { return k == key; };
      k_bound.id = nth_in_id_order(x, vocab, need, tie, s);
    }
  }
  Boundary p_bound;
  if (rp.top_p < 1.0f) {
    const auto mass_k = [&](int i, float v, uint32_t k) {
      return k_bound.keeps(k, i) ? static_cast<double>(prob(v)) : 0.0;
    };
    double sum = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      sum += mass_k(i, x[i], order_key(x[i]));
    sum = BlockReduceD(s.cub.rd).Sum(sum);
    if (threadIdx.x == 0) s.d0 = sum;
    __syncthreads();
    const double target = static_cast<double>(rp.top_p) * s.d0;
    __syncthreads();
    double above = 0;
    double at = 0;
    p_bound.key = select_boundary(x, vocab, target, mass_k, s, &above, &at);
    // Ties at the boundary share one probability: keep the fewest (at least one) that reach
    // the target, in id order.
    const float pt = prob(__uint_as_float(
        (p_bound.key & 0x80000000u) != 0 ? (p_bound.key & 0x7fffffffu) : ~p_bound.key));
    const int ties = pt > 0 ? static_cast<int>(at / pt + 0.5) : 1;
    if (ties > 1) {
      const int need = max(1, min(ties, static_cast<int>(ceil((target - above) / pt))));
      if (need < ties) {
        const uint32_t key = p_bound.key;
        const Boundary kb = k_bound;
        const auto tie = [key, kb](int i, float, uint32_t k) { return k == key && kb.keeps(k, i); };
        p_bound.id = nth_in_id_order(x, vocab, need, tie, s);
      }
    }
  }
  *k_out = k_bound;
  *p_out = p_bound;
}

}  // namespace
}  // namespace kvserve::platform::cuda

// Token sampling on the device (ops::sample_rows; the semantics are in ops/sampling_params.h and
// the CPU implementation in ops/sampling.cpp is the reference). One CTA of 512 threads per row,
// the row read from global memory (L2) a few times, no sort:
//   - penalties: one thread per penalty entry rewrites its logit in place;
//   - max and argmax (lowest id on ties): one block reduction; a greedy row stops here;
//   - top-k and top-p boundaries: a radix select on the order-preserving bits of the logits
//     (11 + 11 + 10 bits, shared-memory histograms of counts or of probability mass), which finds
//     the boundary logit T with weight(logit > T) < target <= weight(logit >= T); ties at T are
//     then kept in id order (a block prefix sum over contiguous id chunks finds the cut id);
//   - the draw: each thread sums the kept mass of a contiguous id chunk, one block exclusive scan,
//     and the thread whose chunk holds u walks it: the first kept token in id order whose
//     cumulative mass exceeds u.
// A kept token is one at or before the boundary (key, id) in the order (logit desc, id asc).
// Probabilities are exp((logit - max) / temperature) in f32 with f64 sums; the host works in f64,
// so the two agree except where a draw or a threshold falls within rounding of a boundary (the
// GPU test measures and bounds those rows).
#include <cfloat>
#include <climits>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"

namespace kvserve::platform::cuda {
namespace {

cudaStream_t as_cuda(StreamHandle s) {
  return static_cast<cudaStream_t>(s.ptr);
}

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

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const ops::SampleRowsParams p) {
  __shared__ Smem s;
  const int row = blockIdx.x;
  float* x = p.logits + static_cast<int64_t>(row) * p.ld;
  const int vocab = static_cast<int>(p.vocab);
  const ops::SampleRowParams rp = p.row_params[row];
  const int pen_begin = p.penalty_offsets != nullptr ? p.penalty_offsets[row] : 0;
  const int pen_end = p.penalty_offsets != nullptr ? p.penalty_offsets[row + 1] : 0;

  // The raw row's log-sum-exp, before the penalties rewrite it.
  float raw_max = 0;
  double raw_sum = 0;
  if (p.out_logprobs != nullptr && pen_end == pen_begin) {
    float m = -FLT_MAX;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      m = fmaxf(m, x[i]);
    m = BlockReduceF(s.cub.rf).Reduce(m, MaxOp{});
    if (threadIdx.x == 0) s.f = m;
    __syncthreads();
    raw_max = s.f;
    double sum = 0;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      sum += expf(x[i] - raw_max);
    raw_sum = BlockReduceD(s.cub.rd).Sum(sum);  // valid in thread 0
    __syncthreads();
  }

  // Penalties in place; entries are unique by token, so no two threads write one logit.
  for (int e = pen_begin + threadIdx.x; e < pen_end; e += kThreads) {
    const ops::PenaltyEntry pe = p.penalty_entries[e];
    if (pe.token < 0 || pe.token >= vocab) continue;
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
  __syncthreads();  // the rewritten logits are visible to the whole block

  // Max and argmax, lowest id on ties (NaNs never win).
  float best = -FLT_MAX;
  int best_i = vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i];
    if (v > best) {  // ids ascend within a thread: the first max stays
      best = v;
      best_i = i;
    }
  }
  const float max_all = BlockReduceF(s.cub.rf).Reduce(best, MaxOp{});
  if (threadIdx.x == 0) s.f = max_all;
  __syncthreads();
  const float row_max = s.f;
  const int arg = BlockReduceI(s.cub.ri).Reduce(best == row_max ? best_i : INT_MAX, MinOp{});
  if (threadIdx.x == 0) s.i0 = arg < vocab ? arg : 0;
  __syncthreads();
  int token = s.i0;
  __syncthreads();

  if (rp.greedy == 0) {
    const Prob prob{row_max, 1.0 / static_cast<double>(rp.temperature)};
    // top-k: the k-th key by count, its ties cut by id.
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
    // top-p within the top-k tokens: the boundary by mass, its ties cut by id.
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
          const auto tie = [key, kb](int i, float, uint32_t k) {
            return k == key && kb.keeps(k, i);
          };
          p_bound.id = nth_in_id_order(x, vocab, need, tie, s);
        }
      }
    }
    // The draw over kept tokens in id order.
    const float min_p = rp.min_p;
    const auto kept_mass = [&](int i, float v) -> double {
      const uint32_t k = order_key(v);
      if (!k_bound.keeps(k, i) || !p_bound.keeps(k, i)) return 0.0;
      const float pr = prob(v);
      return min_p > 0.0f && pr < min_p ? 0.0 : static_cast<double>(pr);
    };
    const int chunk = (vocab + kThreads - 1) / kThreads;
    const int begin = min(vocab, static_cast<int>(threadIdx.x) * chunk);
    const int end = min(vocab, begin + chunk);
    double local = 0;
    int last = -1;
    for (int i = begin; i < end; ++i) {
      const double w = kept_mass(i, x[i]);
      if (w > 0) {
        local += w;
        last = i;
      }
    }
    double before = 0;
    double total = 0;
    BlockScanD(s.cub.sd).ExclusiveSum(local, before, total);
    __syncthreads();
    const int last_all = BlockReduceI(s.cub.ri).Reduce(last, MaxOp{});
    if (threadIdx.x == 0) s.i0 = last_all >= 0 ? last_all : token;
    __syncthreads();
    const double u = uniform01(rp.seed, rp.step) * total;
    if (local > 0 && before <= u && u < before + local) {
      double acc = before;
      int pick = last;
      for (int i = begin; i < end; ++i) {
        const double w = kept_mass(i, x[i]);
        if (w <= 0) continue;
        acc += w;
        if (u < acc) {
          pick = i;
          break;
        }
      }
      s.i0 = pick;
    }
    __syncthreads();
    token = s.i0;
  }

  if (threadIdx.x == 0) {
    p.out_tokens[row] = token;
    if (p.out_logprobs != nullptr) {
      p.out_logprobs[row] = pen_end == pen_begin
                                ? static_cast<float>(x[token] - (raw_max + log(raw_sum)))
                                : __int_as_float(0x7fc00000);  // NaN: the raw row is gone
    }
  }
}

}  // namespace

void sample_rows(const ops::SampleRowsParams& params, StreamHandle stream) {
  if (params.rows == 0) return;
  sample_rows_kernel<<<static_cast<unsigned>(params.rows), kThreads, 0, as_cuda(stream)>>>(params);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

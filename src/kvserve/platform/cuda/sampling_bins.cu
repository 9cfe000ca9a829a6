// Token sampling on the device, the default kernel (ops::sample_rows; the semantics are in
// ops/sampling_params.h, the CPU implementation in ops/sampling.cpp is the reference, and
// sampling.cu keeps the radix-select kernel for A/B). One CTA of 512 threads per row; the row is
// streamed (float4, 4 tiles of 2048 logits in flight per thread) at most four times, no sort of
// the row and no float64 atomics:
//   1. penalties in place; max and argmax (lowest id on ties) in one pass; when a row needs them,
//      the same pass keeps online sums over the running max: of exp(logit) (the raw row's
//      log-sum-exp, for logprobs) and of exp(logit / temperature) (the row's mass, the base of a
//      top-p target without top-k). A greedy row stops here;
//   2. top-k / top-p: one pass counts the tokens of 4096 bins of the distance below the max,
//      d = (max - logit) / temperature in [0, 32) (1/128 nat each; the rest overflow). Bins
//      follow the order (logit desc, id asc), so the scan of the counts names the bin holding the
//      k-th token, and the counts times each bin's probability bounds (exp(-d) at its two edges,
//      widened for f32 rounding) bound the mass before every bin, which places the top-p target
//      (p * M_k, M_k the top-k mass or the row's mass) to the few bins it can fall in;
//   3. one pass gathers the tokens of those bins (at most 2048: (key, id) packed in 64 bits) into
//      shared memory with their exact masses; up to 512 are ordered by rank counting, more by a
//      bitonic sort; a block scan of their masses places the
//      k-th token (its key and id, and M_k) and the first token whose cumulative mass reaches
//      p * M_k exactly as the host does. A row whose bins cannot decide (the boundary beyond
//      d = 32, more than 2048 tokens to gather, or a target landing in an ungathered bin by
//      rounding) takes the radix select instead (sampling_radix.cuh);
//   4. the draw: one pass sums the kept mass (the two boundaries and min-p) of each 128-id chunk
//      (a warp scan: warp w of tile t owns ids [2048 t + 128 w, + 128)), one block scan over the
//      chunk sums places u * kept mass in a chunk, and one warp rescans that chunk for the first
//      kept token in id order whose cumulative mass exceeds it (the last kept one if rounding
//      leaves none).
// The draw and the kept set are the host's (one u per (seed, step), kept tokens visited in id
// order), so seeded tokens equal the host's and the radix kernel's except where a draw or a
// threshold falls within float rounding of a boundary. Probabilities are exp(-d) in f32; sums of
// more than one chunk are f64.
#include <cfloat>
#include <climits>
#include <cstdint>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/sampling_radix.cuh"
#include "kvserve/platform/cuda/sampling_radix.h"

namespace kvserve::platform::cuda {
namespace {

constexpr int kWarps = kThreads / 32;
constexpr int kTile = 4 * kThreads;  // logits per block-wide float4 step
constexpr int kUnroll = 4;           // tiles whose loads are in flight together
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
static_assert(kNumBins % kThreads == 0 && kCap % kThreads == 0 && kMaxChunks % kThreads == 0);
static_assert(kChunk * kWarps == kTile);

}  // namespace

// The largest vocabulary the binned kernel takes (its chunk sums live in shared memory); larger
// rows go to the radix kernel.
constexpr int64_t kBinsMaxVocab = int64_t{kMaxChunks} * kChunk;

namespace {

using BlockScanI = cub::BlockScan<int, kThreads>;

struct BinsSmem {
  union {
    Smem radix;  // the fallback's (sampling_radix.cuh); its cub storage is its own
    struct {
      int count[kNumBins];
      unsigned long long keys[kCap];  // (~order key) << 32 | id: ascending = (logit desc, id asc)
    } sel;
    float chunk[kMaxChunks];
  } u;
  union {
    BlockReduceF::TempStorage rf;
    BlockReduceD::TempStorage rd;
    BlockReduceI::TempStorage ri;
    BlockScanD::TempStorage sd;
    BlockScanI::TempStorage si;
  } cub;
  // Broadcast slots (written by one thread, read by all after a barrier).
  float f;
  double d[4];
  int i[8];
};

// The logit of an order key (order_key's inverse; -0 comes back as +0).
__device__ __forceinline__ float key_logit(uint32_t key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? (key & 0x7fffffffu) : ~key);
}

// Logits i0 .. i0 + 3 (zero past the row's end).
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
      v[j] = i0 + j < n ? x[i0 + j] : 0.0f;
  }
}

// f(tile, i0, v) for each of this thread's groups of 4 logits, ids i0 = kTile * tile + 4 * thread
// + 0..3, tiles ascending (so each thread sees its ids in ascending order); kUnroll tiles' loads
// are issued before any is used.
template <int Unroll = kUnroll, typename F>
__device__ __forceinline__ void for_each_tile(const float* x, int n, bool vec, const F& f) {
  const int ntiles = (n + kTile - 1) / kTile;
  const int own = 4 * static_cast<int>(threadIdx.x);
  for (int t0 = 0; t0 < ntiles; t0 += Unroll) {
    float v[Unroll][4];
#pragma unroll
    for (int u = 0; u < Unroll; ++u)
      load4(x, n, (t0 + u) * kTile + own, vec, v[u]);
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      if (t0 + u < ntiles) f(t0 + u, (t0 + u) * kTile + own, v[u]);
    }
  }
}

// f(i, v) for each of this thread's logits, ids ascending.
template <int Unroll = kUnroll, typename F>
__device__ __forceinline__ void for_each_logit(const float* x, int n, bool vec, const F& f) {
  for_each_tile<Unroll>(x, n, vec, [&](int, int i0, const float(&v)[4]) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (i0 + j < n) f(i0 + j, v[j]);
    }
  });
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

// Steps 2-3 of the header: the top-k and top-p boundaries by bins, or false when the bins cannot
// decide (the caller then runs the radix select). Every thread returns the same.
__device__ bool bin_boundaries(const float* x, int vocab, bool vec, const ops::SampleRowParams& rp,
                               const Dist& dist, double z_total, BinsSmem& s, Boundary* k_out,
                               Boundary* p_out) {
  const bool use_k = rp.top_k > 0 && rp.top_k < vocab;
  const bool use_p = rp.top_p < 1.0f;
  const int tid = static_cast<int>(threadIdx.x);
  auto& sel = s.u.sel;
  for (int b = tid; b < kNumBins; b += kThreads)
    sel.count[b] = 0;
  __syncthreads();
  for_each_logit(x, vocab, vec, [&](int, float v) {
    const int b = dist_bin(dist(v));
    if (b < kNumBins) atomicAdd(&sel.count[b], 1);
  });
  __syncthreads();

  // Thread t owns bins [kBinsPerThread * t, + kBinsPerThread). A bin's tokens have probabilities
  // within [exp(-(b + 1) / kBinsPerNat), exp(-b / kBinsPerNat)] (widened for f32 rounding): lower
  // and upper bounds of the mass before each bin, which place the top-p target to a few bins; the
  // exact masses come from the gather pass.
  int c[kBinsPerThread];
  int c_local = 0;
  double lo_local = 0;
  double hi_local = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int b = kBinsPerThread * tid + j;
    c[j] = sel.count[b];
    c_local += c[j];
    lo_local += c[j] * exp(-(b + 1) / static_cast<double>(kBinsPerNat)) * (1 - 1e-5);
    hi_local += c[j] * exp(-b / static_cast<double>(kBinsPerNat)) * (1 + 1e-5);
  }
  int c_before = 0;
  int c_total = 0;
  BlockScanI(s.cub.si).ExclusiveSum(c_local, c_before, c_total);
  __syncthreads();
  double lo_before = 0;
  double lo_total = 0;
  BlockScanD(s.cub.sd).ExclusiveSum(lo_local, lo_before, lo_total);
  __syncthreads();
  double hi_before = 0;
  double hi_total = 0;
  BlockScanD(s.cub.sd).ExclusiveSum(hi_local, hi_before, hi_total);
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
    int acc = c_before;
    double lo_acc = lo_before;
    double hi_acc = hi_before;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int b = kBinsPerThread * tid + j;
      const double lo_w = c[j] * exp(-(b + 1) / static_cast<double>(kBinsPerNat)) * (1 - 1e-5);
      const double hi_w = c[j] * exp(-b / static_cast<double>(kBinsPerNat)) * (1 + 1e-5);
      if (acc < rp.top_k && rp.top_k <= acc + c[j]) {
        s.i[0] = b;
        s.i[4] = acc;
        s.d[1] = lo_acc;         // at least the mass before it
        s.d[2] = hi_acc + hi_w;  // at most the mass through it
      }
      acc += c[j];
      lo_acc += lo_w;
      hi_acc += hi_w;
    }
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
    int acc = c_before;
    double lo_acc = lo_before;
    double hi_acc = hi_before;
#pragma unroll
    for (int j = 0; j < kBinsPerThread; ++j) {
      const int b = kBinsPerThread * tid + j;
      const double lo_w = c[j] * exp(-(b + 1) / static_cast<double>(kBinsPerNat)) * (1 - 1e-5);
      const double hi_w = c[j] * exp(-b / static_cast<double>(kBinsPerNat)) * (1 + 1e-5);
      if (c[j] > 0 && hi_acc + hi_w >= t_lo && (b == 0 || hi_acc < t_lo)) {
        s.i[1] = b;
        s.i[3] = acc;
      }
      if (c[j] > 0 && lo_acc + lo_w >= t_hi && lo_acc < t_hi) s.i[2] = b;
      acc += c[j];
      lo_acc += lo_w;
      hi_acc += hi_w;
    }
  }
  __syncthreads();
  const int lo_bin = use_p ? s.i[1] : kNumBins;
  const int hi_bin = use_p ? min(s.i[2], k_bin) : -1;
  if (use_p && lo_bin > hi_bin) return false;
  const int k_before = s.i[4];
  const int range_before = s.i[3];
  const auto gathered = [&](int b) { return (lo_bin <= b && b <= hi_bin) || b == k_bin; };
  // Tokens to gather, and how many of them fall in [lo_bin, hi_bin] (they sort first).
  int n_all = 0;
  int n_range = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int b = kBinsPerThread * tid + j;
    if (gathered(b)) n_all += c[j];
    if (lo_bin <= b && b <= hi_bin) n_range += c[j];
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

  // Gather, then sort ascending by (~key, id), i.e. (logit desc, id asc); on the way, the exact
  // masses before the k-th token's bin and before the range (the few likeliest tokens).
  const int k_lim = use_k ? k_bin : 0;
  const int range_lim = use_p ? lo_bin : 0;
  double k_mass_before = 0;
  double range_mass_before = 0;
  for_each_logit(x, vocab, vec, [&](int i, float v) {
    const float d = dist(v);
    const int b = dist_bin(d);
    if (b < k_lim || b < range_lim) {
      const float pr = dist_prob(d);
      if (b < k_lim) k_mass_before += pr;
      if (b < range_lim) range_mass_before += pr;
    }
    if (b < kNumBins && gathered(b)) {
      const int slot = atomicAdd(&s.i[7], 1);
      if (slot < kCap) {
        sel.keys[slot] =
            (static_cast<unsigned long long>(~order_key(v)) << 32) | static_cast<uint32_t>(i);
      }
    }
  });
  k_mass_before = BlockReduceD(s.cub.rd).Sum(k_mass_before);
  if (tid == 0) s.d[1] = k_mass_before;
  __syncthreads();
  range_mass_before = BlockReduceD(s.cub.rd).Sum(range_mass_before);
  if (tid == 0) s.d[3] = range_mass_before;
  __syncthreads();
  k_mass_before = s.d[1];
  range_mass_before = s.d[3];
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

__global__ void __launch_bounds__(kThreads) sample_rows_bins_kernel(const ops::SampleRowsParams p) {
  __shared__ BinsSmem s;
  const int row = blockIdx.x;
  const int tid = static_cast<int>(threadIdx.x);
  float* x = p.logits + static_cast<int64_t>(row) * p.ld;
  const int vocab = static_cast<int>(p.vocab);
  const bool vec = (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
  const ops::SampleRowParams rp = p.row_params[row];
  const int pen_begin = p.penalty_offsets != nullptr ? p.penalty_offsets[row] : 0;
  const int pen_end = p.penalty_offsets != nullptr ? p.penalty_offsets[row + 1] : 0;

  apply_penalties(x, vocab, rp, p.penalty_entries, pen_begin, pen_end);

  // Max and argmax (lowest id on ties, NaNs never win) and online sums over the running max:
  // for a row whose raw logits are still there, of exp(logit) (the logprob); for top-p without
  // top-k, of exp(logit / temperature) (the row's mass, the top-p target's base).
  const bool want_lse = p.out_logprobs != nullptr && pen_end == pen_begin;
  const bool want_z = rp.greedy == 0 && rp.top_p < 1.0f && !(rp.top_k > 0 && rp.top_k < vocab);
  const float z_scale = kLog2e / rp.temperature;
  float best = -FLT_MAX;
  int best_i = vocab;
  float run_max = -INFINITY;
  float run_sum = 0.0f;
  float z_sum = 0.0f;
  if (want_lse || want_z) {
    // Eight tiles in flight: the running sums' exp2f would otherwise stall on each load.
    for_each_logit<8>(x, vocab, vec, [&](int i, float v) {
      if (v > run_max) {  // the running max (NaNs skipped); first of equals kept: ids ascend
        if (want_lse) run_sum = run_sum * exp2f((run_max - v) * kLog2e) + 1.0f;
        if (want_z) z_sum = z_sum * exp2f((run_max - v) * z_scale) + 1.0f;
        run_max = v;
      } else if (v == v && run_max != -INFINITY) {
        if (want_lse) run_sum += exp2f((v - run_max) * kLog2e);
        if (want_z) z_sum += exp2f((v - run_max) * z_scale);
      }
      if (v > best) {
        best = v;
        best_i = i;
      }
    });
  } else {
    // Greedy, top-k and temperature-only rows without logprobs: the max and argmax alone.
    for_each_logit(x, vocab, vec, [&](int i, float v) {
      if (v > best) {  // ids ascend within a thread: the first max stays
        best = v;
        best_i = i;
      }
    });
  }
  const float max_all = BlockReduceF(s.cub.rf).Reduce(best, MaxOp{});
  if (tid == 0) s.f = max_all;
  __syncthreads();
  const float row_max = s.f;
  const int arg = BlockReduceI(s.cub.ri).Reduce(best == row_max ? best_i : INT_MAX, MinOp{});
  if (tid == 0) s.i[0] = arg < vocab ? arg : 0;
  __syncthreads();
  int token = s.i[0];
  double raw_sum = 0;  // valid in thread 0
  if (want_lse) {
    const double mine =
        run_sum > 0.0f ? static_cast<double>(run_sum) * exp(static_cast<double>(run_max) - row_max)
                       : 0.0;
    raw_sum = BlockReduceD(s.cub.rd).Sum(mine);
  }
  __syncthreads();
  double z_total = 0;
  if (want_z) {
    const double mine =
        z_sum > 0.0f ? static_cast<double>(z_sum) * exp((static_cast<double>(run_max) - row_max) /
                                                        static_cast<double>(rp.temperature))
                     : 0.0;
    z_total = BlockReduceD(s.cub.rd).Sum(mine);
    if (tid == 0) s.d[0] = z_total;
    __syncthreads();
    z_total = s.d[0];
  }

  if (rp.greedy == 0) {
    const Dist dist{row_max, 1.0f / rp.temperature};
    Boundary k_found;
    Boundary p_found;
    const bool bounded = (rp.top_k > 0 && rp.top_k < vocab) || rp.top_p < 1.0f;
    if (bounded) {
      if (!bin_boundaries(x, vocab, vec, rp, dist, z_total, s, &k_found, &p_found)) {
        __syncthreads();
        radix_boundaries(x, vocab, rp, row_max, s.u.radix, &k_found, &p_found);
      }
      __syncthreads();
    }
    // Register copies (the originals' addresses were taken).
    const Boundary k_bound = k_found;
    const Boundary p_bound = p_found;
    // The draw: the kept mass of each 128-id chunk.
    const float min_p = rp.min_p;
    const auto weight = [&](int i, float v) -> float {
      if (bounded) {
        const uint32_t k = order_key(v);
        if (!k_bound.keeps(k, i) || !p_bound.keeps(k, i)) return 0.0f;
      }
      const float pr = dist_prob(dist(v));
      return min_p > 0.0f && pr < min_p ? 0.0f : pr;
    };
    const int warp = tid >> 5;
    const int lane = tid & 31;
    const int nchunks = (vocab + kChunk - 1) / kChunk;
    for_each_tile(x, vocab, vec, [&](int tile, int i0, const float(&v)[4]) {
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        sum += i0 + j < vocab ? weight(i0 + j, v[j]) : 0.0f;
      const float incl = warp_inclusive_sum(sum);
      const int c = tile * kWarps + warp;
      if (lane == 31 && c < nchunks) s.u.chunk[c] = incl;
    });
    __syncthreads();
    float cw[kChunksPerThread];
    double local = 0;
#pragma unroll
    for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = kChunksPerThread * tid + j;
      cw[j] = c < nchunks ? s.u.chunk[c] : 0.0f;
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
      // The chunk again, as the pass above summed it: the first kept token whose cumulative
      // mass exceeds u, else the last kept one.
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
  }

  if (tid == 0) {
    p.out_tokens[row] = token;
    if (p.out_logprobs != nullptr) {
      p.out_logprobs[row] = pen_end == pen_begin
                                ? static_cast<float>(x[token] - (row_max + log(raw_sum)))
                                : __int_as_float(0x7fc00000);  // NaN: the raw row is gone
    }
  }
}

}  // namespace

void sample_rows(const ops::SampleRowsParams& params, StreamHandle stream) {
  if (params.rows == 0) return;
  if (params.vocab > kBinsMaxVocab) return sample_rows_radix(params, stream);
  sample_rows_bins_kernel<<<static_cast<unsigned>(params.rows), kThreads, 0,
                            static_cast<cudaStream_t>(stream.ptr)>>>(params);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

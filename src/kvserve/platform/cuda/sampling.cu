// Token sampling on the device by radix select (ops::sample_rows with SampleSelect::kRadix, kept
// for A/B against the binned-select default in sampling_bins.cu, which also borrows its boundary
// search for rows its bins cannot resolve; the semantics are in ops/sampling_params.h and the CPU
// implementation in ops/sampling.cpp is the reference). One CTA of 512 threads per row, the row
// read from global memory (L2) a few times, no sort:
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

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/sampling_radix.cuh"
#include "kvserve/platform/cuda/sampling_radix.h"

namespace kvserve::platform::cuda {
namespace {

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

  apply_penalties(x, vocab, rp, p.penalty_entries, pen_begin, pen_end);

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
    Boundary k_bound;
    Boundary p_bound;
    radix_boundaries(x, vocab, rp, row_max, s, &k_bound, &p_bound);
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

void sample_rows_radix(const ops::SampleRowsParams& params, StreamHandle stream) {
  if (params.rows == 0) return;
  sample_rows_kernel<<<static_cast<unsigned>(params.rows), kThreads, 0,
                       static_cast<cudaStream_t>(stream.ptr)>>>(params);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace kvserve::platform::cuda

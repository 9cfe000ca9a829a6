// cuda-paged decode attention on tensor cores (ops::paged_decode_tc): the kernel, its split-KV
// merge, and their launch (the plan is ops::plan_paged_decode_tc). The prefill kernel it grew
// from is paged_prefill.cu.
#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/kv_elem.cuh"
#include "kvserve/platform/cuda/mma_sm80.cuh"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/paged_decode_tc.h"
#include "kvserve/platform/cuda/pdl.cuh"

// =============================================================================================
// Decode on tensor cores (ops::paged_decode_tc): one query token per query b of a
// PagedDecodeParams batch, over its KV read in place through the page table.
//
// One block of 4 warps per (query, KV head, split); the split's KV positions stream through
// STAGES shared-memory stages of 64 positions (K and V, cp.async, XOR-swizzled rows), the page
// ids of the tile after next loaded one iteration ahead into registers (page size a run-time
// shift). Warp w owns positions [16w, 16w + 16) of every stage and keeps its own online softmax;
// the four warps merge through shared memory at the end.
// The products are transposed so that the GQA group (<= 8 heads) is the N = 8 of m16n8k16 and
// the positions fill M = 16 (no wasted rows):
//   S^T (16 positions x 8 heads) = K (16 x head_dim, ldmatrix) * Q^T (Q fragments in registers,
//   loaded once from global memory);
//   O^T (head_dim x 8 heads) += V^T (ldmatrix.trans) * P^T, where P^T's B fragments come from the
//   S^T accumulators through movmatrix (an 8 x 8 transpose in registers).
// A lane holds the scores and the output columns of the same two heads (2 * (lane % 4) + {0, 1}),
// so the softmax statistics need only the reductions across its column (3 shuffles) and no
// exchange with the output. Heads past the group are zero queries whose columns are dropped.
// Programmatic dependent launch: a block waits for the preceding kernel before its first read,
// unless the caller vouches that the metadata and every K/V row but each query's last were written
// before that kernel started (PagedDecodeParams::stable_before_wait: a decode step); then it
// reads the query's length and page ids and issues its first STAGES - 1 tiles (when they do not
// hold the last position) before the wait, and Q and the rest after it.
// Splits (num_splits > 1): each block writes its normalised partial output (f32) and log-sum-exp
// (log2 domain) to the workspace in paged_decode's layout. With split counters (the plan's
// workspace) the last block of each (query, KV head) to finish combines them: it counts itself on
// the counter after a fence, and the block whose count completes num_splits acquires the others'
// partials, merges the group's heads into `out` and zeroes the counter for the next launch (no
// second launch; a CUDA graph replays it as is). Without counters a merge kernel (one warp per
// (query, head)) combines them. Empty splits write log-sum-exp -inf and a zero partial.
// An fp8 cache (KV = __nv_fp8_e4m3 / e5m2): cp.async brings the fp8 bytes (half of bf16's: the
// point, decode is bandwidth-bound) into the stages; each warp widens its own 16 positions of the
// stage into a bf16 K and V tile (exact) and the products run as for bf16 from there. Only the
// warp reads the rows it widened, so a __syncwarp orders it. k_scale is folded into the softmax
// scale and v_scale into the output (value = stored * scale).
// Head dims 64, 80, 96, 128 and 256: shared-memory rows are ops::tc_smem_row_elems(head_dim)
// elements (80 and 96 in 128-element rows, so the swizzle stays in the row; the padding is never
// loaded nor read), and the threads of a row's cp.async chunks are rounded up to a power of two
// (the spare ones issue nothing). Head dim 256 runs at most 3 bf16 stages (192 KiB).
// A sliding window (window_left >= 0) narrows a query's positions to [window_first, seq) before
// the split (the plan splits the window's length); soft-capping (logit_softcap > 0) replaces the
// scores by cap * tanh(score * sm_scale / cap) before the masking, a uniform branch.
// =============================================================================================
namespace kvserve::platform::cuda {
namespace {

[[noreturn]] void unsupported(const char* what, int value) {
  detail::check_failed(__FILE__, __LINE__, what, std::string(), std::to_string(value));
}

constexpr int kDecWarps = ops::kDecodeTcThreads / 32;
constexpr int kDecTile = ops::kDecodeTcTileTokens;
static_assert(kDecTile == 16 * kDecWarps, "each warp owns 16 positions of a stage");

template <typename KV, int HEAD_DIM, int STAGES>
struct DecodeTile {
  static constexpr bool kFp8 = kIsFp8<KV>;
  static constexpr int kChunks = HEAD_DIM / 8;  // 16-byte bf16 chunks per K/V row (ldmatrix)
  static constexpr int kLoadChunks = HEAD_DIM * int{sizeof(KV)} / 16;  // cp.async chunks per row
  static constexpr int kLoadElems = 16 / int{sizeof(KV)};              // elements per chunk
  static constexpr int kKSteps = HEAD_DIM / 16;
  static constexpr int kRow = ops::tc_smem_row_elems(HEAD_DIM);  // shared-memory row (elements)
  // Threads per row's loads: kLoadChunks rounded up to a power of two (80, 96: some idle).
  static constexpr int kLoadLanes = kLoadChunks <= 4    ? 4
                                    : kLoadChunks <= 8  ? 8
                                    : kLoadChunks <= 16 ? 16
                                                        : 32;
  static constexpr int kRowStep = ops::kDecodeTcThreads / kLoadLanes;  // rows per block pass
  static constexpr int kRowsPerThread = kDecTile / kRowStep;           // cp.async rows per thread
  static constexpr int kStageElems = kDecTile * kRow;                  // one K (or V) stage
  static constexpr int kSmemBytes =
      static_cast<int>(ops::decode_tc_smem_bytes(HEAD_DIM, STAGES, int{sizeof(KV)}));
  static constexpr int kMinBlocks = ops::decode_tc_ctas_per_sm(HEAD_DIM, STAGES);
  static constexpr int kOStride = HEAD_DIM + 4;  // merge scratch row (floats): no bank conflicts
  // The warps' merge scratch (outputs, maxima, sums) and the last-block flag; the split merge's
  // log-sum-exps follow (group x num_splits floats, checked at the launch).
  static constexpr int kSplitScratchAt = kDecWarps * 8 * (kOStride + 2) + 4;  // floats
  static_assert(size_t{kSplitScratchAt} * 4 <= size_t{kSmemBytes},
                "the warps' merge (and the last-block flag) fits in the K/V stages");
  static_assert(kDecTile % kRowStep == 0, "whole rows per thread");
  static_assert(kChunks * 8 == HEAD_DIM && kLoadChunks * kLoadElems == HEAD_DIM, "whole chunks");
  static_assert(kLoadChunks <= kLoadLanes && kLoadLanes <= 32, "a row's loads in one pass");
  // Element offset of (row, 16-byte chunk), chunk XOR row % 8 (as the prefill tiles).
  static __device__ __forceinline__ int at(int row, int chunk) {
    return swizzled_offset<kRow>(row, chunk);
  }
  // Element offset in a stage of the cp.async chunk (row, chunk): bf16 stages are what ldmatrix
  // reads (swizzled); fp8 stages are plain rows, read 8 bytes per lane by the widening.
  static __device__ __forceinline__ int stage_at(int row, int chunk) {
    return stage_offset<kRow, kFp8, kLoadElems>(row, chunk);
  }
};

__device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}

// The split merge of `group` consecutive (query, head) rows from bh0, by one block (the last
// split block of a (query, KV head) to finish): out = sum_s 2^(lse_s - max) o_s / sum_s 2^(...),
// splits in order: the merge kernel's arithmetic, so both paths give the same bits (an empty
// split, lse -inf, weighs 0 and its partial is 0: adding it changes nothing). A thread owns 4
// dimensions of a head and walks the splits with 8 loads in flight; the partials come from other
// blocks of the grid, so they are read through L2 (ld.cg). `scratch`: group x num_splits floats
// of shared memory.
template <int HEAD_DIM>
__device__ __forceinline__ void merge_group_splits(const ops::PagedDecodeParams& p, int64_t bh0,
                                                   int group, float* scratch) {
  constexpr int kQuads = HEAD_DIM / 4;  // float4 columns of a partial row
  static_assert(kQuads * 4 == HEAD_DIM, "whole float4 columns");
  const int ns = p.num_splits;
  const float* lse = p.partial_lse + bh0 * ns;
  for (int i = threadIdx.x; i < group * ns; i += blockDim.x)
    scratch[i] = __ldcg(lse + i);
  __syncthreads();
  for (int idx = threadIdx.x; idx < group * kQuads; idx += blockDim.x) {
    const int h = idx / kQuads;
    const int c = idx % kQuads;
    const float* ls = scratch + h * ns;
    float mm = -INFINITY;
    for (int s = 0; s < ns; ++s)
      mm = fmaxf(mm, ls[s]);
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    float w_sum = 0.f;
    if (mm != -INFINITY) {
      const auto* src =
          reinterpret_cast<const float4*>(p.partial_out + (bh0 + h) * ns * HEAD_DIM) + c;
#pragma unroll 8
      for (int s = 0; s < ns; ++s) {
        const float w = exp2f(ls[s] - mm);  // 0 for an empty split
        const float4 x = __ldcg(src + static_cast<int64_t>(s) * kQuads);
        w_sum += w;
        acc.x += w * x.x;
        acc.y += w * x.y;
        acc.z += w * x.z;
        acc.w += w * x.w;
      }
    }
    const float inv = w_sum > 0.f ? 1.f / w_sum : 0.f;
    auto* dst = static_cast<__nv_bfloat16*>(p.out) + (bh0 + h) * HEAD_DIM + 4 * c;
    *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
    *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
  }
}

// CONTIGUOUS: K/V rows page_indptr[b] + t (page_ids null, page_shift 0), a compile-time choice so
// that the in-place read's loads stay as they are.
template <typename KV, int HEAD_DIM, int STAGES, bool CONTIGUOUS>
__global__ void __launch_bounds__(ops::kDecodeTcThreads,
                                  DecodeTile<KV, HEAD_DIM, STAGES>::kMinBlocks)
    paged_decode_tc_kernel(const __grid_constant__ ops::PagedDecodeParams p, int page_shift) {
  using T = DecodeTile<KV, HEAD_DIM, STAGES>;
  constexpr int kR = T::kRowsPerThread;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* sK = reinterpret_cast<KV*>(smem);  // [STAGES][kDecTile][HEAD_DIM]
  KV* sV = sK + STAGES * T::kStageElems;   // [STAGES][kDecTile][HEAD_DIM]
  // fp8: the bf16 K and V tiles the stages are widened into ([kDecTile][HEAD_DIM] each, swizzled).
  auto* sKw = reinterpret_cast<__nv_bfloat16*>(sV + STAGES * T::kStageElems);
  __nv_bfloat16* sVw = sKw + T::kStageElems;

  // pdl.cuh: launched with launch_pdl. With stable_before_wait the metadata and the first tiles
  // are read before the wait (below), overlapping the preceding kernel's tail.
  const bool early = p.pdl && p.stable_before_wait;
  if (!early) pdl_enter();
  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int group = p.num_q_heads / p.num_kv_heads;
  // Block order: KV heads fastest (the blocks that read one position's row run together), then
  // splits, then queries.
  const int kvh = static_cast<int>(blockIdx.x % static_cast<unsigned>(p.num_kv_heads));
  const int rest = static_cast<int>(blockIdx.x / static_cast<unsigned>(p.num_kv_heads));
  const int split = rest % p.num_splits;
  const int b = rest / p.num_splits;
  const int seq = p.seq_lens[b];
  // The positions this query reads, [lo, seq) (a window's, or all), cut into the splits.
  const int lo = ops::window_first(seq, p.window_left);
  const ops::DecodeSplitRange range = ops::decode_tc_split_range(
      seq - lo, split, p.num_splits, p.tokens_per_split, p.min_tokens_per_split);
  const int begin = lo + range.begin;
  const int end = lo + range.end;
  const int n_tiles = (end - begin + kDecTile - 1) / kDecTile;

  // Loads: thread tid copies chunk tid % kLoadChunks of rows tid / kLoadChunks + i * kRowStep.
  const int32_t first = p.page_indptr[b];
  const int32_t* pages = CONTIGUOUS ? nullptr : p.page_ids + first;
  const auto* kg = static_cast<const KV*>(p.k_cache);
  const auto* vg = static_cast<const KV*>(p.v_cache);
  const int64_t kv_row = static_cast<int64_t>(p.num_kv_heads) * HEAD_DIM;
  const int ld_chunk = tid % T::kLoadLanes;
  const int ld_row = tid / T::kLoadLanes;
  const bool ld_on = ld_chunk < T::kLoadChunks;  // not a spare load lane
  const int64_t col = static_cast<int64_t>(kvh) * HEAD_DIM + ld_chunk * T::kLoadElems;
  const int page_mask = (1 << page_shift) - 1;
  auto fetch_pages = [&](int(&pg)[kR], int j) {
#pragma unroll
    for (int i = 0; i < kR; ++i) {
      const int t = begin + j * kDecTile + ld_row + i * T::kRowStep;
      if constexpr (CONTIGUOUS) {
        pg[i] = j < n_tiles && t < end ? first + t : 0;
      } else {
        pg[i] = j < n_tiles && t < end ? __ldg(pages + (t >> page_shift)) : 0;
      }
    }
  };
  auto issue = [&](const int(&pg)[kR], int j) {
    if (j < n_tiles && ld_on) {
      const int stage = j % STAGES;
      KV* dk = sK + stage * T::kStageElems;
      KV* dv = sV + stage * T::kStageElems;
#pragma unroll
      for (int i = 0; i < kR; ++i) {
        const int r = ld_row + i * T::kRowStep;
        const int t = begin + j * kDecTile + r;
        const bool valid = t < end;  // past the end: zero-filled, nothing read
        const int64_t slot = (static_cast<int64_t>(pg[i]) << page_shift) | (t & page_mask);
        const int64_t off = valid ? slot * kv_row + col : 0;
        cp_async16(smem_u32(dk + T::stage_at(r, ld_chunk)), kg + off, valid);
        cp_async16(smem_u32(dv + T::stage_at(r, ld_chunk)), vg + off, valid);
      }
    }
    cp_async_commit();  // one group per tile index, empty past the end
  };

  int pg[kR];
  {
    int pre[STAGES - 1][kR];
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s)
      fetch_pages(pre[s], s);
    fetch_pages(pg, STAGES - 1);
    // The first tiles before the wait too, unless they hold the query's last position (the row
    // the preceding kernel stores): the pipeline's first loads overlap that kernel's tail.
    const bool tiles_early = early && min(end, begin + (STAGES - 1) * kDecTile) < seq;
    const auto issue_first = [&] {
#pragma unroll
      for (int s = 0; s < STAGES - 1; ++s)
        issue(pre[s], s);
    };
    if (tiles_early) issue_first();
    if (early) pdl_enter();
    if (!tiles_early) issue_first();
  }

  // Q^T as B fragments: lane (g, quad) holds head g's dimensions 16 kk + 2 quad + {0, 1} and
  // + 8 (zeros for heads past the group).
  const int g = lane / 4;
  const int quad = lane % 4;
  uint32_t qb[T::kKSteps][2];
  {
    const bool real = g < group;
    const auto* qrow =
        static_cast<const __nv_bfloat16*>(p.q) +
        (static_cast<int64_t>(b) * p.num_q_heads + kvh * group + (real ? g : 0)) * HEAD_DIM +
        2 * quad;
#pragma unroll
    for (int kk = 0; kk < T::kKSteps; ++kk) {
      qb[kk][0] = real ? *reinterpret_cast<const uint32_t*>(qrow + 16 * kk) : 0u;
      qb[kk][1] = real ? *reinterpret_cast<const uint32_t*>(qrow + 16 * kk + 8) : 0u;
    }
  }

  // fp8: q . (stored * k_scale) = k_scale (q . stored), folded into the softmax scale.
  // Soft-capping: scores become cap * tanh(raw * sm_scale / cap), then only log2(e) scales them.
  const float raw_scale = T::kFp8 ? p.sm_scale * p.k_scale : p.sm_scale;
  const bool capped = p.logit_softcap > 0.f;
  const float cap_pre = capped ? raw_scale / p.logit_softcap : 0.f;
  const float scale = capped ? kLog2e : raw_scale * kLog2e;
  const float v_scale = T::kFp8 ? p.v_scale : 1.f;
  const int lm_j = lane / 8;
  const int lm_r = lane % 8;
  const int w0 = warp * 16;  // this warp's first row of every stage
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};
  float o[T::kKSteps][4];  // O^T: rows 16 dt + g (+ 8) = dimensions, columns 2 quad + {0, 1}
#pragma unroll
  for (int dt = 0; dt < T::kKSteps; ++dt)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      o[dt][i] = 0.f;

  for (int j = 0; j < n_tiles; ++j) {
    cp_async_wait<STAGES - 2>();
    __syncthreads();            // tile j landed for every thread; every warp finished tile j - 1
    issue(pg, j + STAGES - 1);  // into the stage tile j - 1 used
    fetch_pages(pg, j + STAGES);
    const int stage = j % STAGES;
    const __nv_bfloat16* k_s;
    const __nv_bfloat16* v_s;
    if constexpr (T::kFp8) {
      // Widen this warp's 16 positions of K and V (8 elements per lane and step) into the bf16
      // tiles; the previous tile's ldmatrix reads of these rows were by this warp only.
      const KV* k8 = sK + stage * T::kStageElems;
      const KV* v8 = sV + stage * T::kStageElems;
      __syncwarp();
#pragma unroll
      for (int idx = lane; idx < 16 * T::kChunks; idx += 32) {
        const int r = w0 + idx / T::kChunks;
        const int c = idx % T::kChunks;
        const uint2 kr = *reinterpret_cast<const uint2*>(k8 + r * T::kRow + c * 8);
        const uint2 vr = *reinterpret_cast<const uint2*>(v8 + r * T::kRow + c * 8);
        *reinterpret_cast<uint4*>(sKw + T::at(r, c)) = fp8x8_to_bf16x8<KV>(kr);
        *reinterpret_cast<uint4*>(sVw + T::at(r, c)) = fp8x8_to_bf16x8<KV>(vr);
      }
      __syncwarp();
      k_s = sKw;
      v_s = sVw;
    } else {
      k_s = sK + stage * T::kStageElems;
      v_s = sV + stage * T::kStageElems;
    }

    // S^T = K Q^T: rows g and g + 8 of this warp's 16 positions, columns 2 quad + {0, 1}.
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int kk = 0; kk < T::kKSteps; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, smem_u32(k_s + T::at(w0 + (lm_j & 1) * 8 + lm_r, 2 * kk + (lm_j >> 1))));
      mma_bf16(s, a, qb[kk][0], qb[kk][1]);
    }
    if (capped) {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        s[i] = p.logit_softcap * tanhf(s[i] * cap_pre);
    }
    const int t0 = begin + j * kDecTile + w0 + g;
    if (begin + (j + 1) * kDecTile > end) {  // the last tile: positions past the end
      if (t0 >= end) s[0] = s[1] = -INFINITY;
      if (t0 + 8 >= end) s[2] = s[3] = -INFINITY;
    }

    // Online softmax per column (head), log2 domain.
    float pr[4];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float mx = fmaxf(s[e], s[2 + e]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
      const float m_new = fmaxf(m_run[e], mx * scale);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a column that saw nothing yet
      const float corr = fast_exp2(m_run[e] - m_use);
      m_run[e] = m_new;
      pr[e] = fast_exp2(fmaf(s[e], scale, -m_use));
      pr[2 + e] = fast_exp2(fmaf(s[2 + e], scale, -m_use));
      l_run[e] = l_run[e] * corr + pr[e] + pr[2 + e];
#pragma unroll
      for (int dt = 0; dt < T::kKSteps; ++dt) {
        o[dt][e] *= corr;
        o[dt][2 + e] *= corr;
      }
    }

    // O^T += V^T P^T: P^T's B fragments (positions x heads) are the transposed S^T fragments.
    const uint32_t b0 = movmatrix_trans(pack_bf16(pr[0], pr[1]));  // positions 0..7
    const uint32_t b1 = movmatrix_trans(pack_bf16(pr[2], pr[3]));  // positions 8..15
#pragma unroll
    for (int dt = 0; dt < T::kKSteps; ++dt) {
      uint32_t a[4];
      ldmatrix_x4_trans(a, smem_u32(v_s + T::at(w0 + (lm_j >> 1) * 8 + lm_r, 2 * dt + (lm_j & 1))));
      mma_bf16(o[dt], a, b0, b1);
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // every warp is done with the stages: they become the merge scratch

  // Merge the four warps: per column the max, the rescaled sums and outputs.
  float* sO = reinterpret_cast<float*>(smem);    // [warps][8 heads][kOStride]
  float* sM = sO + kDecWarps * 8 * T::kOStride;  // [warps][8]
  float* sL = sM + kDecWarps * 8;                // [warps][8]
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    float l = l_run[e];
    l += __shfl_xor_sync(0xffffffffu, l, 4);
    l += __shfl_xor_sync(0xffffffffu, l, 8);
    l += __shfl_xor_sync(0xffffffffu, l, 16);
    const int h = 2 * quad + e;
    if (g == 0) {
      sM[warp * 8 + h] = m_run[e];
      sL[warp * 8 + h] = l;
    }
    float* row = sO + (warp * 8 + h) * T::kOStride;
#pragma unroll
    for (int dt = 0; dt < T::kKSteps; ++dt) {
      row[16 * dt + g] = o[dt][e];
      row[16 * dt + g + 8] = o[dt][2 + e];
    }
  }
  __syncthreads();
  for (int idx = tid; idx < group * HEAD_DIM; idx += ops::kDecodeTcThreads) {
    const int h = idx / HEAD_DIM;
    const int d = idx % HEAD_DIM;
    float mm = -INFINITY;
#pragma unroll
    for (int w = 0; w < kDecWarps; ++w)
      mm = fmaxf(mm, sM[w * 8 + h]);
    float ll = 0.f, oo = 0.f;
    if (mm != -INFINITY) {
#pragma unroll
      for (int w = 0; w < kDecWarps; ++w) {
        const float wt = exp2f(sM[w * 8 + h] - mm);  // 0 for a warp that saw nothing
        ll += sL[w * 8 + h] * wt;
        oo += sO[(w * 8 + h) * T::kOStride + d] * wt;
      }
    }
    const int64_t bh = static_cast<int64_t>(b) * p.num_q_heads + kvh * group + h;
    const float val = ll > 0.f ? oo / ll * v_scale : 0.f;  // the merge is linear in it
    if (p.num_splits == 1) {
      static_cast<__nv_bfloat16*>(p.out)[bh * HEAD_DIM + d] = __float2bfloat16_rn(val);
    } else {
      p.partial_out[(bh * p.num_splits + split) * HEAD_DIM + d] = val;
      if (d == 0) p.partial_lse[bh * p.num_splits + split] = ll > 0.f ? mm + log2f(ll) : -INFINITY;
    }
  }
  if (p.num_splits == 1 || p.split_counters == nullptr) return;

  // The last split block of this (query, KV head) to finish merges (split counters,
  // paged_decode_params.h): release this block's partial, count it, and let the block whose
  // arrival completes the count acquire the others' and combine them.
  int* s_last = reinterpret_cast<int*>(sL + kDecWarps * 8);
  __threadfence();
  __syncthreads();  // every thread's partial written and fenced; the scratch reads are done
  uint32_t* counter = p.split_counters + static_cast<int64_t>(b) * p.num_kv_heads + kvh;
  if (tid == 0) {
    const uint32_t arrived = atomicAdd(counter, 1u) + 1u;
    const bool last = arrived == static_cast<uint32_t>(p.num_splits);
    if (last) *counter = 0u;  // every block of this launch has counted: ready for the next one
    *s_last = last;
  }
  __syncthreads();
  if (*s_last == 0) return;
  __threadfence();
  merge_group_splits<HEAD_DIM>(p, static_cast<int64_t>(b) * p.num_q_heads + kvh * group, group,
                               reinterpret_cast<float*>(smem) + T::kSplitScratchAt);
}

// Combines the splits of each (query, head): out = sum_s 2^(lse_s - max) o_s / sum_s 2^(...).
// One warp per (query, head), HEAD_DIM / 32 dimensions per lane; empty splits (lse -inf) skipped.
constexpr int kMergeWarps = 4;

template <int HEAD_DIM>
__global__ void __launch_bounds__(kMergeWarps * 32)
    decode_tc_merge_kernel(const __grid_constant__ ops::PagedDecodeParams p) {
  pdl_enter();  // pdl.cuh: launched with launch_pdl
  // Dimensions per lane: contiguous runs of kPer (64, 128, 256) or, for 80 and 96, lane + 32 i.
  constexpr bool kVecPer = HEAD_DIM % 64 == 0;
  constexpr int kPer = (HEAD_DIM + 31) / 32;
  const int64_t bh = static_cast<int64_t>(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
  if (bh >= static_cast<int64_t>(p.batch) * p.num_q_heads) return;
  const int lane = threadIdx.x % 32;
  const float* lse = p.partial_lse + bh * p.num_splits;
  float mm = -INFINITY;
  for (int s = lane; s < p.num_splits; s += 32)
    mm = fmaxf(mm, lse[s]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2)
    mm = fmaxf(mm, __shfl_xor_sync(0xffffffffu, mm, off));
  float acc[kPer] = {};
  float w_sum = 0.f;
  if (mm != -INFINITY) {
    for (int s = 0; s < p.num_splits; ++s) {
      const float ls = lse[s];
      if (ls == -INFINITY) continue;
      const float w = exp2f(ls - mm);
      w_sum += w;
      const float* row = p.partial_out + (bh * p.num_splits + s) * HEAD_DIM;
      const float* src = row + lane * kPer;
      float x[kPer];
      if constexpr (!kVecPer) {
#pragma unroll
        for (int i = 0; i < kPer; ++i)
          x[i] = lane + 32 * i < HEAD_DIM ? row[lane + 32 * i] : 0.f;
      } else if constexpr (kPer == 8) {
        const float4 v0 = *reinterpret_cast<const float4*>(src);
        const float4 v1 = *reinterpret_cast<const float4*>(src + 4);
        x[0] = v0.x;
        x[1] = v0.y;
        x[2] = v0.z;
        x[3] = v0.w;
        x[4] = v1.x;
        x[5] = v1.y;
        x[6] = v1.z;
        x[7] = v1.w;
      } else if constexpr (kPer == 4) {
        const float4 v = *reinterpret_cast<const float4*>(src);
        x[0] = v.x;
        x[1] = v.y;
        x[2] = v.z;
        x[3] = v.w;
      } else {
        const float2 v = *reinterpret_cast<const float2*>(src);
        x[0] = v.x;
        x[1] = v.y;
      }
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        acc[i] += w * x[i];
    }
  }
  const float inv = w_sum > 0.f ? 1.f / w_sum : 0.f;
  if constexpr (!kVecPer) {
    auto* dst = static_cast<__nv_bfloat16*>(p.out) + bh * HEAD_DIM;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      if (lane + 32 * i < HEAD_DIM) dst[lane + 32 * i] = __float2bfloat16_rn(acc[i] * inv);
    }
  } else {
    auto* dst = static_cast<__nv_bfloat16*>(p.out) + bh * HEAD_DIM + lane * kPer;
#pragma unroll
    for (int i = 0; i < kPer; i += 2) {
      *reinterpret_cast<__nv_bfloat162*>(dst + i) =
          __floats2bfloat162_rn(acc[i] * inv, acc[i + 1] * inv);
    }
  }
}

template <typename KV, int HEAD_DIM, int STAGES, bool CONTIGUOUS = false>
auto* configured_decode_tc_kernel() {
  using T = DecodeTile<KV, HEAD_DIM, STAGES>;
  auto* kernel = paged_decode_tc_kernel<KV, HEAD_DIM, STAGES, CONTIGUOUS>;
  static const bool configured = [&] {
    KV_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, T::kSmemBytes));
    KV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
    return true;
  }();
  (void)configured;
  return kernel;
}

template <typename KV, int HEAD_DIM, int STAGES>
void launch_decode_tc(const ops::PagedDecodeParams& p, int page_shift, cudaStream_t stream) {
  using T = DecodeTile<KV, HEAD_DIM, STAGES>;
  auto* kernel = p.page_ids == nullptr ? configured_decode_tc_kernel<KV, HEAD_DIM, STAGES, true>()
                                       : configured_decode_tc_kernel<KV, HEAD_DIM, STAGES, false>();
  const int64_t blocks = static_cast<int64_t>(p.batch) * p.num_splits * p.num_kv_heads;
  if (blocks > 0x7fffffff) {
    detail::check_failed(__FILE__, __LINE__, "paged decode (tensor cores): too many blocks",
                         std::string(), std::to_string(blocks));
  }
  if (p.split_counters != nullptr && p.num_splits > 1 &&
      (T::kSplitScratchAt + int64_t{p.num_q_heads / p.num_kv_heads} * p.num_splits) * 4 >
          T::kSmemBytes) {
    unsupported("paged decode (tensor cores): split counters (the last block's merge) for splits",
                p.num_splits);
  }
  launch_pdl(kernel, static_cast<unsigned>(blocks), ops::kDecodeTcThreads, T::kSmemBytes, stream,
             p.pdl, p, page_shift);
  if (p.num_splits == 1 || p.split_counters != nullptr) return;  // merged by the last blocks
  const int64_t pairs = static_cast<int64_t>(p.batch) * p.num_q_heads;
  launch_pdl(decode_tc_merge_kernel<HEAD_DIM>,
             static_cast<unsigned>((pairs + kMergeWarps - 1) / kMergeWarps), kMergeWarps * 32, 0,
             stream, p.pdl, p);
}

// The one boundary where the decode kernel's runtime values become template parameters.
template <typename KV, int HEAD_DIM>
void dispatch_decode_tc_stages(const ops::PagedDecodeParams& p, int32_t stages, int page_shift,
                               cudaStream_t s) {
  switch (stages) {
    case 2:
      return launch_decode_tc<KV, HEAD_DIM, 2>(p, page_shift, s);
    case 3:
      return launch_decode_tc<KV, HEAD_DIM, 3>(p, page_shift, s);
    case 4:
      // ops::resolve_decode_tc_stages never asks for more than fits (head dim 256 in bf16: 3).
      if constexpr (ops::decode_tc_smem_bytes(HEAD_DIM, 4, int{sizeof(KV)}) >
                    ops::kMaxSmemPerBlock) {
        unsupported("paged decode (tensor cores): 4 stages at head_dim", HEAD_DIM);
      } else {
        return launch_decode_tc<KV, HEAD_DIM, 4>(p, page_shift, s);
      }
    default:
      unsupported("paged decode (tensor cores): stages (2, 3 or 4)", stages);
  }
}

template <typename KV>
void dispatch_decode_tc_head_dim(const ops::PagedDecodeParams& p, int32_t stages, int page_shift,
                                 cudaStream_t s) {
  switch (p.head_dim) {
    case 64:
      return dispatch_decode_tc_stages<KV, 64>(p, stages, page_shift, s);
    case 80:
      return dispatch_decode_tc_stages<KV, 80>(p, stages, page_shift, s);
    case 96:
      return dispatch_decode_tc_stages<KV, 96>(p, stages, page_shift, s);
    case 128:
      return dispatch_decode_tc_stages<KV, 128>(p, stages, page_shift, s);
    case 256:
      return dispatch_decode_tc_stages<KV, 256>(p, stages, page_shift, s);
    default:
      unsupported("paged decode (tensor cores): head_dim", p.head_dim);
  }
}

// The bf16 kernel's occupancy (the one the split plan is made for).
template <int HEAD_DIM>
int32_t occupancy_for(int32_t stages) {
  int n = 0;
  auto query = [&](auto* kernel, int smem) {
    KV_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, ops::kDecodeTcThreads, smem));
  };
  switch (stages) {
    case 2:
      query(configured_decode_tc_kernel<__nv_bfloat16, HEAD_DIM, 2>(),
            DecodeTile<__nv_bfloat16, HEAD_DIM, 2>::kSmemBytes);
      break;
    case 3:
      query(configured_decode_tc_kernel<__nv_bfloat16, HEAD_DIM, 3>(),
            DecodeTile<__nv_bfloat16, HEAD_DIM, 3>::kSmemBytes);
      break;
    case 4:
      if constexpr (ops::decode_tc_smem_bytes(HEAD_DIM, 4) > ops::kMaxSmemPerBlock) {
        unsupported("paged decode (tensor cores): 4 stages at head_dim", HEAD_DIM);
      } else {
        query(configured_decode_tc_kernel<__nv_bfloat16, HEAD_DIM, 4>(),
              DecodeTile<__nv_bfloat16, HEAD_DIM, 4>::kSmemBytes);
      }
      break;
    default:
      unsupported("paged decode (tensor cores): stages (2, 3 or 4)", stages);
  }
  return n;
}

}  // namespace

void paged_decode_tc(const ops::PagedDecodeParams& p, int32_t stages, StreamHandle stream) {
  if (p.batch == 0) return;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.num_q_heads / p.num_kv_heads > 8) {
    unsupported("paged decode (tensor cores): GQA group (1..8) of num_q_heads", p.num_q_heads);
  }
  if (p.num_splits < 1) unsupported("paged decode (tensor cores): num_splits", p.num_splits);
  if (p.num_splits > 1 && (p.partial_out == nullptr || p.partial_lse == nullptr)) {
    unsupported("paged decode (tensor cores): a split workspace for num_splits", p.num_splits);
  }
  int page_shift = 0;
  while ((1 << page_shift) < p.page_size)
    ++page_shift;
  if ((1 << page_shift) != p.page_size || page_shift > 7) {
    unsupported("paged decode (tensor cores): page size", p.page_size);
  }
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  switch (p.kv_dtype) {
    case DType::kBF16:
      return dispatch_decode_tc_head_dim<__nv_bfloat16>(p, stages, page_shift, s);
    case DType::kFP8E4M3:
      return dispatch_decode_tc_head_dim<__nv_fp8_e4m3>(p, stages, page_shift, s);
    case DType::kFP8E5M2:
      return dispatch_decode_tc_head_dim<__nv_fp8_e5m2>(p, stages, page_shift, s);
    default:
      unsupported("paged decode (tensor cores): KV cache dtype (bf16, fp8_e4m3, fp8_e5m2)",
                  static_cast<int>(p.kv_dtype));
  }
}

int32_t paged_decode_tc_occupancy(int32_t head_dim, int32_t stages) {
  switch (head_dim) {
    case 64:
      return occupancy_for<64>(stages);
    case 80:
      return occupancy_for<80>(stages);
    case 96:
      return occupancy_for<96>(stages);
    case 128:
      return occupancy_for<128>(stages);
    case 256:
      return occupancy_for<256>(stages);
    default:
      unsupported("paged decode (tensor cores): head_dim", head_dim);
  }
}

}  // namespace kvserve::platform::cuda

// cuda-paged prefill / extend attention on tensor cores (FlashAttention-2 style): one block per
// (query tile, KV head) reads the request's K/V tiles in place through the page table.
//
// Rows of a query tile are (token, query head of the GQA group) pairs, packed token-major
// (row = token * group + head within the group), so every K/V tile load serves the whole group.
// Each warp owns 16 rows per m-tile (M_TILES m-tiles); a K/V tile is 64 positions.
//   S = Q K^T and O += P V: mma.sync m16n8k16 bf16 with f32 accumulators, operands from
//   XOR-swizzled shared memory through ldmatrix (V through ldmatrix.trans).
//   Softmax: online, in registers, in the log2 domain (scores pre-multiplied by
//   sm_scale * log2(e), ex2.approx); the row max and sum are shared by a lane quad.
//   K/V tiles: cp.async into two shared-memory stages; tile j + 1 loads while tile j computes.
//   Page size is a run-time shift and mask per key row (powers of two): the slot of a row costs
//   one page-id load shared by the 8 or 16 lanes of that row, hidden behind the previous tile.
// Grid: x walks the query tiles of all requests from the last (the longest causal rows) to the
// first, y the KV heads (prefill_tiles.cuh: which request owns a tile; a spare one exits at once).
//
// An fp8 cache (KV = __nv_fp8_e4m3 / e5m2): cp.async brings the tiles' fp8 bytes into the two
// stages (plain rows); after a tile lands the block widens it into one bf16 K and V tile (exact,
// swizzled as above) and the products run as for bf16. k_scale is folded into the softmax scale
// and v_scale into the output (value = stored * scale).
//
// Head dims 64, 80, 96, 128 and 256: shared-memory rows are ops::tc_smem_row_elems(head_dim)
// elements (80 and 96 in 128-element rows: the swizzle stays in the row, the padding is never
// read). Head dim 256 keeps Q in shared memory (its O accumulators take 128 registers) and runs
// one m-tile per warp (kM128W4 becomes the 8-warp tile of the same 128 rows).
// Sliding window (window_left >= 0): the row of the query at position pos = kv_len - q_len + token
// masks keys below pos - window_left, and the block starts at the K/V tile of its first row's
// bound. Soft-capping (logit_softcap > 0): S becomes cap * tanh(S * sm_scale / cap) before the
// masking and the softmax scales by log2(e) alone; both are uniform branches.
//
// Its decode variant (ops::paged_decode_tc) is in paged_decode_tc.cu; both take their mma.sync,
// ldmatrix and cp.async wrappers from mma_sm80.cuh.
#include <cuda_bf16.h>

#include <cstdint>
#include <string>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/kv_elem.cuh"
#include "kvserve/platform/cuda/mma_sm80.cuh"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/prefill_tiles.cuh"

namespace kvserve::platform::cuda {
namespace {

constexpr int kBlockN = 64;  // K/V positions per tile

template <typename KV, int HEAD_DIM, int WARPS, int M_TILES>
struct Tile {
  static constexpr bool kFp8 = kIsFp8<KV>;
  static constexpr int kLoadChunks = HEAD_DIM * int{sizeof(KV)} / 16;  // cp.async chunks per row
  static constexpr int kLoadElems = 16 / int{sizeof(KV)};              // elements per chunk
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kRowsPerWarp = 16 * M_TILES;
  static constexpr int kBlockM = WARPS * kRowsPerWarp;
  static constexpr int kChunks = HEAD_DIM / 8;  // 16-byte chunks per row
  static constexpr int kKSteps = HEAD_DIM / 16;
  static constexpr int kRow = ops::tc_smem_row_elems(HEAD_DIM);  // shared-memory row (elements)
  static constexpr bool kQInRegs = M_TILES == 1 && HEAD_DIM <= 128;
  // Q, then two K and two V stages, then (fp8) the widened bf16 K and V tiles.
  static constexpr size_t kSmemBytes = size_t{kBlockM} * kRow * 2 +
                                       size_t{4 * kBlockN} * kRow * sizeof(KV) +
                                       (kFp8 ? size_t{2 * kBlockN} * kRow * 2 : 0);
  static_assert(kSmemBytes <= size_t{ops::kMaxSmemPerBlock}, "a block's shared memory");
  // Element offset of (row, 16-byte chunk): the chunk index XOR row % 8 puts the 8 rows that one
  // ldmatrix phase reads into 8 different bank groups.
  static __device__ __forceinline__ int at(int row, int chunk) {
    return swizzled_offset<kRow>(row, chunk);
  }
  // Element offset in a K/V stage of the cp.async chunk (row, chunk): swizzled bf16 (what
  // ldmatrix reads), or plain fp8 rows (what the widening reads).
  static __device__ __forceinline__ int stage_at(int row, int chunk) {
    return stage_offset<kRow, kFp8, kLoadElems>(row, chunk);
  }
};

// CONTIGUOUS: K/V rows page_indptr[b] + t (page_ids null, page_shift 0), a compile-time choice so
// that the in-place read's loads stay as they are.
template <typename KV, int HEAD_DIM, int WARPS, int M_TILES, bool CONTIGUOUS>
__global__ void __launch_bounds__(WARPS * 32)
    paged_prefill_kernel(const __grid_constant__ ops::PagedPrefillParams p, int page_shift,
                         int num_tiles) {
  using T = Tile<KV, HEAD_DIM, WARPS, M_TILES>;
  constexpr int kBlockM = T::kBlockM;
  constexpr int kChunks = T::kChunks;
  constexpr int kNT = kBlockN / 8;   // n8 tiles of S per m-tile
  constexpr int kDT = HEAD_DIM / 8;  // n8 tiles of O per m-tile
  constexpr int kRow = T::kRow;
  extern __shared__ __align__(128) unsigned char smem[];
  auto* sQ = reinterpret_cast<__nv_bfloat16*>(smem);
  KV* sK = reinterpret_cast<KV*>(sQ + kBlockM * kRow);  // [2][kBlockN][kRow]
  KV* sV = sK + 2 * kBlockN * kRow;                     // [2][kBlockN][kRow]
  // fp8: the bf16 tiles a landed stage is widened into ([kBlockN][kRow] each, swizzled).
  auto* sKw = reinterpret_cast<__nv_bfloat16*>(sV + 2 * kBlockN * kRow);
  __nv_bfloat16* sVw = sKw + kBlockN * kRow;

  const int tid = threadIdx.x;
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int kvh = blockIdx.y;
  const int tile = num_tiles - 1 - static_cast<int>(blockIdx.x);

  const PrefillTile pt = locate_prefill_tile<kBlockM>(p, group, tile);
  const int b = pt.b;
  const int q0 = pt.q0;
  const int q_len = pt.q_len;
  const int rows = pt.rows;
  const int m0 = pt.m0;
  if (m0 >= rows) return;  // a spare tile
  const int kv_len = p.kv_lens[b];
  // KV positions this tile needs ([0, kv_end)) and those every row sees ([0, kv_full)).
  const int tok_first = m0 / group;
  const int tok_last = min(rows - 1, m0 + kBlockM - 1) / group;
  const int kv_end = p.causal ? max(0, min(kv_len, kv_len - q_len + tok_last + 1)) : kv_len;
  const int kv_full = p.causal ? kv_len - q_len + tok_first + 1 : kv_len;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;
  // Sliding window: row of token tok sees keys >= kv_len - q_len + tok - window_left; the tile
  // starts at its first row's bound, and tiles below its last row's bound are masked.
  const bool windowed = p.window_left >= 0;
  const int win_first = windowed ? max(0, kv_len - q_len + tok_first - p.window_left) : 0;
  const int win_last = windowed ? kv_len - q_len + tok_last - p.window_left : 0;
  const int j0 = min(n_tiles, win_first / kBlockN);

  const auto* qg = static_cast<const __nv_bfloat16*>(p.q);
  const auto* kg = static_cast<const KV*>(p.k_cache);
  const auto* vg = static_cast<const KV*>(p.v_cache);
  const int32_t first = p.page_indptr[b];
  const int32_t* pages = CONTIGUOUS ? nullptr : p.page_ids + first;
  const int64_t kv_row =
      p.kv_stride != 0 ? p.kv_stride : static_cast<int64_t>(p.num_kv_heads) * HEAD_DIM;
  const int64_t q_row =
      p.q_stride != 0 ? p.q_stride : static_cast<int64_t>(p.num_q_heads) * HEAD_DIM;
  const int page_mask = (1 << page_shift) - 1;

  // Q tile -> shared (rows past the request's end are zeros).
  for (int idx = tid; idx < kBlockM * kChunks; idx += T::kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const int m = m0 + r;
    const bool valid = m < rows;
    const int tok = valid ? m / group : 0;
    const int h = kvh * group + (valid ? m - tok * group : 0);
    const __nv_bfloat16* src =
        qg + static_cast<int64_t>(q0 + tok) * q_row + static_cast<int64_t>(h) * HEAD_DIM + c * 8;
    cp_async16(smem_u32(sQ + T::at(r, c)), valid ? src : qg, valid);
  }
  auto load_kv = [&](int j, int stage) {
    const int n0 = j * kBlockN;
    KV* dk = sK + stage * kBlockN * kRow;
    KV* dv = sV + stage * kBlockN * kRow;
    for (int idx = tid; idx < kBlockN * T::kLoadChunks; idx += T::kThreads) {
      const int r = idx / T::kLoadChunks;
      const int c = idx % T::kLoadChunks;
      const int t = n0 + r;
      const bool valid = t < kv_len;
      int64_t off = 0;
      if (valid) {
        const int64_t slot =
            CONTIGUOUS
                ? int64_t{first} + t
                : (static_cast<int64_t>(pages[t >> page_shift]) << page_shift) | (t & page_mask);
        off = slot * kv_row + static_cast<int64_t>(kvh) * HEAD_DIM + c * T::kLoadElems;
      }
      cp_async16(smem_u32(dk + T::stage_at(r, c)), kg + off, valid);
      cp_async16(smem_u32(dv + T::stage_at(r, c)), vg + off, valid);
    }
  };
  if (n_tiles > j0) load_kv(j0, 0);
  cp_async_commit();

  // Per thread: rows g and g + 8 of each m-tile (g = lane / 4); the last KV position each sees.
  const int g = lane / 4;
  const int quad = lane % 4;
  // fp8: q . (stored * k_scale) = k_scale (q . stored), folded into the softmax scale.
  // Soft-capping: S becomes cap * tanh(S * sm_scale / cap), then only log2(e) scales it.
  const float raw_scale = T::kFp8 ? p.sm_scale * p.k_scale : p.sm_scale;
  const bool capped = p.logit_softcap > 0.f;
  const float cap_pre = capped ? raw_scale / p.logit_softcap : 0.f;
  const float scale = capped ? kLog2e : raw_scale * kLog2e;
  const float v_scale = T::kFp8 ? p.v_scale : 1.f;
  int limit[M_TILES][2];
  float m_run[M_TILES][2], l_run[M_TILES][2];
  float o[M_TILES][kDT][4];
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int m = m0 + warp * T::kRowsPerWarp + mt * 16 + g + 8 * h;
      limit[mt][h] = p.causal ? min(kv_len - 1, kv_len - q_len + m / group) : kv_len - 1;
      m_run[mt][h] = -INFINITY;
      l_run[mt][h] = 0.f;
    }
#pragma unroll
    for (int dt = 0; dt < kDT; ++dt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        o[mt][dt][i] = 0.f;
  }
  uint32_t qf[T::kQInRegs ? T::kKSteps : 1][4];

  // ldmatrix lane roles: lanes 8j..8j+7 address the rows of matrix j.
  const int lm_j = lane / 8;
  const int lm_r = lane % 8;
  auto load_q_frag = [&](uint32_t(&a)[4], int mt, int kk) {
    const int row = warp * T::kRowsPerWarp + mt * 16 + (lm_j & 1) * 8 + lm_r;
    ldmatrix_x4(a, smem_u32(sQ + T::at(row, kk * 2 + (lm_j >> 1))));
  };

  for (int j = j0; j < n_tiles; ++j) {
    const int stage = (j - j0) & 1;
    if (j + 1 < n_tiles) load_kv(j + 1, stage ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (T::kQInRegs) {
      if (j == j0) {
#pragma unroll
        for (int kk = 0; kk < T::kKSteps; ++kk)
          load_q_frag(qf[kk], 0, kk);
      }
    }
    const __nv_bfloat16* k_s;
    const __nv_bfloat16* v_s;
    if constexpr (T::kFp8) {
      // Widen the landed stage (8 elements per thread and step); every warp reads every row, so
      // the block syncs. The previous tile's reads of the bf16 tiles ended at the loop's last sync.
      const KV* k8 = sK + stage * kBlockN * kRow;
      const KV* v8 = sV + stage * kBlockN * kRow;
      for (int idx = tid; idx < kBlockN * kChunks; idx += T::kThreads) {
        const int r = idx / kChunks;
        const int c = idx % kChunks;
        const uint2 kr = *reinterpret_cast<const uint2*>(k8 + r * kRow + c * 8);
        const uint2 vr = *reinterpret_cast<const uint2*>(v8 + r * kRow + c * 8);
        *reinterpret_cast<uint4*>(sKw + T::at(r, c)) = fp8x8_to_bf16x8<KV>(kr);
        *reinterpret_cast<uint4*>(sVw + T::at(r, c)) = fp8x8_to_bf16x8<KV>(vr);
      }
      __syncthreads();
      k_s = sKw;
      v_s = sVw;
    } else {
      k_s = reinterpret_cast<const __nv_bfloat16*>(sK) + stage * kBlockN * kRow;
      v_s = reinterpret_cast<const __nv_bfloat16*>(sV) + stage * kBlockN * kRow;
    }

    // S = Q K^T.
    float s[M_TILES][kNT][4];
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          s[mt][nt][i] = 0.f;
#pragma unroll
    for (int kk = 0; kk < T::kKSteps; ++kk) {
      uint32_t a[M_TILES][4];
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        if constexpr (T::kQInRegs) {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            a[mt][i] = qf[kk][i];
        } else {
          load_q_frag(a[mt], mt, kk);
        }
      }
#pragma unroll
      for (int nt2 = 0; nt2 < kNT / 2; ++nt2) {
        uint32_t bk[4];
        const int row = nt2 * 16 + (lm_j >> 1) * 8 + lm_r;
        ldmatrix_x4(bk, smem_u32(k_s + T::at(row, kk * 2 + (lm_j & 1))));
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_bf16(s[mt][2 * nt2], a[mt], bk[0], bk[1]);
          mma_bf16(s[mt][2 * nt2 + 1], a[mt], bk[2], bk[3]);
        }
      }
    }

    if (capped) {
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt)
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            s[mt][nt][i] = p.logit_softcap * tanhf(s[mt][nt][i] * cap_pre);
    }

    // Mask the diagonal and the end of the KV (only tiles that reach past what all rows see),
    // and keys below a row's window (only tiles below the last row's bound).
    const int n0 = j * kBlockN;
    if (n0 + kBlockN > kv_full || (windowed && n0 < win_last)) {
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        // The first key each of the thread's two rows sees (the window's bound; 0 without one),
        // recomputed here rather than held in registers through the loop.
        int lower[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = m0 + warp * T::kRowsPerWarp + mt * 16 + g + 8 * h;
          lower[h] = windowed ? kv_len - q_len + m / group - p.window_left : 0;
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int key = n0 + nt * 8 + 2 * quad + (i & 1);
            if (key > limit[mt][i >> 1] || key < lower[i >> 1]) s[mt][nt][i] = -INFINITY;
          }
      }
    }

    // Online softmax (log2 domain), then P as bf16 A fragments.
#pragma unroll
    for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          mx = fmaxf(mx, fmaxf(s[mt][nt][2 * h], s[mt][nt][2 * h + 1]));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float m_new = fmaxf(m_run[mt][h], mx * scale);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that saw nothing yet
        const float corr = fast_exp2(m_run[mt][h] - m_use);
        m_run[mt][h] = m_new;
        float sum = 0.f;
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float pv = fast_exp2(fmaf(s[mt][nt][2 * h + e], scale, -m_use));
            s[mt][nt][2 * h + e] = pv;
            sum += pv;
          }
        }
        l_run[mt][h] = l_run[mt][h] * corr + sum;
#pragma unroll
        for (int dt = 0; dt < kDT; ++dt) {
          o[mt][dt][2 * h] *= corr;
          o[mt][dt][2 * h + 1] *= corr;
        }
      }
    }

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[M_TILES][4];
#pragma unroll
      for (int mt = 0; mt < M_TILES; ++mt) {
        a[mt][0] = pack_bf16(s[mt][2 * kk][0], s[mt][2 * kk][1]);
        a[mt][1] = pack_bf16(s[mt][2 * kk][2], s[mt][2 * kk][3]);
        a[mt][2] = pack_bf16(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
        a[mt][3] = pack_bf16(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
      }
#pragma unroll
      for (int dt2 = 0; dt2 < kDT / 2; ++dt2) {
        uint32_t bv[4];
        const int row = kk * 16 + (lm_j & 1) * 8 + lm_r;
        ldmatrix_x4_trans(bv, smem_u32(v_s + T::at(row, dt2 * 2 + (lm_j >> 1))));
#pragma unroll
        for (int mt = 0; mt < M_TILES; ++mt) {
          mma_bf16(o[mt][2 * dt2], a[mt], bv[0], bv[1]);
          mma_bf16(o[mt][2 * dt2 + 1], a[mt], bv[2], bv[3]);
        }
      }
    }
    __syncthreads();  // this stage is reloaded by the next iteration's prefetch
  }
  cp_async_wait<0>();
  __syncthreads();  // the Q tile (no K/V tile) landed; every warp is done with shared memory

  // O / l -> bf16, staged through the Q tile for 16-byte stores.
#pragma unroll
  for (int mt = 0; mt < M_TILES; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = l_run[mt][h];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = l > 0.f ? v_scale / l : 0.f;
      const int row = warp * T::kRowsPerWarp + mt * 16 + g + 8 * h;
#pragma unroll
      for (int dt = 0; dt < kDT; ++dt) {
        *reinterpret_cast<uint32_t*>(sQ + T::at(row, dt) + 2 * quad) =
            pack_bf16(o[mt][dt][2 * h] * inv, o[mt][dt][2 * h + 1] * inv);
      }
    }
  }
  __syncthreads();
  auto* og = static_cast<__nv_bfloat16*>(p.out);
  for (int idx = tid; idx < kBlockM * kChunks; idx += T::kThreads) {
    const int r = idx / kChunks;
    const int c = idx % kChunks;
    const int m = m0 + r;
    if (m >= rows) continue;
    const int tok = m / group;
    const int h = kvh * group + m - tok * group;
    *reinterpret_cast<uint4*>(og + (static_cast<int64_t>(q0 + tok) * p.num_q_heads + h) * HEAD_DIM +
                              c * 8) = *reinterpret_cast<const uint4*>(sQ + T::at(r, c));
  }
}

template <typename KV, int HEAD_DIM, int WARPS, int M_TILES, bool CONTIGUOUS>
auto* configured_prefill_kernel() {
  using T = Tile<KV, HEAD_DIM, WARPS, M_TILES>;
  auto* kernel = paged_prefill_kernel<KV, HEAD_DIM, WARPS, M_TILES, CONTIGUOUS>;
  static const bool configured = [&] {
    KV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(T::kSmemBytes)));
    return true;
  }();
  (void)configured;
  return kernel;
}

template <typename KV, int HEAD_DIM, int WARPS, int M_TILES>
void launch(const ops::PagedPrefillParams& p, int page_shift, cudaStream_t stream) {
  using T = Tile<KV, HEAD_DIM, WARPS, M_TILES>;
  auto* kernel = p.page_ids == nullptr
                     ? configured_prefill_kernel<KV, HEAD_DIM, WARPS, M_TILES, true>()
                     : configured_prefill_kernel<KV, HEAD_DIM, WARPS, M_TILES, false>();
  const int64_t tiles = prefill_query_tiles(p, T::kBlockM);
  if (tiles > 0x7fffffff) {
    detail::check_failed(__FILE__, __LINE__, "paged prefill: too many query tiles", std::string(),
                         std::to_string(tiles));
  }
  const dim3 grid(static_cast<unsigned>(tiles), p.num_kv_heads);
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, page_shift, static_cast<int>(tiles));
  KV_CUDA_CHECK(cudaGetLastError());
}

[[noreturn]] void unsupported(const char* what, int value) {
  detail::check_failed(__FILE__, __LINE__, what, std::string(), std::to_string(value));
}

// The one boundary where runtime values become template parameters.
template <typename KV, int HEAD_DIM>
void dispatch_variant(const ops::PagedPrefillParams& p, int page_shift, cudaStream_t s) {
  switch (p.variant) {
    case ops::PrefillVariant::kM64W4:
      return launch<KV, HEAD_DIM, 4, 1>(p, page_shift, s);
    case ops::PrefillVariant::kM128W8:
      return launch<KV, HEAD_DIM, 8, 1>(p, page_shift, s);
    case ops::PrefillVariant::kM128W4:
      // Head dim 256: two m-tiles of O accumulators would not fit the registers; the same 128
      // rows on 8 warps.
      if constexpr (HEAD_DIM > 128) {
        return launch<KV, HEAD_DIM, 8, 1>(p, page_shift, s);
      } else {
        return launch<KV, HEAD_DIM, 4, 2>(p, page_shift, s);
      }
    default:
      unsupported("paged prefill: variant (resolve kAuto first)", static_cast<int>(p.variant));
  }
}

template <typename KV>
void dispatch_head_dim(const ops::PagedPrefillParams& p, int page_shift, cudaStream_t s) {
  switch (p.head_dim) {
    case 64:
      return dispatch_variant<KV, 64>(p, page_shift, s);
    case 80:
      return dispatch_variant<KV, 80>(p, page_shift, s);
    case 96:
      return dispatch_variant<KV, 96>(p, page_shift, s);
    case 128:
      return dispatch_variant<KV, 128>(p, page_shift, s);
    case 256:
      return dispatch_variant<KV, 256>(p, page_shift, s);
    default:
      unsupported("paged prefill: head_dim", p.head_dim);
  }
}

}  // namespace

void paged_prefill(const ops::PagedPrefillParams& p, StreamHandle stream) {
  if (p.batch == 0 || p.total_q == 0) return;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.num_q_heads / p.num_kv_heads > 8) {
    unsupported("paged prefill: GQA group (num_q_heads / num_kv_heads, 1..8) of num_q_heads",
                p.num_q_heads);
  }
  int page_shift = 0;
  while ((1 << page_shift) < p.page_size)
    ++page_shift;
  if ((1 << page_shift) != p.page_size || page_shift > 7) {
    unsupported("paged prefill: page size", p.page_size);
  }
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  switch (p.kv_dtype) {
    case DType::kBF16:
      return dispatch_head_dim<__nv_bfloat16>(p, page_shift, s);
    case DType::kFP8E4M3:
      return dispatch_head_dim<__nv_fp8_e4m3>(p, page_shift, s);
    case DType::kFP8E5M2:
      return dispatch_head_dim<__nv_fp8_e5m2>(p, page_shift, s);
    default:
      unsupported("paged prefill: KV cache dtype (bf16, fp8_e4m3, fp8_e5m2)",
                  static_cast<int>(p.kv_dtype));
  }
}

}  // namespace kvserve::platform::cuda

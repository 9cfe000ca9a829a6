// cuda-paged prefill / extend attention for Hopper (sm_90a), in FlashAttention-3's manner: wgmma
// with operands in 128-byte-swizzled shared memory, a producer warpgroup filling a multi-stage
// K/V pipeline that mbarriers hand to two consumer warpgroups, and the online softmax in
// registers. The mma.sync kernel (paged_prefill.cu) stays for everything this one does not
// cover: ops::paged_prefill picks (ops/paged_prefill.cpp: resolve_prefill_variant).
//
// Work: one block per (query tile of 128 rows, KV head), rows = (token, query head of the GQA
// group) pairs packed token-major as in the mma.sync kernel, so one K/V tile serves the group.
// The grid walks the tiles from the last (longest causal rows) to the first (prefill_tiles.cuh).
//
// Warp roles (384 threads, __launch_bounds__(384, 1): 168 registers each at entry):
//   * warpgroup 0, the producer (setmaxnreg down to 56): cp.async brings the Q tile; each K/V
//     tile of kBlockN positions goes into stage i % kStages by TMA where runs of slots allow
//     (contiguous K/V, pages of 8+ slots: warp 0 issues one box of a run's slots x 64 columns
//     per page and column block, counted on full[stage] as bytes), else by cp.async gathering
//     rows through the CSR page table (any page size; also the last tile of a request when it
//     has rows past the end, which must be zeros); after a cp.async group lands the producer
//     fences the async proxy and arrives on full[stage] (128 arrivals either way). Before
//     refilling a stage it waits on empty[stage].
//   * warpgroups 1 and 2, the consumers (setmaxnreg up to 224): 64 query rows each.
//     S = Q K^T: wgmma m64 n{kBlockN} k16, A (Q) and B (K) from shared memory, K-major.
//     O += P V: wgmma m64 n{head_dim} k16, A (P, bf16) from registers: the f32 S accumulator
//     fragment of two n8 blocks is exactly the m64k16 A fragment once packed in pairs; B (V)
//     from shared memory, MN-major (transpose flag).
//     Softmax: online, log2 domain (scores times sm_scale * log2 e, ex2.approx), row max and sum
//     over the lane quad that shares a row. Causal masking only on tiles that reach past the
//     positions every row sees; tiles past the last row's diagonal are never loaded.
//     Intra-warpgroup overlap (kOverlap, when three or more stages fit): iteration i issues
//     S_i = Q K_i and O += P_{i-1} V_{i-1} back to back, waits for S_i alone and runs its
//     softmax while the P V product still runs; then waits, releases stage i - 1, rescales O.
//     Both consumers arrive on empty[stage] (256 arrivals) once their products read it.
// Epilogue: each consumer divides by its row sums, stages its 64 rows as bf16 in its own part of
// the Q tile (swizzled) and writes 16-byte chunks of the rows that exist.
//
// Limits (the dispatch checks them): bf16 K/V, head_dim 64, 128 or 256, no sliding window or
// soft-capping, GQA groups 1..8, page sizes 1..128 (powers of two).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "kvserve/platform/cuda/cuda_check.h"
#include "kvserve/platform/cuda/mma_sm80.cuh"
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/prefill_tiles.cuh"
#include "kvserve/platform/cuda/wgmma_sm90.cuh"

namespace kvserve::platform::cuda {
namespace {

template <int HEAD_DIM>
struct Sm90Tile {
  static constexpr int kBlockM = 128;  // 2 consumer warpgroups x 64 rows
  // Head dim 256: 64 positions (the O accumulators take 128 registers); else 128.
  static constexpr int kBlockN = HEAD_DIM == 256 ? 64 : 128;
  // As many K+V stages as fit 227 KiB next to Q (and 1 KiB of alignment slack).
  static constexpr int kStages = HEAD_DIM == 64 ? 4 : (HEAD_DIM == 128 ? 3 : 2);
  static constexpr bool kOverlap = kStages >= 3;
  static constexpr int kThreads = 384;
  static constexpr int kChunks = HEAD_DIM / 8;  // 16-byte chunks per row
  static constexpr uint32_t kQBytes = kBlockM * HEAD_DIM * 2;
  static constexpr uint32_t kTileBytes = kBlockN * HEAD_DIM * 2;  // one K or V tile
  static constexpr uint32_t kStageBytes = 2 * kTileBytes;         // K, then V
  static constexpr uint32_t kBarOffset = kQBytes + kStages * kStageBytes;
  static constexpr size_t kSmemBytes = 1024 + kBarOffset + 2 * kStages * 8;
  static_assert(kSmemBytes <= size_t{ops::kMaxSmemPerBlock}, "a block's shared memory");
  static constexpr int kProducerRegs = 56;
  static constexpr int kConsumerRegs = 224;
  static_assert(kThreads / 3 * (kProducerRegs + 2 * kConsumerRegs) <= 65536, "register file");
};

template <int HEAD_DIM, bool CONTIGUOUS, bool PINGPONG>
__global__ void __launch_bounds__(384, 1)
    paged_prefill_sm90_kernel(const __grid_constant__ ops::PagedPrefillParams p, int page_shift,
                              int num_tiles, int tma_rows, const __grid_constant__ CUtensorMap tm_k,
                              const __grid_constant__ CUtensorMap tm_v) {
  using T = Sm90Tile<HEAD_DIM>;
  constexpr int kBlockM = T::kBlockM;
  constexpr int kBlockN = T::kBlockN;
  constexpr int kStages = T::kStages;
  constexpr int kChunks = T::kChunks;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  // Swizzle atoms need 1024-byte alignment; the dynamic base only promises less.
  const uint32_t smem = (smem_u32(smem_raw) + 1023u) & ~1023u;
  unsigned char* smem_ptr = smem_raw + (smem - smem_u32(smem_raw));
  const uint32_t sQ = smem;
  auto sK = [&](int s) { return smem + T::kQBytes + s * T::kStageBytes; };
  auto sV = [&](int s) { return smem + T::kQBytes + s * T::kStageBytes + T::kTileBytes; };
  auto full = [&](int s) { return smem + T::kBarOffset + 8 * s; };
  auto empty = [&](int s) { return smem + T::kBarOffset + 8 * (kStages + s); };

  const int tid = threadIdx.x;
  const int group = p.num_q_heads / p.num_kv_heads;
  const int kvh = blockIdx.y;
  const int tile = num_tiles - 1 - static_cast<int>(blockIdx.x);
  const PrefillTile pt = locate_prefill_tile<kBlockM>(p, group, tile);
  const int b = pt.b;
  const int q0 = pt.q0;
  const int q_len = pt.q_len;
  const int rows = pt.rows;
  const int m0 = pt.m0;
  if (m0 >= rows) return;  // a spare tile (uniform: the whole block leaves)
  const int kv_len = p.kv_lens[b];
  const int tok_first = m0 / group;
  const int tok_last = min(rows - 1, m0 + kBlockM - 1) / group;
  // KV positions the tile needs ([0, kv_end)) and those every row sees ([0, kv_full)).
  const int kv_end = p.causal ? max(0, min(kv_len, kv_len - q_len + tok_last + 1)) : kv_len;
  const int kv_full = p.causal ? kv_len - q_len + tok_first + 1 : kv_len;
  const int n_tiles = (kv_end + kBlockN - 1) / kBlockN;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full(s), 128);
      mbar_init(empty(s), 256);
    }
  }
  __syncthreads();

  if (tid < 128) {
    // ---- producer ----
    setmaxnreg_dec<T::kProducerRegs>();
    if (n_tiles == 0) return;  // every row sees nothing: the consumers write zeros
    const auto* qg = static_cast<const __nv_bfloat16*>(p.q);
    const auto* kg = static_cast<const __nv_bfloat16*>(p.k_cache);
    const auto* vg = static_cast<const __nv_bfloat16*>(p.v_cache);
    const int64_t q_row =
        p.q_stride != 0 ? p.q_stride : static_cast<int64_t>(p.num_q_heads) * HEAD_DIM;
    const int64_t kv_row =
        p.kv_stride != 0 ? p.kv_stride : static_cast<int64_t>(p.num_kv_heads) * HEAD_DIM;
    const int32_t first = p.page_indptr[b];
    const int32_t* pages = CONTIGUOUS ? nullptr : p.page_ids + first;
    const int page_mask = (1 << page_shift) - 1;
    // Thread roles: chunk c of rows r0, r0 + kRowStep, ... (consecutive threads, consecutive
    // 16-byte chunks of a row: coalesced).
    constexpr int kRowStep = 128 / kChunks;
    const int c = tid % kChunks;
    const int r0 = tid / kChunks;
    const int col = c * 8;
    // Q tile (rows past the request's end are zeros).
    for (int r = r0; r < kBlockM; r += kRowStep) {
      const int m = m0 + r;
      const bool valid = m < rows;
      const int tok = valid ? m / group : 0;
      const int h = kvh * group + (valid ? m - tok * group : 0);
      const __nv_bfloat16* src =
          qg + static_cast<int64_t>(q0 + tok) * q_row + static_cast<int64_t>(h) * HEAD_DIM + col;
      cp_async16(sQ + tile_offset(kBlockM, r, col), valid ? src : qg, valid);
    }
    cp_async_commit();
    const int64_t head_off = static_cast<int64_t>(kvh) * HEAD_DIM + col;
    // Tile i's rows by cp.async into stage s (zeros past the end: P = 0 must not meet NaN).
    auto gather_tile = [&](int i, int s) {
      const int n0 = i * kBlockN;
      for (int r = r0; r < kBlockN; r += kRowStep) {
        const int t = n0 + r;
        const bool valid = t < kv_len;
        int64_t off = 0;
        if (valid) {
          const int64_t slot =
              CONTIGUOUS
                  ? int64_t{first} + t
                  : (static_cast<int64_t>(pages[t >> page_shift]) << page_shift) | (t & page_mask);
          off = slot * kv_row + head_off;
        }
        const uint32_t o = tile_offset(kBlockN, r, col);
        cp_async16(sK(s) + o, kg + off, valid);
        cp_async16(sV(s) + o, vg + off, valid);
      }
      cp_async_commit();
    };
    if (tma_rows > 0) {
      // TMA (tma_rows > 0: runs of that many slots are contiguous: the page, or all of a
      // contiguous request): warp 0 issues a tile's boxes of tma_rows x 64 columns, each lane
      // some of them, after thread 0's arrival announced the tile's bytes; the other 127 threads
      // arrive plainly (full[] counts 128). The last tile of a request, when it has rows past
      // kv_len, is gathered by cp.async instead (its zeros). Tile 0's arrivals wait for Q.
      if (tid == 0) {
        tma_prefetch_map(&tm_k);
        tma_prefetch_map(&tm_v);
      }
      const int runs = kBlockN / tma_rows;
      const int boxes = 2 * (HEAD_DIM / 64) * runs;  // K and V x column blocks x runs
      for (int i = 0; i < n_tiles; ++i) {
        const int s = i % kStages;
        if (i >= kStages) mbar_wait(empty(s), ((i / kStages) - 1) & 1);
        const int n0 = i * kBlockN;
        if (n0 + kBlockN <= kv_len) {
          if (i == 0) cp_async_wait<0>();  // Q
          if (i == 0) fence_proxy_async();
          if (tid == 0) mbar_arrive_expect_tx(full(s), T::kStageBytes);
          if (tid < 32) {
            __syncwarp();
            for (int bx = tid; bx < boxes; bx += 32) {
              const int run = bx % runs;
              const int cb = (bx / runs) % (HEAD_DIM / 64);
              const bool is_v = bx >= boxes / 2;
              const int t = n0 + run * tma_rows;
              const int slot =
                  CONTIGUOUS ? first + t : (pages[t >> page_shift] << page_shift) | (t & page_mask);
              const uint32_t dst =
                  (is_v ? sV(s) : sK(s)) + cb * kBlockN * 128 + run * tma_rows * 128;
              tma_load_3d(dst, is_v ? &tm_v : &tm_k, cb * 64, kvh, slot, full(s));
            }
          }
          if (tid != 0) mbar_arrive(full(s));
        } else {
          gather_tile(i, s);
          cp_async_wait<0>();
          fence_proxy_async();
          mbar_arrive(full(s));
        }
      }
      return;
    }
    for (int i = 0; i < n_tiles; ++i) {
      const int s = i % kStages;
      if (i >= kStages) mbar_wait(empty(s), ((i / kStages) - 1) & 1);
      gather_tile(i, s);
      if (i > 0) {  // tile i - 1 (and Q) landed: hand it over
        cp_async_wait<1>();
        fence_proxy_async();
        mbar_arrive(full((i - 1) % kStages));
      }
    }
    cp_async_wait<0>();
    fence_proxy_async();
    mbar_arrive(full((n_tiles - 1) % kStages));
    return;
  }

  // ---- consumers ----
  setmaxnreg_inc<T::kConsumerRegs>();
  const int wg = tid / 128 - 1;  // 0 or 1: rows [64 wg, 64 wg + 64) of the tile
  const int lt = tid % 128;
  const int warp = lt / 32;
  const int lane = lt % 32;
  const int g = lane / 4;
  const int quad = lane % 4;
  const float scale = p.sm_scale * kLog2e;
  // This thread's two rows (h = 0, 1): tile rows 64 wg + 16 warp + g + 8 h; the last KV
  // position each sees.
  int limit[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int m = m0 + wg * 64 + warp * 16 + g + 8 * h;
    limit[h] = p.causal ? min(kv_len - 1, kv_len - q_len + m / group) : kv_len - 1;
  }
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};
  float o[HEAD_DIM / 2];         // m64 n{HEAD_DIM} accumulator fragment
  float s[kBlockN / 2];          // m64 n{kBlockN} accumulator fragment
  uint32_t pf[kBlockN / 16][4];  // P as m64k16 A fragments
#pragma unroll
  for (int i = 0; i < HEAD_DIM / 2; ++i)
    o[i] = 0.f;
#pragma unroll
  for (int i = 0; i < kBlockN / 2; ++i)
    s[i] = 0.f;

  // Descriptors: Q rows of this warpgroup (A, K-major), K (B, K-major), V (B, MN-major).
  const uint32_t q_base = sQ + wg * 64 * 128;
  auto issue_s = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < HEAD_DIM / 16; ++kk) {
      const uint32_t in_block = (kk % 4) * 32;  // k16 step inside a 64-column block
      const uint64_t da = wgmma_desc(q_base + (kk / 4) * kBlockM * 128 + in_block, 16, 1024);
      const uint64_t db = wgmma_desc(sK(stage) + (kk / 4) * kBlockN * 128 + in_block, 16, 1024);
      wgmma_ss<kBlockN>(s, da, db, kk > 0 ? 1 : 0);
    }
  };
  auto issue_pv = [&](int stage) {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t db = wgmma_desc(sV(stage) + kk * 2048, kBlockN * 128, 1024);
      wgmma_rs_tb<HEAD_DIM>(o, pf[kk], db, 1);
    }
  };
  // Masks S of tile i, turns it into exp2 values in place; returns the O correction per row.
  auto softmax = [&](int i, float(&corr)[2]) {
    const int n0 = i * kBlockN;
    if (n0 + kBlockN > kv_full) {
#pragma unroll
      for (int nb = 0; nb < kBlockN / 8; ++nb)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int key = n0 + nb * 8 + 2 * quad + (e & 1);
          if (key > limit[e >> 1]) s[nb * 4 + e] = -INFINITY;
        }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kBlockN / 8; ++nb)
        mx = fmaxf(mx, fmaxf(s[nb * 4 + 2 * h], s[nb * 4 + 2 * h + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run[h], mx * scale);
      const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row that saw nothing yet
      corr[h] = fast_exp2(m_run[h] - m_use);
      m_run[h] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kBlockN / 8; ++nb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pv = fast_exp2(fmaf(s[nb * 4 + 2 * h + e], scale, -m_use));
          s[nb * 4 + 2 * h + e] = pv;
          sum += pv;
        }
      l_run[h] = l_run[h] * corr[h] + sum;
    }
  };
  auto rescale_and_pack = [&](const float(&corr)[2]) {
#pragma unroll
    for (int nb = 0; nb < HEAD_DIM / 8; ++nb) {
      o[nb * 4 + 0] *= corr[0];
      o[nb * 4 + 1] *= corr[0];
      o[nb * 4 + 2] *= corr[1];
      o[nb * 4 + 3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      pf[kk][0] = pack_bf16(s[8 * kk + 0], s[8 * kk + 1]);
      pf[kk][1] = pack_bf16(s[8 * kk + 2], s[8 * kk + 3]);
      pf[kk][2] = pack_bf16(s[8 * kk + 4], s[8 * kk + 5]);
      pf[kk][3] = pack_bf16(s[8 * kk + 6], s[8 * kk + 7]);
    }
  };

  // Ping-pong (PINGPONG): the two consumers take turns issuing their products, so that one's
  // softmax runs while the other's products own the tensor cores. Named barrier 3 + wg: a
  // consumer syncs on its own (256 = its 128 threads + the other's 128 arrivals) before issuing
  // and arrives on the other's after. Consumer 1 opens with one arrival for consumer 0 and skips
  // its arrival after its last issue, so both barriers end balanced.
  const int turns = T::kOverlap ? n_tiles + 1 : 2 * n_tiles;
  int turn = 0;
  auto turn_wait = [&] {
    if constexpr (PINGPONG) named_barrier(3 + wg, 256);
  };
  auto turn_pass = [&] {
    if constexpr (PINGPONG) {
      ++turn;
      if (wg == 0 || turn < turns) named_arrive(3 + (1 - wg), 256);
    }
  };
  if (PINGPONG && wg == 1 && n_tiles > 0) named_arrive(3, 256);

  // P V of tile i's stage, waited for, and the stage released (the path without overlap).
  auto pv_now = [&](int stage) {
    pin_regs(o);
    turn_wait();
    wgmma_fence();
    issue_pv(stage);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    pin_regs(o);
    mbar_arrive(empty(stage));
  };
  // Tile 0 is peeled so that no branch separates a wgmma.fence from the products it orders
  // (ptxas serialises every wgmma of the kernel when it cannot prove that).
  if (n_tiles > 0) {
    mbar_wait(full(0), 0);
    pin_regs(s);
    turn_wait();
    wgmma_fence();
    issue_s(0);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    pin_regs(s);
    float corr[2];
    softmax(0, corr);
    rescale_and_pack(corr);
    if constexpr (!T::kOverlap) pv_now(0);
  }
  for (int i = 1; i < n_tiles; ++i) {
    const int stage = i % kStages;
    const int prev = (i - 1) % kStages;
    mbar_wait(full(stage), (i / kStages) & 1);
    pin_regs(s);
    pin_regs(o);
    turn_wait();
    wgmma_fence();
    issue_s(stage);
    wgmma_commit();
    if constexpr (T::kOverlap) {
      issue_pv(prev);
      wgmma_commit();
      turn_pass();
      wgmma_wait<1>();  // S_i done; P_{i-1} V_{i-1} may still run
    } else {
      turn_pass();
      wgmma_wait<0>();
    }
    pin_regs(s);
    float corr[2];
    softmax(i, corr);
    if constexpr (T::kOverlap) {
      wgmma_wait<0>();
      pin_regs(o);
      mbar_arrive(empty(prev));
    }
    rescale_and_pack(corr);
    if constexpr (!T::kOverlap) pv_now(stage);
  }
  if (T::kOverlap && n_tiles > 0) {
    pin_regs(o);
    turn_wait();
    wgmma_fence();
    issue_pv((n_tiles - 1) % kStages);
    wgmma_commit();
    turn_pass();
    wgmma_wait<0>();
    pin_regs(o);
  }

  // Epilogue: O / l as bf16 into this warpgroup's rows of the Q tile (its wgmma reads of Q are
  // complete), then 16-byte stores of the rows that exist.
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float l = l_run[h];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int row = wg * 64 + warp * 16 + g + 8 * h;
#pragma unroll
    for (int nb = 0; nb < HEAD_DIM / 8; ++nb) {
      *reinterpret_cast<uint32_t*>(smem_ptr + tile_offset(kBlockM, row, nb * 8 + 2 * quad)) =
          pack_bf16(o[nb * 4 + 2 * h] * inv, o[nb * 4 + 2 * h + 1] * inv);
    }
  }
  named_barrier(1 + wg, 128);
  auto* og = static_cast<__nv_bfloat16*>(p.out);
  for (int idx = lt; idx < 64 * kChunks; idx += 128) {
    const int r = wg * 64 + idx / kChunks;
    const int col = (idx % kChunks) * 8;
    const int m = m0 + r;
    if (m >= rows) continue;
    const int tok = m / group;
    const int h = kvh * group + m - tok * group;
    *reinterpret_cast<uint4*>(og + (static_cast<int64_t>(q0 + tok) * p.num_q_heads + h) * HEAD_DIM +
                              col) =
        *reinterpret_cast<const uint4*>(smem_ptr + tile_offset(kBlockM, r, col));
  }
}

template <int HEAD_DIM, bool CONTIGUOUS, bool PINGPONG>
auto* configured_sm90_kernel() {
  auto* kernel = paged_prefill_sm90_kernel<HEAD_DIM, CONTIGUOUS, PINGPONG>;
  static const bool configured = [&] {
    KV_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Sm90Tile<HEAD_DIM>::kSmemBytes)));
    return true;
  }();
  (void)configured;
  return kernel;
}

// cuTensorMapEncodeTiled from the driver the runtime loaded (no link to libcuda); null if absent.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The slots a TMA box may cover in one run (0: no TMA for this launch): a whole tile for
// contiguous K/V, a page of 8+ slots (1 KiB boxes or more) up to a tile; 16-byte aligned buffers
// and row strides, and a known extent. Smaller pages gather by cp.async: boxes of one slot (128
// bytes) were correct but six times slower on an H100 (docs/perf/2026-12-06-tma-prefill.md).
int sm90_tma_rows(const ops::PagedPrefillParams& p, int block_n, int64_t kv_row) {
  if (!p.tma || p.num_slots <= 0 || p.num_slots > 0x7fffffff || kv_row % 8 != 0 ||
      reinterpret_cast<uintptr_t>(p.k_cache) % 16 != 0 ||
      reinterpret_cast<uintptr_t>(p.v_cache) % 16 != 0 || tensor_map_encoder() == nullptr) {
    return 0;
  }
  if (p.page_ids == nullptr) return block_n;
  return p.page_size >= 8 ? std::min(p.page_size, block_n) : 0;
}

// A map of the cache as [num_slots][num_kv_heads][head_dim] bf16 (row stride kv_row elements),
// boxes of `rows` slots x 1 head x 64 columns, 128-byte swizzle (the tiles' layout).
bool encode_kv_map(CUtensorMap* map, const void* base, const ops::PagedPrefillParams& p,
                   int64_t kv_row, int rows) {
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(p.head_dim),
                              static_cast<cuuint64_t>(p.num_kv_heads),
                              static_cast<cuuint64_t>(p.num_slots)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(p.head_dim) * 2,
                                 static_cast<cuuint64_t>(kv_row) * 2};
  const cuuint32_t box[3] = {64, 1, static_cast<cuuint32_t>(rows)};
  const cuuint32_t elem[3] = {1, 1, 1};
  return tensor_map_encoder()(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, const_cast<void*>(base),
                              dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                              CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

[[noreturn]] void unsupported_sm90(const char* what, int value) {
  detail::check_failed(__FILE__, __LINE__, what, std::string(), std::to_string(value));
}

template <int HEAD_DIM>
void launch_sm90(const ops::PagedPrefillParams& p, int page_shift, cudaStream_t stream) {
  using T = Sm90Tile<HEAD_DIM>;
  const bool pingpong = p.variant == ops::PrefillVariant::kSm90PingPong;
  auto* kernel = p.page_ids == nullptr
                     ? (pingpong ? configured_sm90_kernel<HEAD_DIM, true, true>()
                                 : configured_sm90_kernel<HEAD_DIM, true, false>())
                     : (pingpong ? configured_sm90_kernel<HEAD_DIM, false, true>()
                                 : configured_sm90_kernel<HEAD_DIM, false, false>());
  const int64_t tiles = prefill_query_tiles(p, T::kBlockM);
  if (tiles > 0x7fffffff) unsupported_sm90("paged prefill sm90: too many query tiles", 0);
  const dim3 grid(static_cast<unsigned>(tiles), p.num_kv_heads);
  const int64_t kv_row =
      p.kv_stride != 0 ? p.kv_stride : static_cast<int64_t>(p.num_kv_heads) * HEAD_DIM;
  CUtensorMap tm_k{};
  CUtensorMap tm_v{};
  int tma_rows = sm90_tma_rows(p, T::kBlockN, kv_row);
  if (tma_rows > 0 && !(encode_kv_map(&tm_k, p.k_cache, p, kv_row, tma_rows) &&
                        encode_kv_map(&tm_v, p.v_cache, p, kv_row, tma_rows))) {
    tma_rows = 0;  // the driver refused the map: cp.async
  }
  kernel<<<grid, T::kThreads, T::kSmemBytes, stream>>>(p, page_shift, static_cast<int>(tiles),
                                                       tma_rows, tm_k, tm_v);
  KV_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool paged_prefill_sm90_device() {
  int device = 0;
  KV_CUDA_CHECK(cudaGetDevice(&device));
  int major = 0;
  KV_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major == 9;
}

void paged_prefill_sm90(const ops::PagedPrefillParams& p, StreamHandle stream) {
  if (p.batch == 0 || p.total_q == 0) return;
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0 ||
      p.num_q_heads / p.num_kv_heads > 8) {
    unsupported_sm90("paged prefill sm90: GQA group of num_q_heads", p.num_q_heads);
  }
  if (p.kv_dtype != DType::kBF16 || p.window_left >= 0 || p.logit_softcap > 0.f) {
    unsupported_sm90("paged prefill sm90: bf16 K/V, no window or soft-cap; kv dtype",
                     static_cast<int>(p.kv_dtype));
  }
  int page_shift = 0;
  while ((1 << page_shift) < p.page_size)
    ++page_shift;
  if ((1 << page_shift) != p.page_size || page_shift > 7) {
    unsupported_sm90("paged prefill sm90: page size", p.page_size);
  }
  const auto s = static_cast<cudaStream_t>(stream.ptr);
  switch (p.head_dim) {
    case 64:
      return launch_sm90<64>(p, page_shift, s);
    case 128:
      return launch_sm90<128>(p, page_shift, s);
    case 256:
      return launch_sm90<256>(p, page_shift, s);
    default:
      unsupported_sm90("paged prefill sm90: head_dim", p.head_dim);
  }
}

}  // namespace kvserve::platform::cuda

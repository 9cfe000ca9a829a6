// Hopper (sm_90a) building blocks of the warp-specialised prefill kernel (paged_prefill_sm90.cu;
// the cluster sampler, sampling_cluster.cuh, takes its mbarriers and bulk copies):
// wgmma shared-memory descriptors for the 128-byte swizzle, the wgmma fences and groups,
// mbarriers, TMA loads (tensor and bulk), setmaxnreg, named barriers and the async-proxy fences.
// The mma_async wrappers themselves (one per N) are generated: wgmma_sm90_gen.cuh.
//
// Shared-memory tiles (what the descriptors below describe). A tile of R rows x D bf16 columns
// is stored as D / 64 column blocks of R x 128 bytes (64 elements); inside a block, row r's
// 16-byte chunk c (elements 8c..8c+7) lives at r * 128 + ((c ^ (r % 8)) * 16): the 128-byte
// swizzle, an XOR of address bits [4:6] with bits [7:9], so every block must start on a 1024-byte
// boundary (8 rows x 128 bytes, one swizzle atom). tile_offset() gives that byte offset.
//   * K-major operand (the reduction dim contiguous: Q and K of S = Q K^T): rows are M or N, 8-row
//     groups 1024 bytes apart (the stride byte offset, SBO); the leading byte offset is unused
//     with this swizzle (1 by convention). One k16 step is 32 bytes inside a block (4 per block),
//     then the next column block.
//   * MN-major operand (V of O += P V: the reduction dim, KV position, is the row): the same
//     storage read transposed (the instruction's transpose-B flag). 64 N-elements per 128-byte
//     row; the next 64 N-elements are the next column block (LBO = R * 128 bytes); the 8-row
//     K groups 1024 bytes apart (SBO). One k16 step is 16 rows = 2048 bytes.
// Descriptor bits: [0,14) start address >> 4, [16,30) LBO >> 4, [32,46) SBO >> 4, [49,52) base
// offset (0: atoms 1024-aligned), [62,64) swizzle (1 = 128 bytes).
#pragma once

#include <cstdint>

#include "kvserve/platform/cuda/wgmma_sm90_gen.cuh"

namespace kvserve::platform::cuda {
namespace {

// Byte offset of element (row, col) in a swizzled tile of `rows` rows (see above).
__device__ __forceinline__ uint32_t tile_offset(int rows, int row, int col) {
  return static_cast<uint32_t>((col >> 6) * rows * 128 + row * 128 +
                               ((((col & 63) >> 3) ^ (row & 7)) << 4) + (col & 7) * 2);
}

__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo_bytes,
                                               uint32_t sbo_bytes) {
  return static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(lbo_bytes >> 4) << 16) |
         (static_cast<uint64_t>(sbo_bytes >> 4) << 32) | (uint64_t{1} << 62);
}

// Orders this thread's register writes before the wgmma that reads them (accumulators, A).
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
// Waits until at most N of this warpgroup's committed wgmma groups are pending.
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accesses of an accumulator across a wgmma issue or wait.
template <int N>
__device__ __forceinline__ void pin_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(r[i])::"memory");
}

// Generic-proxy writes to shared memory (cp.async, st.shared) before async-proxy reads (wgmma).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

__device__ __forceinline__ void mbar_init(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// An arrival that also expects `bytes` more of asynchronous (TMA) writes before the phase ends.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}

// TMA: a box of a 3-D tensor (tensor map `map`, a __grid_constant__ kernel parameter) at
// coordinates (c0, c1, c2) into shared memory at `dst`, counted on mbarrier `bar` as it lands.
// With the map's 128-byte swizzle the pattern follows `dst`'s address bits, as tile_offset()'s
// does: a box may start on any 128-byte row of a 1024-byte-aligned tile.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const void* map, int c0, int c1, int c2,
                                            uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
      : "memory");
}
// A bulk copy (1-D TMA) of `bytes` (a multiple of 16; both addresses 16-byte aligned) from global
// memory at `src` into shared memory at `dst`, counted on mbarrier `bar` as it lands.
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes,
                                          uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
      : "memory");
}
// Generic-proxy writes to global memory before async-proxy reads of them (bulk copies, TMA).
__device__ __forceinline__ void fence_proxy_async_global() {
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
}
// Makes mbarrier_init visible to the cluster (and the async proxy) before other threads use it.
__device__ __forceinline__ void fence_mbarrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void tma_prefetch_map(const void* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Returns once the barrier's phase with this parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

// Register budget per thread of the executing warpgroup (multiples of 8 in [24, 256]).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

// bar.sync on a named barrier (1..15; 0 is __syncthreads) for `threads` threads.
__device__ __forceinline__ void named_barrier(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
// bar.arrive: counts this thread towards the barrier's `threads` without waiting.
__device__ __forceinline__ void named_arrive(int id, int threads) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

}  // namespace
}  // namespace kvserve::platform::cuda

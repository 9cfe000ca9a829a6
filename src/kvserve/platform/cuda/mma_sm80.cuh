// Tensor-core building blocks shared by the paged attention kernels (paged_prefill.cu,
// paged_decode_tc.cu): cp.async, ldmatrix, mma.sync m16n8k16 bf16 with f32 accumulators (the
// sm_80 instructions, which sm_90 runs), exp2 and bf16 packing.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace kvserve::platform::cuda {
namespace {

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared; zero-filled when !valid (src is then not read).
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c += a (16x16, row-major) * b (16x8, column-major), bf16 in, f32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// Element offset of (row, 16-byte chunk) in a tile of HEAD_DIM-element bf16 rows: the chunk index
// XOR row % 8 puts the 8 rows that one ldmatrix phase reads into 8 different bank groups.
template <int HEAD_DIM>
__device__ __forceinline__ int swizzled_offset(int row, int chunk) {
  return row * HEAD_DIM + ((chunk ^ (row & 7)) << 3);
}

// Element offset in a K/V stage of the cp.async chunk (row, chunk): swizzled bf16 (what ldmatrix
// reads), or plain fp8 rows of LOAD_ELEMS-element chunks (what the widening reads).
template <int HEAD_DIM, bool FP8, int LOAD_ELEMS>
__device__ __forceinline__ int stage_offset(int row, int chunk) {
  if constexpr (FP8) {
    return row * HEAD_DIM + chunk * LOAD_ELEMS;
  } else {
    return swizzled_offset<HEAD_DIM>(row, chunk);
  }
}

}  // namespace
}  // namespace kvserve::platform::cuda

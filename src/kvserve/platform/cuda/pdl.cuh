// Programmatic dependent launch (sm_90), for the chain of small kernels a decode step is: a kernel
// started with launch_pdl may be scheduled while its predecessor in the stream still runs, which
// hides the launch gap between them (a CUDA graph keeps these edges).
//
// The contract of every kernel launched this way: call pdl_wait() before touching any memory (it
// returns once the predecessor grid has completed and its writes are visible; immediately when
// there is no programmatic predecessor), then pdl_launch_dependents() to let the successor be
// scheduled in turn. Kernels that follow it are safe whether they are launched plainly or not.
// One kernel reads before its wait by design: the tensor-core decode attention, when its caller
// vouches that what it reads early was written before the preceding kernel started
// (PagedDecodeParams::stable_before_wait); the data the preceding kernel writes it reads after.
// Launchers pass their params' `pdl` (the platform's KernelSwitches::pdl, set at the op dispatch;
// KVSERVE_PDL=0 turns it off for A/B measurements): false launches plainly.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "kvserve/platform/cuda/cuda_check.h"

namespace kvserve::platform::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Both, in the contract's order: the first statement of a kernel launched with launch_pdl.
__device__ __forceinline__ void pdl_enter() {
  pdl_wait();
  pdl_launch_dependents();
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialization attribute
// when `pdl`; a launch error is CHECKed here (callers need no cudaGetLastError after it).
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                bool pdl, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  KV_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace kvserve::platform::cuda

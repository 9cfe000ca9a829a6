// The CUDA attention backends.
//   cuda-paged: queries read their request's KV in place through page ids: extend batches (and
//               their cross-attention) with the tensor-core paged prefill kernel, decode batches
//               with the paged decode kernel.
//   cuda-ragged: gathers each request's K/V slots into contiguous buffers every layer, then the
//                same kernels in their contiguous mode (equal to cuda-paged bit for bit); any
//                row layout (Whisper's ragged encoder layout included); no decode graphs.
#pragma once

#include <memory>

#include "kvserve/attention/backend.h"

namespace kvserve::attention {

struct CudaPagedOptions {
  // false: every extend token is a query of the decode kernel (the path before paged prefill;
  // tests compare the two).
  bool prefill_kernel = true;
  // Decode attention on tensor cores (ops::paged_decode_tc: the GQA group read once per K/V
  // tile) where it applies (head_dim 64 or 128, groups 1..8, power-of-two pages); false, or the
  // platform's KernelSwitches::decode_tc off: the CUDA-core decode kernel (ops::paged_decode).
  bool decode_tc = true;
  // cuda-ragged (seed 000's approach 2): token slot lists, a gather of each layer's K/V into
  // contiguous buffers, the kernels' contiguous mode (make_cuda_ragged_backend sets it).
  bool gather = false;
};

std::unique_ptr<AttentionBackend> make_cuda_paged_backend(platform::Platform& platform,
                                                          CudaPagedOptions options = {});
std::unique_ptr<AttentionBackend> make_cuda_ragged_backend(platform::Platform& platform,
                                                           CudaPagedOptions options = {});

}  // namespace kvserve::attention

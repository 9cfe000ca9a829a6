// The CUDA attention backends.
//   cuda-paged: queries read their request's KV in place through page ids: extend batches (and
//               their cross-attention) with the tensor-core paged prefill kernel, decode batches
//               with the paged decode kernel.
//   cuda-ragged: gathers each request's K/V slots into contiguous buffers, then one varlen
//                attention launch; any row layout (Whisper's ragged encoder layout included).
#pragma once

#include <memory>

#include "kvserve/attention/backend.h"

namespace kvserve::attention {

struct CudaPagedOptions {
  // false: every extend token is a query of the decode kernel (the path before paged prefill;
  // tests compare the two).
  bool prefill_kernel = true;
  // Decode attention on tensor cores (ops::paged_decode_tc: the GQA group read once per K/V
  // tile) where it applies (head_dim 64 or 128, groups 1..8, power-of-two pages); false, or
  // KVSERVE_DECODE_TC=0 in the environment: the CUDA-core decode kernel (ops::paged_decode).
  bool decode_tc = true;
};

std::unique_ptr<AttentionBackend> make_cuda_paged_backend(platform::Platform& platform,
                                                          CudaPagedOptions options = {});
std::unique_ptr<AttentionBackend> make_cuda_ragged_backend(platform::Platform& platform);

}  // namespace kvserve::attention

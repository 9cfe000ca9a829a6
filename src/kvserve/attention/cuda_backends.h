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
};

std::unique_ptr<AttentionBackend> make_cuda_paged_backend(platform::Platform& platform,
                                                          CudaPagedOptions options = {});
std::unique_ptr<AttentionBackend> make_cuda_ragged_backend(platform::Platform& platform);

}  // namespace kvserve::attention

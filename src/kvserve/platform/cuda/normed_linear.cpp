// ops::NormedLinearParams on CUDA: the skinny kernel's fused form where it applies (batch-1
// decode: the norm and the gated activation cost no launches of their own), else the three
// kernels it stands for, queued on the same stream.
#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/cuda/skinny_gemm.h"

namespace kvserve::platform::cuda {

void normed_linear(const ops::NormedLinearParams& p, StreamHandle stream) {
  if (p.m == 0) return;
  if (p.fused && skinny_normed_linear_applies(p)) return skinny_normed_linear(p, stream);
  rms_norm({.x = p.x,
            .residual = const_cast<void*>(p.residual_in),  // read only: residual_out is set
            .residual_out = p.residual_out,
            .out = p.normed,
            .weight = p.norm_weight,
            .dtype = p.dtype,
            .rows = p.m,
            .cols = p.k,
            .x_stride = p.k,
            .eps = p.eps,
            .weight_offset = p.weight_offset,
            .pdl = p.pdl},
           stream);
  gemm({.a = p.normed,
        .b = p.w,
        .bias = p.bias,
        .c = p.gated ? p.gate_up : p.out,
        .dtype = p.dtype,
        .m = p.m,
        .n = p.n,
        .k = p.k,
        .lda = p.k,
        .ldb = p.k,
        .ldc = p.n,
        .skinny = p.skinny,
        .pdl = p.pdl},
       stream);
  if (p.gated) {
    act_and_mul({.x = p.gate_up,
                 .out = p.out,
                 .dtype = p.dtype,
                 .activation = p.activation,
                 .num_tokens = p.m,
                 .inter = p.n / 2,
                 .pdl = p.pdl},
                stream);
  }
}

}  // namespace kvserve::platform::cuda

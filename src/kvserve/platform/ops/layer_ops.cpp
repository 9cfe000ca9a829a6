#include "kvserve/platform/ops/layer_ops.h"

#include <algorithm>

#include "kvserve/platform/cuda/ops.h"
#include "kvserve/platform/ops/dispatch.h"
#include "kvserve/platform/ops/gemm.h"

namespace kvserve::ops {

void gemm(platform::Platform& p, const GemmParams& params, platform::StreamHandle stream) {
  // cuBLASLt's bias epilogue takes a bias of the output's type: an f32 output from 16-bit inputs
  // would need an f32 bias (no caller has one: the logits GEMM has no bias).
  KV_CHECK(!(params.bias != nullptr && params.c_f32 && params.dtype != DType::kF32),
           "gemm: a bias with an f32 output needs {} inputs to be f32", dtype_name(params.dtype));
  if (params.skinny != p.kernel_switches().skinny_gemm) {
    GemmParams q = params;
    q.skinny = p.kernel_switches().skinny_gemm;
    return dispatch(p, q, stream, cpu::gemm, platform::cuda::gemm);
  }
  dispatch(p, params, stream, cpu::gemm, platform::cuda::gemm);
}

void embedding(platform::Platform& p, const EmbeddingParams& params,
               platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::embedding, platform::cuda::embedding);
}

void rms_norm(platform::Platform& p, const RmsNormParams& params, platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::rms_norm, platform::cuda::rms_norm);
}

void rope(platform::Platform& p, const RopeParams& params, platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::rope, platform::cuda::rope);
}

void act_and_mul(platform::Platform& p, const ActAndMulParams& params,
                 platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::act_and_mul, platform::cuda::act_and_mul);
}

void softcap(platform::Platform& p, const SoftcapParams& params, platform::StreamHandle stream) {
  KV_CHECK(params.cap > 0.0f, "softcap: cap {} must be positive", params.cap);
  if (p.device().kind == DeviceKind::kCuda) {
    platform::cuda::softcap(params, p.resolve(stream));
    return;
  }
  cpu::softcap(params);
}

void split_qkv_rope(platform::Platform& p, const SplitQkvRopeParams& params,
                    platform::StreamHandle stream) {
  dispatch(p, params, stream, cpu::split_qkv_rope, platform::cuda::split_qkv_rope);
}

void normed_linear(platform::Platform& p, const NormedLinearParams& params,
                   platform::StreamHandle stream) {
  KV_CHECK(params.residual_in == nullptr || params.residual_out != nullptr,
           "normed_linear: residual_in without residual_out");
  KV_CHECK(!params.gated || (params.n % 2 == 0 && params.bias == nullptr),
           "normed_linear: a gated projection needs an even n ({}) and no bias", params.n);
  if (params.m == 0) return;
  // The three ops it stands for, each dispatched (and switched) as on its own.
  rms_norm(p,
           {.x = params.x,
            .residual = const_cast<void*>(params.residual_in),  // read only: residual_out is set
            .residual_out = params.residual_out,
            .out = params.normed,
            .weight = params.norm_weight,
            .dtype = params.dtype,
            .rows = params.m,
            .cols = params.k,
            .x_stride = params.k,
            .eps = params.eps,
            .weight_offset = params.weight_offset},
           stream);
  gemm(p,
       {.a = params.normed,
        .b = params.w,
        .bias = params.bias,
        .c = params.gated ? params.gate_up : params.out,
        .dtype = params.dtype,
        .m = params.m,
        .n = params.n,
        .k = params.k,
        .lda = params.k,
        .ldb = params.k,
        .ldc = params.n},
       stream);
  if (params.gated) {
    act_and_mul(p,
                {.x = params.gate_up,
                 .out = params.out,
                 .dtype = params.dtype,
                 .activation = params.activation,
                 .num_tokens = params.m,
                 .inter = params.n / 2},
                stream);
  }
}

void argmax_rows(platform::Platform& p, const float* logits, int64_t rows, int64_t vocab,
                 int32_t* out, platform::StreamHandle stream) {
  if (p.device().kind == DeviceKind::kCuda) {
    platform::cuda::argmax_rows(logits, rows, vocab, out, p.kernel_switches().pdl,
                                p.resolve(stream));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = logits + r * vocab;
    out[r] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
  }
}

}  // namespace kvserve::ops

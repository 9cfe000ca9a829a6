// The CUDA platform's kernels, callable from plain C++ (no CUDA types in this header).
// In a build without CUDA these are defined in cuda_unavailable.cpp and CHECK-fail: no CUDA
// platform can exist there, so no caller can reach them.
#pragma once

#include "kvserve/platform/handles.h"
#include "kvserve/platform/ops/copy_runs_params.h"
#include "kvserve/platform/ops/gemm_params.h"
#include "kvserve/platform/ops/kv_staging_params.h"
#include "kvserve/platform/ops/kv_store_params.h"
#include "kvserve/platform/ops/layer_ops_params.h"
#include "kvserve/platform/ops/paged_decode_params.h"
#include "kvserve/platform/ops/paged_prefill_params.h"
#include "kvserve/platform/ops/req_to_token_params.h"
#include "kvserve/platform/ops/sampling_params.h"
#include "kvserve/platform/ops/varlen_attention_params.h"
#include "kvserve/platform/ops/whisper_ops_params.h"

namespace kvserve::platform::cuda {

void store_kv(const ops::KvStoreParams& params, StreamHandle stream);
void paged_decode(const ops::PagedDecodeParams& params, StreamHandle stream);
// Tensor-core prefill / extend attention (paged_prefill.cu); params.variant is resolved.
void paged_prefill(const ops::PagedPrefillParams& params, StreamHandle stream);
// The Hopper prefill kernel (paged_prefill_sm90.cu: wgmma, warp-specialised; bf16 K/V, head_dim
// 64 / 128 / 256, no window or soft-cap) and whether the current device can run it (sm_90).
void paged_prefill_sm90(const ops::PagedPrefillParams& params, StreamHandle stream);
bool paged_prefill_sm90_device();
// Streaming multiprocessors of the current device (for split decisions).
int multiprocessor_count();

// The device mirror of req_to_token (req_to_token.cu): one block per request.
void write_req_to_token(const ops::WriteReqToTokenParams& params, StreamHandle stream);
void build_kv_indices(const ops::BuildKvIndicesParams& params, StreamHandle stream);

// KV transfer (kv_staging.cu): staging gather / scatter, and a batch of byte copies in one launch.
void kv_staging(const ops::KvStagingParams& params, StreamHandle stream);
void copy_runs(const ops::CopyRunsParams& params, StreamHandle stream);

// Decoder-layer ops (layer_ops.cu), bf16 or f32 activations, f32 arithmetic.
void embedding(const ops::EmbeddingParams& params, StreamHandle stream);
void rms_norm(const ops::RmsNormParams& params, StreamHandle stream);
void rope(const ops::RopeParams& params, StreamHandle stream);
void act_and_mul(const ops::ActAndMulParams& params, StreamHandle stream);
void softcap(const ops::SoftcapParams& params, StreamHandle stream);
void split_qkv_rope(const ops::SplitQkvRopeParams& params, StreamHandle stream);
// Greedy sampling on the device: out[r] = argmax(logits[r, :vocab]) (lowest index on ties).
void argmax_rows(const float* logits, int64_t rows, int64_t vocab, int32_t* out, bool pdl,
                 StreamHandle stream);
// Token sampling (sampling_bins.cu): a cluster of CTAs per row (sampling.cu: the radix-select
// kernel, one CTA per row); penalized rows are rewritten in place.
void sample_rows(const ops::SampleRowsParams& params, StreamHandle stream);

// Whisper's layer ops (whisper_ops.cu), f32 / f16 / bf16, f32 arithmetic. conv1d is an im2col
// into params.workspace and a gemm (cuBLASLt) queued on the same stream.
void layer_norm(const ops::LayerNormParams& params, StreamHandle stream);
void gelu(const ops::GeluParams& params, StreamHandle stream);
void conv1d(const ops::Conv1dParams& params, StreamHandle stream);
void add_position_embedding(const ops::AddPositionEmbeddingParams& params, StreamHandle stream);

// Attention over contiguous K/V (varlen_attention.cu): the K/V gather from the pool and the
// variable-length kernel (causal or not).
void gather_kv(const ops::GatherKvParams& params, StreamHandle stream);
void varlen_attention(const ops::VarlenAttentionParams& params, StreamHandle stream);

// cuBLASLt (gemm.cpp): bf16/f16/f32 inputs, f32 accumulation, one algorithm per shape.
void gemm(const ops::GemmParams& params, StreamHandle stream);

}  // namespace kvserve::platform::cuda

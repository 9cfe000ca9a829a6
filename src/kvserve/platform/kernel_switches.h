// KernelSwitches: the CUDA kernels' A/B switches in one typed struct (fmt-free: CUDA sources see
// the fields through their params).
//
// Each switch picks between two equal-output implementations for measurements (a fused path and
// the one before it, a tile shape, a launch attribute). They are filled from the environment in
// one place (kernel_switches_from_env, called by the command-line tools at startup; the variable
// names are below), logged once when a CUDA model runner starts, and carried by the Platform
// (Platform::kernel_switches). Code reads them there and passes them on explicitly: the op
// dispatch boundary copies a launcher's switch into its params (ops/dispatch.h), backends and
// models read their platform's. Tests and tools that build a platform directly get the defaults,
// whatever the environment says.
#pragma once

#include <cstdint>

#include "kvserve/platform/ops/paged_prefill_params.h"

namespace kvserve::platform {

struct KernelSwitches {
  // KVSERVE_FUSED_KV_STORE=0: the attention backend stores K/V in its own kernel instead of
  // split_qkv_rope storing them as it writes q/k/v (model/causal_lm.cpp).
  bool fused_kv_store = true;
  // KVSERVE_DECODE_TC=0: decode attention on the CUDA-core kernel everywhere (ops::paged_decode),
  // not the tensor-core one (ops::paged_decode_tc) where it applies.
  bool decode_tc = true;
  // KVSERVE_PREFILL_VARIANT=sm90|sm90pp|mma|m64w4|m128w8|m128w4: the paged prefill kernel (and
  // tile; sm90pp: the sm_90a kernel with ping-pong consumers) for
  // every launch whose params leave it on auto (ops/paged_prefill.h: resolve_prefill_variant):
  // mma forces the mma.sync kernel where auto would take the sm_90a one (A/B runs).
  ops::PrefillVariant prefill_variant = ops::PrefillVariant::kAuto;
  // KVSERVE_PREFILL_TMA=0: the sm_90a prefill kernel gathers K/V by cp.async only, never by TMA
  // (ops::PagedPrefillParams::tma).
  bool prefill_tma = true;
  // KVSERVE_PREFILL_NEW_ROWS=0: an extend's KV store stays fused into the rope kernel and a fresh
  // prefill's attention reads the pool. On (the default), an extend keeps its k / v rows and a
  // fresh prefill's attention reads them (contiguous: TMA at any page size; 8k tokens of the 8B
  // shape at page 1: 228 -> 211 ms on an H100, docs/perf/2026-12-06-cluster-sampler.md)
  // (attention::AttentionIO::new_kv_rows; model/causal_lm.cpp).
  bool prefill_new_rows = true;
  // KVSERVE_DECODE_TC_STAGES=2|3|4: K/V tiles in flight in the tensor-core decode kernel; 0: by
  // head dim (ops/paged_prefill.h: resolve_decode_tc_stages).
  int32_t decode_tc_stages = 0;
  // KVSERVE_SKINNY_GEMM=0: every GEMM on cuBLASLt, none on the skinny-M kernel.
  bool skinny_gemm = true;
  // KVSERVE_PDL=0: every kernel launched plainly, without programmatic dependent launch
  // (platform/cuda/pdl.cuh).
  bool pdl = true;
  // KVSERVE_SPLIT_COUNTERS=0: the tensor-core decode kernel's splits merge in a second kernel
  // (the op dispatch drops the params' counters) instead of in the last split block of each
  // (query, KV head) (ops/paged_decode_params.h: split_counters). On by default since
  // paged_decode_tc_test passed on the H200: 1 x 4096 decode 13.4 us vs 15.6 us through the merge
  // kernel (docs/perf/2026-12-03-gpu-validation.md).
  bool split_counters = true;
};

}  // namespace kvserve::platform

// Paged prefill / extend attention (paged_prefill_params.h): many query tokens per request over
// the request's KV read in place from the pool, on tensor cores; dispatched on the platform at
// one boundary, with a float64 host reference.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvserve/platform/ops/paged_prefill_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

// The tile shape for a batch of `total_q` query tokens over `batch` requests: the variant the
// caller asked for, else $KVSERVE_PREFILL_VARIANT (m64w4, m128w8, m128w4; read once), else by
// the mean rows per request (q_len x group): 64-row tiles for short extends, 128 otherwise.
PrefillVariant choose_prefill_variant(PrefillVariant requested, int32_t total_q, int32_t batch,
                                      int32_t group);
// "m64w4" etc.; kAuto for an unknown name (and for "auto").
PrefillVariant parse_prefill_variant(std::string_view name);
std::string_view prefill_variant_name(PrefillVariant v);

// Runs on `stream`; CUDA only (the CPU platform's attention is the `cpu` backend). kAuto is
// resolved here with choose_prefill_variant.
void paged_prefill(platform::Platform& platform, const PagedPrefillParams& params,
                   platform::StreamHandle stream = {});

namespace reference {
// The same computation on host buffers in float64 (bf16 in, float out), for tests and
// bench-attention's error column. Computes the query rows t (of total_q) with
// t % query_step == 0 and leaves the others of `out` ([total_q, num_q_heads, head_dim]) alone.
void paged_prefill(const PagedPrefillParams& params, float* out, int32_t query_step = 1);
}  // namespace reference

}  // namespace kvserve::ops

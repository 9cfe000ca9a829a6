// Paged prefill / extend attention (paged_prefill_params.h): many query tokens per request over
// the request's KV read in place from the pool, on tensor cores; dispatched on the platform at
// one boundary, with a float64 host reference. And its decode variant (paged_decode_tc): one
// query token per request over the decode kernel's inputs (PagedDecodeParams), with its plan.
#pragma once

#include <cstdint>
#include <string_view>

#include "kvserve/platform/ops/paged_decode.h"
#include "kvserve/platform/ops/paged_decode_params.h"
#include "kvserve/platform/ops/paged_prefill_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

// The tile shape for a batch of `total_q` query tokens over `batch` requests: the variant the
// caller asked for, else by the mean rows per request (q_len x group): 64-row tiles for short
// extends, 128 otherwise.
PrefillVariant choose_prefill_variant(PrefillVariant requested, int32_t total_q, int32_t batch,
                                      int32_t group);
// "m64w4" etc.; kAuto for an unknown name (and for "auto").
PrefillVariant parse_prefill_variant(std::string_view name);
std::string_view prefill_variant_name(PrefillVariant v);

// Whether the sm_90a kernel covers these params: bf16 K/V, head_dim 64, 128 or 256, no sliding
// window, no soft-capping (page sizes, row strides, GQA groups and causality all are).
bool prefill_sm90_supports(const PagedPrefillParams& params);
// Whether the platform's device runs the sm_90a kernel (a CUDA device of compute capability 9.x).
bool prefill_sm90_device(platform::Platform& platform);
// Whether kAuto may pick the sm_90a kernel: on since it passed paged_prefill_test's sm90 cases on
// the H200 and ran at 1.5-1.7x the mma.sync kernel's speed there
// (docs/perf/2026-12-03-gpu-validation.md). KVSERVE_PREFILL_VARIANT=mma forces the mma.sync
// kernel for A/B runs.
inline constexpr bool kPrefillAutoSm90 = true;

// The kernel and tile a launch runs, never kAuto or kMma:
//   * an mma.sync tile (m64w4 / m128w8 / m128w4) when asked for;
//   * kSm90 (or kSm90PingPong) asked for, or kAuto with `auto_sm90` and at least 128 rows
//     (q_len x group) per request on average: the sm_90a kernel (as asked; kSm90 on auto) where
//     `sm90_device` and prefill_sm90_supports(params), else as kMma;
//   * kMma (and kAuto otherwise): choose_prefill_variant's mma.sync tile.
PrefillVariant resolve_prefill_variant(PrefillVariant requested, const PagedPrefillParams& params,
                                       bool sm90_device, bool auto_sm90 = kPrefillAutoSm90);

// Runs on `stream`; CUDA only (the CPU platform's attention is the `cpu` backend). The kernel is
// resolved here: params.variant, else the platform's KernelSwitches::prefill_variant, then
// resolve_prefill_variant.
void paged_prefill(platform::Platform& platform, const PagedPrefillParams& params,
                   platform::StreamHandle stream = {});

// --- Decode on tensor cores ------------------------------------------------------------------
// The decode kernel's drop-in replacement for one query token per request (decode batches and
// extends of one token): the same PagedDecodeParams (page_indptr / page_ids / seq_lens per query,
// bf16 q / out, bf16 or fp8 K / V, head_dim 64 or 128, GQA groups 1..8, page sizes 1..128), the
// same split workspace layout (partial_out [batch, num_q_heads, num_splits, head_dim] f32, then
// partial_lse [batch, num_q_heads, num_splits]; split counters, when given, merge in the kernel's
// last blocks instead of a second launch) and both split modes (per-request splits when
// min_tokens_per_split > 0, cut in whole 64-position tiles: decode_tc_split_range).

// Pipeline depth (K/V tiles of 64 positions in flight per block): `requested` when 2, 3 or 4, else
// 3 for head_dim above 64 (128: 2 blocks per SM) and 4 for 64 (3 blocks per SM), lowered to what
// fits a block's shared memory (head_dim 256 in bf16: 3). Callers pass the platform's
// KernelSwitches::decode_tc_stages (0: auto) unless they pick a depth themselves.
int32_t resolve_decode_tc_stages(int32_t requested, int32_t head_dim);

// The split plan, in PagedDecodePlan's terms (workspace_floats as plan_paged_decode counts them,
// and workspace_counters = batch x num_kv_heads split counters: the last split block of each
// (query, KV head) merges, ops/paged_decode_params.h). Blocks are (query, KV head, split);
// `slots` = num_sms x decode_tc_ctas_per_sm are resident at once. One wave of 1..64 splits:
// num_sms / (batch x num_kv_heads) (a block per SM) when 2 or more, else slots / (batch x
// num_kv_heads); the blocks start at once with their tiles in flight and finish together; a batch
// whose blocks take over half the slots does not split (only the merge would be added). At most
// ceil(max_seq_len / 128): a split streams two tiles or more (its fixed costs, the dependent loads
// before data flows and its share of the merge, stay below what it reads). The first choice does
// not depend on max_seq_len, so per-request splits (min_tokens_per_split = 128) cut a request of
// length L into min(that, ceil(L / 128)) for any max_seq_len >= L: a decode graph's plan for the
// longest possible request cuts every request as the eager plan does. tokens_per_split:
// ceil(max_seq_len / num_splits) rounded up to whole tiles. A sliding window (window_left >= 0)
// plans over the windowed_len(max_seq_len, window_left) positions a query reads.
PagedDecodePlan plan_paged_decode_tc(int32_t batch, int32_t num_q_heads, int32_t num_kv_heads,
                                     int32_t head_dim, int32_t max_seq_len, int32_t num_sms,
                                     int32_t stages = 0, int32_t window_left = -1);

// Blocks per SM of the kernel for (head_dim, stages; 0: the platform's switch, then by head dim)
// on the platform's device, from the CUDA occupancy calculator (0 on the CPU); the plan assumes
// decode_tc_ctas_per_sm.
int32_t decode_tc_occupancy(platform::Platform& platform, int32_t head_dim, int32_t stages = 0);

// Runs on `stream`; CUDA only. Queries with seq_lens 0 get zeros (every split empty); the caller
// keeps the empty-KV guard (no launch when the batch has no KV at all). `stages` as
// resolve_decode_tc_stages; 0: the platform's KernelSwitches::decode_tc_stages, then by head dim.
// PDL as the platform's switch says.
void paged_decode_tc(platform::Platform& platform, const PagedDecodeParams& params,
                     platform::StreamHandle stream = {}, int32_t stages = 0);

namespace reference {
// The same computation on host buffers in float64 (bf16 q, bf16 or fp8 K/V dequantised with the
// params' scales, float out), for tests and bench-attention's error column. Computes the query rows
// t (of total_q) with t % query_step == 0 and leaves the others of `out` ([total_q, num_q_heads,
// head_dim]) alone.
void paged_prefill(const PagedPrefillParams& params, float* out, int32_t query_step = 1);

// reference::paged_decode's result (`out` [batch, num_q_heads, head_dim]) through the prefill
// reference (one non-causal query per request), parallel over queries (OpenMP).
void paged_decode_parallel(const PagedDecodeParams& params, float* out);
}  // namespace reference

}  // namespace kvserve::ops

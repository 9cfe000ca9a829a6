// Token sampling over rows of f32 logits (sampling_params.h states the semantics): the CUDA kernel
// (platform/cuda/sampling_bins.cu, a cluster of CTAs per row, no sort) and the CPU implementation
// below, which is also the engine's host sampler (engine::sample calls it), so there is one host
// semantics.
#pragma once

#include <cstdint>
#include <span>

#include "kvserve/platform/ops/sampling_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

// How the CUDA kernel finds the top-k / top-p boundaries (equal tokens; A/B measurements and
// tests pick one, everything else takes the default): kBins, a binned histogram of the distance
// below the max and an exact sort of the boundary bins' tokens (platform/cuda/sampling_bins.cu);
// kRadix, a 3-round radix select (platform/cuda/sampling.cu). The CPU ignores it.
enum class SampleSelect : uint8_t { kBins, kRadix };

// Checks the shapes (KV_CHECK: callers size them), then runs the CPU implementation, or queues the
// kernel on `stream` on CUDA (row parameters are then in device memory and are not read here).
void sample_rows(platform::Platform& p, const SampleRowsParams& params,
                 platform::StreamHandle stream = {}, SampleSelect select = SampleSelect::kBins);

// The counter-based uniform in [0, 1) of (seed, step), shared with the device.
double sampling_uniform01(uint64_t seed, int64_t step);

namespace cpu {
void sample_rows(const SampleRowsParams& params);
// Step 1 of sampling_params.h: the row's penalties, in place.
void apply_penalties(std::span<float> logits, const SampleRowParams& row,
                     std::span<const PenaltyEntry> penalties);
// Steps 2-4 on an already penalized row: the token.
int32_t sample_row(std::span<const float> logits, const SampleRowParams& row);
// log_softmax(logits)[token], in double.
float token_logprob(std::span<const float> logits, int32_t token);
}  // namespace cpu

}  // namespace kvserve::ops

// Deterministic random weights for synthetic checkpoints (kvserve make-model).
//
// A counter-based generator: element i of a tensor depends only on (seed, tensor name, i), so
// any chunking or threading of the fill gives the same bytes. Pair k of a tensor hashes the
// counter k with splitmix64 into two 32-bit uniforms, which Box-Muller turns into elements 2k
// (cos) and 2k+1 (sin).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvserve/core/dtype.h"

namespace kvserve::makemodel {

uint64_t splitmix64_mix(uint64_t z);

// The generator key of one tensor.
uint64_t tensor_key(uint64_t seed, std::string_view tensor_name);

// out[j] = std * N(0, 1) sample number `first + j` of the stream `key`, for j < n.
void fill_normal(uint64_t key, uint64_t first, size_t n, float stddev, float* out);

// Writes elements [first, first + n) of a normal(0, stddev) tensor in `dtype` (a 16- or 32-bit
// float type) to `out`, using up to `threads` threads; `scratch` holds n floats.
void generate_normal(uint64_t key, uint64_t first, size_t n, float stddev, DType dtype, int threads,
                     float* scratch, void* out);

}  // namespace kvserve::makemodel

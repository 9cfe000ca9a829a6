// KvLayout: what one side of a prefill/decode pair tells the other about its KV memory at the
// handshake, and the check that refuses a pair that cannot work (a clear message at the first
// contact, never a hang until a timeout: SGLang PR 14474's lesson).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::pd {

struct KvLayout {
  int32_t page_size = 1;
  std::string kv_dtype;  // dtype_name of the pool (bf16, f32, fp8_e4m3...)
  int32_t num_layers = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t tp_size = 1;
  // Byte offsets into the registered region of each layer's K buffer, then each layer's V buffer
  // (2 * num_layers), and the bytes of one page of one buffer.
  std::vector<uint64_t> buffer_offsets;
  uint64_t page_bytes = 0;
  uint64_t buffer_bytes = 0;  // one buffer's bytes (every page id lies inside it)
  // Nonzero: this side moves KV through a staging buffer of this many bytes (seed 002), which is
  // its registered region instead of the pool (buffer_offsets, page_bytes and buffer_bytes then
  // describe a pool no peer writes). A pair stages when both sides do.
  uint64_t staging_bytes = 0;
  // The model both sides serve (its directory name): a different model is refused.
  std::string model;

  // page_bytes / page_size
  uint64_t slot_bytes() const { return page_size > 0 ? page_bytes / page_size : 0; }
};

// Whether a prefill server with layout `prefill` can write a decode server's `decode` KV. Without
// staging the writes copy whole pages, or slots when the page sizes differ (both pools keep one
// row per slot), so the KV dtype must be equal; through staging buffers (both sides' staging_bytes
// nonzero; one side alone is refused naming the flag) page sizes are free and the dtypes may
// differ where the staging op converts (f32, f16, bf16 among themselves; fp8 only to itself).
// Layers, heads and head dim must be equal and both sides must run TP 1; each mismatch is named
// with both values. kInvalidArgument.
Status check_compatible(const KvLayout& prefill, const KvLayout& decode);

// Whether the staging op converts KV of dtype `from` into `to` (dtype names): equal, or both among
// f32, f16, bf16 (ops::kv_staging_converts for names, which this layer does not link).
bool staging_converts(const std::string& from, const std::string& to);

}  // namespace kvserve::pd

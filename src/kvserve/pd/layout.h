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
  // The model both sides serve (its directory name): a different model is refused.
  std::string model;

  // page_bytes / page_size
  uint64_t slot_bytes() const { return page_size > 0 ? page_bytes / page_size : 0; }
};

// Whether a prefill server with layout `prefill` can write a decode server's `decode` KV. The
// writes copy whole pages, or slots when the page sizes differ (both pools keep one row per slot),
// so KV dtype, layers, heads and head dim must be equal and both sides must run TP 1; each
// mismatch is named with both values. kInvalidArgument.
Status check_compatible(const KvLayout& prefill, const KvLayout& decode);

}  // namespace kvserve::pd

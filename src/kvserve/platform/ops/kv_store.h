// KV store: write a batch's new K/V rows into the pool at their slots, converting dtype
// (kv_store_params.h). The platform's kernel is chosen at one boundary (store_kv) and the
// (source, cache) dtype pair at one boundary inside each platform.
#pragma once

#include "kvserve/platform/ops/kv_store_params.h"
#include "kvserve/platform/platform.h"

namespace kvserve::ops {

// Runs on `stream` of `platform` (synchronously on the CPU platform).
void store_kv(platform::Platform& platform, const KvStoreParams& params,
              platform::StreamHandle stream = {});

namespace cpu {
void store_kv(const KvStoreParams& params);
}  // namespace cpu

}  // namespace kvserve::ops

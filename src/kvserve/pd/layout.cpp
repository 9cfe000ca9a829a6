#include "kvserve/pd/layout.h"

#include <fmt/format.h>

namespace kvserve::pd {

Status check_compatible(const KvLayout& prefill, const KvLayout& decode) {
  std::vector<std::string> bad;
  auto cmp = [&](const char* what, const auto& p, const auto& d) {
    if (p != d) bad.push_back(fmt::format("{} {} (prefill) vs {} (decode)", what, p, d));
  };
  const bool staged = prefill.staging_bytes > 0 && decode.staging_bytes > 0;
  cmp("model", prefill.model, decode.model);
  if (prefill.staging_bytes > 0 && decode.staging_bytes == 0) {
    bad.push_back(
        "the prefill server moves KV through a staging buffer and the decode server does not "
        "(start both with --disaggregation-staging-buffer-mb)");
  } else if (decode.staging_bytes > 0 && prefill.staging_bytes == 0) {
    bad.push_back(
        "the decode server moves KV through a staging buffer and the prefill server does not "
        "(start both with --disaggregation-staging-buffer-mb)");
  }
  if (!staged) {
    cmp("KV dtype", prefill.kv_dtype, decode.kv_dtype);
  } else if (!staging_converts(prefill.kv_dtype, decode.kv_dtype)) {
    bad.push_back(fmt::format(
        "KV dtype {} (prefill) cannot be converted to {} (decode): fp8 KV travels only to fp8 of "
        "the same kind",
        prefill.kv_dtype, decode.kv_dtype));
  }
  cmp("layers", prefill.num_layers, decode.num_layers);
  cmp("KV heads", prefill.num_kv_heads, decode.num_kv_heads);
  cmp("head dim", prefill.head_dim, decode.head_dim);
  cmp("TP size", prefill.tp_size, decode.tp_size);
  if (prefill.tp_size != 1 || decode.tp_size != 1) {
    bad.push_back("tensor-parallel KV (TP size above 1) is not supported");
  }
  const auto buffers = static_cast<size_t>(2 * decode.num_layers);
  if (!staged &&
      (decode.buffer_offsets.size() != buffers || prefill.buffer_offsets.size() != buffers)) {
    bad.push_back(fmt::format("{} buffer offsets (prefill) and {} (decode) for {} layers",
                              prefill.buffer_offsets.size(), decode.buffer_offsets.size(),
                              decode.num_layers));
  }
  // Page sizes may differ (the writes then address slots): a slot's row must be the same.
  if (bad.empty() && !staged && prefill.slot_bytes() != decode.slot_bytes()) {
    bad.push_back(fmt::format("slot bytes {} (prefill) vs {} (decode)", prefill.slot_bytes(),
                              decode.slot_bytes()));
  }
  if (prefill.page_size < 1 || decode.page_size < 1 ||
      prefill.page_bytes % static_cast<uint64_t>(prefill.page_size) != 0 ||
      decode.page_bytes % static_cast<uint64_t>(decode.page_size) != 0) {
    bad.push_back(fmt::format("page size {} / {} bytes (prefill) and {} / {} bytes (decode)",
                              prefill.page_size, prefill.page_bytes, decode.page_size,
                              decode.page_bytes));
  }
  if (bad.empty()) return Status::ok();
  return make_status(StatusCode::kInvalidArgument,
                     "the prefill and decode servers' KV layouts cannot be bridged: {}",
                     fmt::join(bad, "; "));
}

bool staging_converts(const std::string& from, const std::string& to) {
  auto wide = [](const std::string& d) { return d == "f32" || d == "f16" || d == "bf16"; };
  return from == to || (wide(from) && wide(to));
}

}  // namespace kvserve::pd

#include "kvserve/attention/capabilities.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

namespace kvserve::attention {
namespace {

// The CPU backends read every floating KV cache the pool stores (widened to f32 per row).
constexpr DType kCpuKvDtypes[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kFP8E4M3,
                                  DType::kFP8E5M2};
// The CUDA kernels read bf16 or fp8 (widened to bf16 with the layer's scales).
constexpr DType kCudaKvDtypes[] = {DType::kBF16, DType::kFP8E4M3, DType::kFP8E5M2};
// The page sizes every kernel cuda-paged may run takes: the CUDA-core decode kernel's (the
// tensor-core decode and the prefill kernel take every power of two up to 128).
constexpr int32_t kCudaPagedPageSizes[] = {1, 16, 32, 64, 128};
// cuda-ragged gathers rows first: its kernels read them contiguously (the paged kernels' head
// dims, or the CUDA-core varlen kernel's for the rest).
constexpr int32_t kCudaRaggedHeadDims[] = {16, 32, 64, 80, 96, 128, 256};
// rope_scaling types the model's rotary embedding applies (model/rope.h), on every device.
constexpr std::string_view kRopeTypes[] = {"default", "linear",   "dynamic",
                                           "yarn",    "longrope", "llama3"};

constexpr AttentionCapabilities kTable[] = {
    {.kind = AttentionBackendKind::kCpu,
     .name = "cpu",
     .device = DeviceKind::kCpu,
     .head_dims = {},
     .page_sizes = {},
     .kv_dtypes = kCpuKvDtypes,
     .max_gqa_group = 64,
     .rope_types = kRopeTypes,
     .cross_attention = true,
     .ragged_encoder_rows = true,
     .decode_graphs = false,
     .sliding_window = true,
     .logit_softcap = true,
     .description = "batched, in place over the paged pool (the CPU's default)"},
    {.kind = AttentionBackendKind::kNative,
     .name = "native",
     .device = DeviceKind::kCpu,
     .head_dims = {},
     .page_sizes = {},
     .kv_dtypes = kCpuKvDtypes,
     .max_gqa_group = 1 << 30,
     .rope_types = kRopeTypes,
     .cross_attention = true,
     .ragged_encoder_rows = true,
     .decode_graphs = false,
     .sliding_window = true,
     .logit_softcap = true,
     .description = "per-request gather, float64 accumulation (the reference)"},
    {.kind = AttentionBackendKind::kCudaPaged,
     .name = "cuda-paged",
     .device = DeviceKind::kCuda,
     .head_dims = kPagedKernelHeadDims,
     .page_sizes = kCudaPagedPageSizes,
     .kv_dtypes = kCudaKvDtypes,
     .max_gqa_group = kPagedKernelMaxGroup,
     .rope_types = kRopeTypes,
     .cross_attention = true,
     .ragged_encoder_rows = false,
     .decode_graphs = true,
     .sliding_window = true,
     .logit_softcap = true,
     .description = "in place through page ids, decode graphs (CUDA's default)"},
    {.kind = AttentionBackendKind::kCudaRagged,
     .name = "cuda-ragged",
     .device = DeviceKind::kCuda,
     .head_dims = kCudaRaggedHeadDims,
     .page_sizes = {},
     .kv_dtypes = kCudaKvDtypes,
     .max_gqa_group = kPagedKernelMaxGroup,
     .rope_types = kRopeTypes,
     .cross_attention = true,
     .ragged_encoder_rows = true,
     .decode_graphs = false,
     .sliding_window = true,
     .logit_softcap = true,
     .description = "gathers each request's K/V, then the same kernels; any row layout"},
};

std::string_view device_kind_name(DeviceKind d) {
  return d == DeviceKind::kCpu ? "the CPU" : "CUDA";
}

}  // namespace

std::span<const AttentionCapabilities> attention_backend_table() {
  return kTable;
}

const AttentionCapabilities& capabilities(AttentionBackendKind kind) {
  for (const AttentionCapabilities& c : kTable) {
    if (c.kind == kind) return c;
  }
  KV_CHECK(false, "attention backend kind {} has no table row", static_cast<int>(kind));
  return kTable[0];
}

std::string_view attention_backend_name(AttentionBackendKind kind) {
  return capabilities(kind).name;
}

Result<AttentionBackendKind> parse_attention_backend(std::string_view name) {
  for (const AttentionCapabilities& c : kTable) {
    if (c.name == name) return c.kind;
  }
  return invalid_argument("unknown attention backend '{}' (available: {})", name,
                          fmt::join(attention_backend_names(), ", "));
}

std::vector<std::string> attention_backend_names() {
  std::vector<std::string> out;
  for (const AttentionCapabilities& c : kTable)
    out.emplace_back(c.name);
  return out;
}

std::vector<std::string> attention_backend_names(DeviceKind device) {
  std::vector<std::string> out;
  for (const AttentionCapabilities& c : kTable) {
    if (c.device == device) out.emplace_back(c.name);
  }
  return out;
}

AttentionBackendKind default_attention_backend(DeviceKind device) {
  return device == DeviceKind::kCpu ? AttentionBackendKind::kCpu : AttentionBackendKind::kCudaPaged;
}

Status check_attention_support(AttentionBackendKind kind, const AttentionRequirements& need) {
  const AttentionCapabilities& c = capabilities(kind);
  const auto unsupported = [&](std::string_view what, std::string_view supports) {
    return make_status(StatusCode::kUnimplemented, "{}: attention backend {} supports {}", what,
                       c.name, supports);
  };
  if (c.device != need.device) {
    return invalid_argument("--attention-backend {} runs on {}, not on {} (there: {})", c.name,
                            device_kind_name(c.device), device_kind_name(need.device),
                            fmt::join(attention_backend_names(need.device), ", "));
  }
  if (!c.head_dims.empty() && std::ranges::find(c.head_dims, need.head_dim) == c.head_dims.end()) {
    return unsupported(fmt::format("{}: {} {}", need.source, need.head_dim_field, need.head_dim),
                       fmt::format("{}", fmt::join(c.head_dims, ", ")));
  }
  const int32_t group = need.num_kv_heads > 0 && need.num_q_heads % need.num_kv_heads == 0
                            ? need.num_q_heads / need.num_kv_heads
                            : 0;  // the config parser refuses these; kept total here
  if (group < 1 || group > c.max_gqa_group) {
    return unsupported(
        fmt::format("{}: {} / {} = {} / {} (a GQA group of {})", need.source, need.heads_field,
                    need.kv_heads_field, need.num_q_heads, need.num_kv_heads, group),
        fmt::format("GQA groups 1..{}", c.max_gqa_group));
  }
  if (need.rope_type.has_value() &&
      std::ranges::find(c.rope_types, std::string_view(*need.rope_type)) == c.rope_types.end()) {
    return unsupported(fmt::format("{}: rope_scaling.rope_type {}", need.source, *need.rope_type),
                       fmt::format("rope types {}", fmt::join(c.rope_types, ", ")));
  }
  if (!need.sliding_window_field.empty() && !c.sliding_window) {
    return unsupported(fmt::format("{}: {}", need.source, need.sliding_window_field),
                       "full attention only (no sliding window)");
  }
  if (!need.logit_softcap_field.empty() && !c.logit_softcap) {
    return unsupported(fmt::format("{}: {}", need.source, need.logit_softcap_field),
                       "attention without soft-capping");
  }
  if (need.cross_attention && !c.cross_attention) {
    return unsupported(fmt::format("{}: an encoder-decoder model", need.source),
                       "decoder-only models");
  }
  if (!c.page_sizes.empty() &&
      std::ranges::find(c.page_sizes, need.page_size) == c.page_sizes.end()) {
    return unsupported(fmt::format("--page-size {}", need.page_size),
                       fmt::format("page sizes {}", fmt::join(c.page_sizes, ", ")));
  }
  if (std::ranges::find(c.kv_dtypes, need.kv_dtype) == c.kv_dtypes.end()) {
    std::vector<std::string_view> names;
    for (const DType t : c.kv_dtypes)
      names.push_back(dtype_name(t));
    return unsupported(fmt::format("--kv-cache-dtype {}", dtype_name(need.kv_dtype)),
                       fmt::format("KV cache dtypes {}", fmt::join(names, ", ")));
  }
  if (need.ragged_encoder_rows && need.page_size > 1 && !c.ragged_encoder_rows) {
    std::vector<std::string_view> ok;
    for (const AttentionCapabilities& other : kTable) {
      if (other.device == need.device && other.ragged_encoder_rows) ok.push_back(other.name);
    }
    return unsupported(
        fmt::format("--encoder-kv-layout ragged with --page-size {} (the decoder region starts "
                    "inside a page)",
                    need.page_size),
        fmt::format("whole pages only; use {} or the aligned layout", fmt::join(ok, ", ")));
  }
  return Status::ok();
}

}  // namespace kvserve::attention

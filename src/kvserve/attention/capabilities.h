// The attention backends' table: each backend's name (--attention-backend), its device, and what
// it supports: head dims, KV page sizes, KV cache dtypes, GQA group sizes, rope types,
// cross-attention, encoder regions that end inside a page, decode graphs. It is the one source of
// truth: the registry names and creates backends from it, and a model runner consults it at load
// (check_attention_support, before any weight is read), so a model or an option a backend cannot
// serve is refused before serving starts, with the config field or flag and the supported values
// ("config.json: head_dim 96: attention backend cuda-paged supports 64, 128"). The kernels keep
// their own CHECKs, which no config can reach any more. Needs no device: unit-testable anywhere.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"
#include "kvserve/core/tensor.h"

namespace kvserve::attention {

enum class AttentionBackendKind { kCpu, kNative, kCudaPaged, kCudaRagged };

// Head dims of the paged CUDA kernels (decode, tensor-core decode, prefill).
inline constexpr int32_t kPagedKernelHeadDims[] = {64, 80, 96, 128, 256};
// GQA groups (query heads per KV head) the paged CUDA kernels take: 1..8.
inline constexpr int32_t kPagedKernelMaxGroup = 8;

struct AttentionCapabilities {
  AttentionBackendKind kind;
  std::string_view name;  // as --attention-backend spells it
  DeviceKind device;
  std::span<const int32_t> head_dims;   // empty: any head dim
  std::span<const int32_t> page_sizes;  // empty: any page size --page-size allows (1..128)
  std::span<const DType> kv_dtypes;     // KV cache element types it reads
  int32_t max_gqa_group = 0;            // num_attention_heads / num_key_value_heads, 1..this
  std::span<const std::string_view> rope_types;  // config.json rope_scaling.rope_type values
  bool cross_attention = false;                  // encoder-decoder models
  // Rows whose decoder region starts inside a page (Whisper's ragged encoder KV layout).
  bool ragged_encoder_rows = false;
  bool decode_graphs = false;
  bool sliding_window = false;   // AttentionLayer::window_left >= 0 (per layer)
  bool logit_softcap = false;    // AttentionLayer::logit_softcap > 0
  std::string_view description;  // one line, for --help and errors
};

// Every backend of every device, in a fixed order (the CPU's first).
std::span<const AttentionCapabilities> attention_backend_table();
const AttentionCapabilities& capabilities(AttentionBackendKind kind);
std::string_view attention_backend_name(AttentionBackendKind kind);
// kInvalidArgument for an unknown name, listing every valid one.
Result<AttentionBackendKind> parse_attention_backend(std::string_view name);
// Every backend's name, and those of one device ({"cpu", "native"} for the CPU).
std::vector<std::string> attention_backend_names();
std::vector<std::string> attention_backend_names(DeviceKind device);
// The default of a device (SGLang picks per hardware): cpu on the CPU, cuda-paged on CUDA.
AttentionBackendKind default_attention_backend(DeviceKind device);

// What a model and the serving options ask of attention, with the names errors give them.
struct AttentionRequirements {
  std::string source = "config.json";  // the file the model fields come from
  std::string head_dim_field = "head_dim";
  std::string heads_field = "num_attention_heads";
  std::string kv_heads_field = "num_key_value_heads";
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  std::optional<std::string> rope_type;  // nullopt: no rotary embedding (Whisper)
  bool cross_attention = false;
  bool ragged_encoder_rows = false;  // set only with a page size > 1
  // The config field that asks for a sliding window / attention soft-capping, when one does
  // ("sliding_window", "attn_logit_softcapping"); empty: the model needs none.
  std::string sliding_window_field;
  std::string logit_softcap_field;
  int32_t page_size = 1;         // --page-size
  DType kv_dtype = DType::kF32;  // --kv-cache-dtype, resolved (auto: the compute dtype)
  DeviceKind device = DeviceKind::kCpu;
};

// Ok, or kUnimplemented naming the first unsupported field (the config field or the flag), its
// value and what the backend supports; kInvalidArgument for a backend of another device.
Status check_attention_support(AttentionBackendKind kind, const AttentionRequirements& need);

}  // namespace kvserve::attention

// Hugging Face model configuration: config.json and generation_config.json of a checkpoint
// directory, for LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, Qwen3ForCausalLM,
// Gemma2ForCausalLM and Gemma3ForCausalLM (the text model, model_type gemma3_text).
//
// Errors name the file and the field ("config.json: num_key_value_heads (3) does not divide
// num_attention_heads (8)") and are Status values (kInvalidArgument / kNotFound /
// kUnimplemented for an unknown architecture or a field kvserve does not implement).
//
// The audit (config_field_audit(), one table in config.cpp): every config.json field that
// transformers' LlamaConfig / Qwen2Config / MistralConfig / Qwen3Config / Gemma2Config /
// Gemma3TextConfig defines, plus the math-changing fields of neighbouring architectures a config
// may carry (qk-norm keys, partial rotary, Granite's multipliers, quantization_config), is either
// implemented (parsed into
// ModelConfig and applied by the model), refused with kUnimplemented naming the field and its
// value, or ignored because it cannot change the logits (initializer_range, use_cache, ...).
// Keys the table does not name are accepted without a look: Hugging Face configs carry many
// harmless keys (transformers_version, _name_or_path, torch_dtype's aliases, task-specific
// extras), so refusing unknown keys wholesale would refuse real checkpoints; the architecture
// name is what rules out models whose math differs (unknown architectures are refused).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

enum class Architecture { kLlama, kQwen2, kMistral, kQwen3, kGemma2, kGemma3 };

// config.json "layer_types": what attention a layer has.
enum class LayerType { kFullAttention, kSlidingAttention };

// config.json "rope_scaling"; rope_type "default" means none. Only "llama3" is applied beyond
// the default (the llama3 type's frequency-dependent scaling of inv_freq).
struct RopeScaling {
  std::string rope_type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as written in "architectures", e.g. "LlamaForCausalLM"
  std::string model_type;         // "llama", "qwen2", "mistral", "qwen3", "gemma2", "gemma3_text"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 0;  // defaults to num_attention_heads when absent
  int32_t head_dim = 0;             // defaults to hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2 always; Llama if set)
  // The MLP's gate activation: "silu" (hidden_act) or, for Gemma, "gelu_pytorch_tanh"
  // (hidden_activation; Gemma does not read hidden_act).
  std::string hidden_act = "silu";
  DType torch_dtype = DType::kBF16;  // the checkpoint's declared dtype
  // The attention window transformers applies to sliding_window_layers of the layers (Mistral:
  // every layer; Qwen2: those at or past max_window_layers, or marked "sliding_attention" in
  // layer_types, when use_sliding_window); nullopt: every layer attends to the whole context.
  // kvserve has no sliding-window attention: check_served_context refuses a window that could
  // change the math for the context length served.
  std::optional<int32_t> sliding_window;
  int32_t sliding_window_layers = 0;
  // Each layer's attention type (num_hidden_layers entries): "layer_types", or the
  // architecture's default pattern (Gemma 2: every other layer slides, from layer 0; Gemma 3:
  // five sliding, one full). A sliding layer attends to the last sliding_window tokens.
  std::vector<LayerType> layer_types;
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // "eos_token_id" may be an int or a list

  // Qwen3 / Gemma 3: RMSNorm of each query and key head (self_attn.q_norm / k_norm, [head_dim])
  // after the projection, before rope.
  bool qk_norm = false;
  // Gemma: every RMSNorm multiplies by (1 + weight) (GemmaRMSNorm); 0 elsewhere.
  double norm_weight_offset = 0.0;
  // Gemma: the embeddings are multiplied by sqrt(hidden_size), rounded to the compute dtype
  // (transformers casts the normalizer to the activations' dtype); 1 elsewhere.
  double embedding_scale = 1.0;
  // Gemma: post_attention_layernorm normalizes the attention output before the residual add and
  // pre_feedforward_layernorm / post_feedforward_layernorm wrap the MLP ("sandwich" norms).
  bool sandwich_norms = false;
  // Gemma: the softmax scale is 1 / sqrt(query_pre_attn_scalar); nullopt: 1 / sqrt(head_dim).
  std::optional<double> query_pre_attn_scalar;
  // Gemma 2: score = cap * tanh(score / cap) after the scaling (attn_logit_softcapping), and
  // logits = cap * tanh(logits / cap) (final_logit_softcapping); nullopt: none.
  std::optional<double> attn_logit_softcapping;
  std::optional<double> final_logit_softcapping;
  // Gemma 3: the rotary base of sliding layers (rope_local_base_freq, or rope_parameters'
  // "sliding_attention" entry), with no scaling; rope_theta and rope_scaling are then the full
  // layers'. nullopt: every layer uses rope_theta and rope_scaling.
  std::optional<double> sliding_rope_theta;

  // The rotary base of layer `layer` (sliding_rope_theta on Gemma 3's sliding layers).
  double layer_rope_theta(int32_t layer) const;
  // Whether layer `layer` uses rope_scaling (false on Gemma 3's sliding layers).
  bool layer_rope_scaled(int32_t layer) const;
  bool layer_slides(int32_t layer) const {
    return layer_types.at(static_cast<size_t>(layer)) == LayerType::kSlidingAttention;
  }
};

// Reads and validates <dir>/config.json.
Result<ModelConfig> load_model_config(const std::filesystem::path& dir);
// Parses a config.json text (`source` names it in errors).
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);

// What the engine will serve the model with, checked against what kvserve cannot compute:
// kUnimplemented naming `source`, sliding_window and its value when the window is smaller than
// `context_length` (the served context: --context-length, else max_position_embeddings). A
// window at least the context length never masks a token of a sequence kvserve accepts, so full
// attention is then the same math. Called by ModelRunner::create before any weight is read.
Status check_served_context(const ModelConfig& config, int64_t context_length,
                            std::string_view source);

// The audit table (see the top of this file).
enum class FieldHandling {
  kImplemented,  // parsed into ModelConfig and applied (some values may still be refused: `note`)
  kRefused,      // kUnimplemented naming the field and its value when `note`'s condition holds
  kIgnored,      // cannot change the logits kvserve computes; `note` says why
};

// How a refused field is checked: by the generic rule, or by the parsing code (kInCode).
enum class RefusalRule {
  kNone,          // not refused
  kIfNotNull,     // refused when present and not null
  kIfTrue,        // refused when true
  kIfNotOne,      // refused when a number other than 1
  kIfNotHeadDim,  // refused when a number other than head_dim
  kInCode,        // refused by the parsing code under the condition in `note`
};

struct ConfigFieldAudit {
  std::string_view field;
  FieldHandling handling;
  RefusalRule rule;
  std::string_view note;  // implemented: how (and what is refused); refused: when, what it does;
                          // ignored: why it cannot change the math
};

std::span<const ConfigFieldAudit> config_field_audit();
std::string_view field_handling_name(FieldHandling h);

// generation_config.json; a missing file gives the defaults below (SGLang's defaults).
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  bool do_sample = false;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int32_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int32_t> max_new_tokens;
};

Result<GenerationConfig> load_generation_config(const std::filesystem::path& dir);

}  // namespace kvserve::checkpoint

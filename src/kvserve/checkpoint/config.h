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

// config.json "rope_scaling" (or transformers v5's "rope_parameters"); rope_type "default" means
// none. Every type transformers 5 computes for these architectures is applied (model/rope.h;
// docs/rope-scaling.md): default, linear, dynamic, yarn, longrope and llama3. Values the config
// leaves out are resolved at parse time as transformers resolves them (the defaults below, yarn's
// and longrope's attention_factor, longrope's factor), so the model reads them from here only.
struct RopeScaling {
  std::string rope_type = "default";
  // linear: inv_freq / factor; dynamic: the NTK base growth; yarn: the interpolation factor;
  // llama3: the low-frequency divisor; longrope: only the attention factor's input (default
  // max_position_embeddings / original_max_position_embeddings).
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  // llama3, yarn, longrope (required by each); dynamic reads max_position_embeddings instead.
  int64_t original_max_position_embeddings = 8192;
  // The multiplier of cos and sin: yarn (default from factor, mscale and mscale_all_dim) and
  // longrope (default sqrt(1 + ln(factor) / ln(original_max_position_embeddings))); 1 otherwise.
  double attention_factor = 1.0;
  double beta_fast = 32.0;  // yarn; 0 or absent: 32
  double beta_slow = 1.0;   // yarn; 0 or absent: 1
  bool truncate = true;     // yarn: floor / ceil the correction range
  // longrope: per-frequency divisors ([rotary_dim / 2] each), short while the sequence fits the
  // original context, long past it.
  std::vector<double> short_factor;
  std::vector<double> long_factor;
  // SGLang's get_context_length multiplier of max_position_embeddings: the config's factor
  // (1 when absent) unless the type is llama3 or the scaling names original_max_position_embeddings
  // (max_position_embeddings is then already the extended context); 1 without scaling.
  double context_factor = 1.0;
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
  // Each layer's attention window as attention::AttentionLayer::window_left: a query at position
  // p sees the keys [p - window_left, p]; -1: the whole causal context. config.json's
  // sliding_window w (transformers masks keys at or before p - w) is window_left w - 1, on the
  // layers transformers gives it (Mistral: every layer; Qwen2/Qwen3 with use_sliding_window: those
  // at or past max_window_layers, or marked "sliding_attention" in layer_types; Gemma: its sliding
  // layer_types; Llama: none). num_hidden_layers entries. ModelRunner::create turns a window that
  // covers the whole served context into -1 (served_window_left).
  std::vector<int32_t> layer_window_left;
  // Each layer's attention type (num_hidden_layers entries): "layer_types", or the
  // architecture's default pattern (Gemma 2: every other layer slides, from layer 0; Gemma 3:
  // five sliding, one full). A sliding layer attends to the last sliding_window tokens
  // (layer_window_left).
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

// The context length served when --context-length is not given: max_position_embeddings times
// rope_scaling.context_factor, truncated to an integer, as SGLang's get_context_length.
int64_t default_context_length(const ModelConfig& config);

// The layers with a sliding window (layer_window_left >= 0), in order.
std::vector<int32_t> sliding_layers(const ModelConfig& config);

// `config`'s windows for a served context of `context_length` positions: a window that covers
// every position a sequence can have (window_left + 1 >= context_length) masks nothing, so it
// becomes -1 (full attention, the same math, on backends without windows too).
std::vector<int32_t> served_window_left(const ModelConfig& config, int64_t context_length);

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

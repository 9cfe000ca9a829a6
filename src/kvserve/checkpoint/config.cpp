// config.json: Hugging Face's defaults (LlamaConfig, Qwen2Config, MistralConfig, Qwen3Config,
// Gemma2Config, Gemma3TextConfig) and validation.
#include "kvserve/checkpoint/config.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "kvserve/checkpoint/architectures.h"
#include "kvserve/core/json_fields.h"

namespace kvserve::checkpoint {
namespace {

using core::JsonFields;
using nlohmann::json;

struct ArchitectureInfo {
  std::string_view name;        // "architectures"[0]
  std::string_view model_type;  // "model_type"
  Architecture architecture;
  int64_t default_max_position_embeddings;  // the config class's default
  int32_t default_head_dim;                 // 0: hidden_size / num_attention_heads
  bool default_tie_word_embeddings;
  std::string_view summary;  // what kvserve runs of it (README's supported-models table)
};

constexpr auto kArchitectures = std::to_array<ArchitectureInfo>({
    {"LlamaForCausalLM", "llama", Architecture::kLlama, 2048, 0, false,
     "Llama 2/3/3.1/3.2 and Llama-shaped models: RMSNorm, SwiGLU, GQA, rope (default, linear, "
     "dynamic, yarn, longrope, llama3)"},
    {"Qwen2ForCausalLM", "qwen2", Architecture::kQwen2, 32768, 0, false,
     "Qwen2 / Qwen2.5: Llama's decoder with q/k/v biases; sliding window per "
     "max_window_layers / layer_types"},
    {"MistralForCausalLM", "mistral", Architecture::kMistral, 4096 * 32, 0, false,
     "Mistral: Llama's decoder (no biases), sliding window on every layer"},
    {"Qwen3ForCausalLM", "qwen3", Architecture::kQwen3, 32768, 128, false,
     "Qwen3: per-head q/k RMSNorm before rope, no q/k/v bias"},
    {"Gemma2ForCausalLM", "gemma2", Architecture::kGemma2, 8192, 256, true,
     "Gemma 2: tanh-GELU MLP, sandwich norms, (1 + w) RMSNorm, scaled embeddings, "
     "query_pre_attn_scalar, attention and final logit soft-capping, local/global layers"},
    {"Gemma3ForCausalLM", "gemma3_text", Architecture::kGemma3, 131072, 256, true,
     "Gemma 3 (text): Gemma 2's decoder with q/k norms instead of attention soft-capping, "
     "local layers with their own rope base, global layers with rope scaling"},
});

bool is_gemma(Architecture a) {
  return a == Architecture::kGemma2 || a == Architecture::kGemma3;
}

// The audit (config.h): every config.json field transformers' LlamaConfig, Qwen2Config and
// MistralConfig define, and the math-changing fields of neighbouring architectures a config may
// carry, with kvserve's handling. kRefused entries with a generic rule are checked by
// apply_refusal_rules below; kInCode entries by the parsing code named in the note. Keys not in
// the table are accepted unread (config.h says why).
using enum FieldHandling;
using enum RefusalRule;
constexpr auto kConfigFieldAudit = std::to_array<ConfigFieldAudit>({
    // The model.
    {"architectures", kImplemented, kInCode,
     "LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, Qwen3ForCausalLM, "
     "Gemma2ForCausalLM, Gemma3ForCausalLM; any other architecture is refused"},
    {"model_type", kImplemented, kInCode,
     "must match architectures[0] (llama, qwen2, mistral, qwen3, gemma2, gemma3_text)"},
    {"vocab_size", kImplemented, kNone, "embedding and lm_head rows"},
    {"hidden_size", kImplemented, kNone, "the residual width"},
    {"intermediate_size", kImplemented, kNone, "the MLP width"},
    {"num_hidden_layers", kImplemented, kNone, "decoder layers"},
    {"num_attention_heads", kImplemented, kNone, "query heads"},
    {"num_key_value_heads", kImplemented, kNone,
     "grouped-query attention (default num_attention_heads); must divide num_attention_heads"},
    {"head_dim", kImplemented, kNone,
     "projections and attention follow it, also when it is not hidden_size / "
     "num_attention_heads (Qwen3's default 128, Gemma's 256); odd values are refused (rotary "
     "pairs)"},
    {"max_position_embeddings", kImplemented, kNone,
     "the context length served unless --context-length says otherwise"},
    {"tie_word_embeddings", kImplemented, kNone,
     "lm_head is embed_tokens when true (Gemma's default true)"},
    {"rms_norm_eps", kImplemented, kNone, "every RMSNorm"},
    {"torch_dtype", kImplemented, kNone,
     "the checkpoint's declared dtype (\"dtype\" in transformers >= 4.56); weights are converted "
     "to the compute dtype"},
    {"bos_token_id", kImplemented, kNone, "the tokenizer's default BOS"},
    {"eos_token_id", kImplemented, kNone, "stop tokens (with generation_config.json's)"},
    // Position encoding.
    {"rope_theta", kImplemented, kNone, "the rotary base"},
    {"rope_scaling", kImplemented, kInCode,
     "rope_type default, linear, dynamic, yarn, longrope and llama3, as transformers 5 computes "
     "them (docs/rope-scaling.md); each type's required fields are refused when missing; any "
     "other type is refused; dynamic and longrope turn off the radix cache, chunked prefill and "
     "decode graphs; linear and dynamic serve factor x max_position_embeddings by default"},
    {"rope_parameters", kImplemented, kInCode,
     "transformers v5's rope_theta + rope_scaling, the same types; a partial_rotary_factor other "
     "than 1 in it is refused; Gemma 3: keyed by layer type (full_attention: rope_theta + "
     "scaling of the full layers; sliding_attention: the sliding layers' rope_theta, a scaling "
     "there is refused)"},
    {"rope_local_base_freq", kImplemented, kInCode,
     "Gemma 3 (transformers v4 configs): the sliding layers' rotary base (default 10000), "
     "unscaled; other architectures do not read it"},
    {"partial_rotary_factor", kRefused, kIfNotOne,
     "rotary embeddings on part of each head (transformers' default rope reads it for every "
     "architecture); kvserve rotates the whole head"},
    // Attention.
    {"attention_bias", kImplemented, kInCode,
     "Qwen2: q/k/v biases always, as Qwen2Attention (the key is not read); Llama, Qwen3, Gemma "
     "and Mistral: true is refused (their attention also biases o_proj, which kvserve does not; "
     "MistralAttention has no biases, so such a checkpoint is not a Mistral)"},
    {"sliding_window", kImplemented, kInCode,
     "Mistral (4096 when the key is absent, none when null: every layer), Qwen2 and Qwen3 (4096 "
     "when absent; only with use_sliding_window: the layers from max_window_layers on, or as "
     "layer_types says) and Gemma 2/3 (4096 when absent; the sliding layers of layer_types): "
     "window_left sliding_window - 1 on those layers (docs/sliding-window.md); a window at least "
     "the served context is full attention; a backend without windows refuses a real one at "
     "load; Llama: not read, as LlamaAttention"},
    {"use_sliding_window", kImplemented, kInCode,
     "Qwen2/Qwen3: turns sliding_window on (see sliding_window); Llama/Mistral/Gemma: not read, "
     "as transformers"},
    {"max_window_layers", kImplemented, kInCode,
     "Qwen2/Qwen3 with use_sliding_window and no layer_types: layers at or past it slide "
     "(default 28; see sliding_window); at least num_hidden_layers means none"},
    {"layer_types", kImplemented, kInCode,
     "num_hidden_layers entries of full_attention / sliding_attention, kept per layer "
     "(ModelConfig::layer_types); Qwen2/Qwen3/Gemma slide exactly the sliding_attention layers "
     "(Gemma's default without it: 2: every other layer from layer 0; 3: sliding_window_pattern); "
     "sliding_attention without a sliding_window, or any other type, is refused; Llama/Mistral: "
     "not read otherwise, as transformers"},
    {"sliding_window_pattern", kImplemented, kInCode,
     "Gemma 3 without layer_types: every sliding_window_pattern-th layer is full, the others "
     "slide (default 6; \"_sliding_window_pattern\" as transformers v5 writes it)"},
    {"attn_logit_softcapping", kImplemented, kInCode,
     "Gemma 2/3: score = cap * tanh(score / cap) after the scaling (Gemma 2's default 50; null: "
     "none), given to the attention backend, which refuses it at load if it cannot cap; other "
     "architectures: not null is refused"},
    {"final_logit_softcapping", kImplemented, kInCode,
     "Gemma 2/3: logits = cap * tanh(logits / cap) (Gemma 2's default 30; null: none); other "
     "architectures: not null is refused"},
    {"query_pre_attn_scalar", kImplemented, kInCode,
     "Gemma 2/3: the attention scale 1/sqrt(query_pre_attn_scalar) (default 256); other "
     "architectures: a number other than head_dim is refused (they scale by 1/sqrt(head_dim))"},
    {"use_bidirectional_attention", kRefused, kIfTrue,
     "Gemma's bidirectional (non-causal) attention for embedding models; kvserve's attention is "
     "causal"},
    {"qk_norm", kRefused, kIfTrue,
     "a key asking for RMSNorm of queries and keys; kvserve has it only as the architecture "
     "defines it (Qwen3ForCausalLM and Gemma3ForCausalLM always, without the key)"},
    {"use_qk_norm", kRefused, kIfTrue,
     "RMSNorm of queries and keys (Llama 4-style); kvserve has none"},
    {"qk_layernorm", kRefused, kIfTrue,
     "LayerNorm of queries and keys (Persimmon/Phi-style); kvserve has none"},
    {"attention_multiplier", kRefused, kIfNotNull,
     "Granite's attention scale in place of 1/sqrt(head_dim); kvserve has none"},
    // MLP, residual, logits.
    {"hidden_act", kImplemented, kInCode,
     "silu; any other activation is refused; Gemma: not read (hidden_activation is)"},
    {"hidden_activation", kImplemented, kInCode,
     "Gemma: gelu_pytorch_tanh (the default; GELU's tanh approximation); any other activation is "
     "refused; other architectures: not read"},
    {"mlp_bias", kRefused, kIfTrue, "biases on gate/up/down_proj; kvserve's MLP has none"},
    {"embedding_multiplier", kRefused, kIfNotOne,
     "Granite's scaling of the embeddings; kvserve has none"},
    {"residual_multiplier", kRefused, kIfNotOne,
     "Granite's scaling of each residual branch; kvserve has none"},
    {"logits_scaling", kRefused, kIfNotOne, "Granite's division of the logits; kvserve has none"},
    {"logit_scale", kRefused, kIfNotOne, "Cohere's scaling of the logits; kvserve has none"},
    {"quantization_config", kRefused, kIfNotNull,
     "a quantized checkpoint (GPTQ, AWQ, fp8, bitsandbytes, ...); kvserve reads only bf16, fp16 "
     "and fp32 weights and would not dequantize"},
    // Cannot change the logits.
    {"pretraining_tp", kIgnored, kNone,
     "older transformers split the projections into pretraining_tp slices and summed the "
     "partial products: the same product up to rounding; current versions do not read it"},
    {"attention_dropout", kIgnored, kNone, "dropout is off at inference"},
    {"initializer_range", kIgnored, kNone, "the random initialisation of training"},
    {"use_cache", kIgnored, kNone, "whether transformers keeps a KV cache; not the values"},
    {"pad_token_id", kIgnored, kNone, "a padding id for batched training/generation"},
    {"transformers_version", kIgnored, kNone, "metadata"},
    {"_name_or_path", kIgnored, kNone, "metadata"},
    {"cache_implementation", kIgnored, kNone,
     "which transformers cache class generate uses (Gemma's \"hybrid\"); not the values"},
});

// Refuses the kRefused fields that have a generic rule.
Status apply_refusal_rules(const core::JsonFields& f, const ModelConfig& c) {
  for (const ConfigFieldAudit& a : kConfigFieldAudit) {
    if (a.handling != kRefused) continue;
    const json* value = f.find(a.field);
    if (value == nullptr) continue;  // absent or null
    bool refuse = false;
    switch (a.rule) {
      case kIfNotNull:
        refuse = true;
        break;
      case kIfTrue: {
        KV_ASSIGN_OR_RETURN(const std::optional<bool> b, f.optional_bool(a.field));
        refuse = b.value_or(false);
        break;
      }
      case kIfNotOne: {
        KV_ASSIGN_OR_RETURN(const std::optional<double> x, f.optional_number(a.field));
        refuse = x.value_or(1.0) != 1.0;
        break;
      }
      case kIfNotHeadDim: {
        KV_ASSIGN_OR_RETURN(const std::optional<double> x, f.optional_number(a.field));
        refuse = x.value_or(c.head_dim) != static_cast<double>(c.head_dim);
        break;
      }
      case kNone:
      case kInCode:
        break;
    }
    if (refuse) {
      return f.error(
          StatusCode::kUnimplemented, a.field,
          fmt::format("{} is not supported ({})", core::describe_json_value(*value), a.note));
    }
  }
  return Status::ok();
}

std::string supported_architectures() {
  std::string out;
  for (const ArchitectureInfo& a : kArchitectures) {
    if (!out.empty()) out += ", ";
    out += a.name;
  }
  return out;
}

Result<const ArchitectureInfo*> parse_architecture(const core::JsonFields& f) {
  const json* archs = f.find("architectures");
  if (archs == nullptr) {
    return f.error(StatusCode::kInvalidArgument, "architectures",
                   fmt::format("missing (one of {} is required)", supported_architectures()));
  }
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return f.error(StatusCode::kInvalidArgument, "architectures",
                   fmt::format("expected a non-empty list of strings, got {}",
                               core::describe_json_value(*archs)));
  }
  const std::string name = (*archs)[0].get<std::string>();
  const ArchitectureInfo* info = nullptr;
  for (const ArchitectureInfo& a : kArchitectures) {
    if (a.name == name) info = &a;
  }
  if (info == nullptr) {
    return f.error(
        StatusCode::kUnimplemented, "architectures",
        fmt::format("'{}' is not supported (supported: {})", name, supported_architectures()));
  }
  KV_ASSIGN_OR_RETURN(const std::optional<std::string> model_type, f.optional_string("model_type"));
  if (model_type && *model_type != info->model_type) {
    return f.error(StatusCode::kInvalidArgument, "model_type",
                   fmt::format("'{}' does not match architectures[0] '{}' (expected '{}')",
                               *model_type, name, info->model_type));
  }
  return info;
}

// A list of numbers of exactly `size` entries (longrope's short_factor / long_factor).
Result<std::vector<double>> required_number_list(const core::JsonFields& f, std::string_view key,
                                                 int64_t size) {
  const json* v = f.find(key);
  if (v == nullptr) return f.error(StatusCode::kInvalidArgument, key, "missing");
  if (!v->is_array()) {
    return f.error(
        StatusCode::kInvalidArgument, key,
        fmt::format("expected a list of numbers, got {}", core::describe_json_value(*v)));
  }
  std::vector<double> out;
  for (const json& e : *v) {
    if (!e.is_number()) {
      return f.error(StatusCode::kInvalidArgument, key,
                     fmt::format("expected a list of numbers, got an element {}",
                                 core::describe_json_value(e)));
    }
    out.push_back(e.get<double>());
    if (!(out.back() > 0.0)) {
      return f.error(StatusCode::kInvalidArgument, key,
                     fmt::format("entries must be positive, got {}", out.back()));
    }
  }
  if (static_cast<int64_t>(out.size()) != size) {
    return f.error(StatusCode::kInvalidArgument, key,
                   fmt::format("has {} entries, expected head_dim / 2 = {}", out.size(), size));
  }
  return out;
}

// transformers' get_mscale (yarn): 0.1 * mscale * ln(scale) + 1, or 1 for scale <= 1.
double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

constexpr std::string_view kSupportedRopeTypes = "default, linear, dynamic, yarn, longrope, llama3";

// "rope_scaling" (or the rope fields of transformers v5's "rope_parameters"). The fields each type
// reads are those of transformers 5's _compute_*_parameters; what they leave optional is resolved
// here as they resolve it. `c` has max_position_embeddings and head_dim already.
Status parse_rope_scaling(const core::JsonFields& parent, std::string_view key, ModelConfig* c) {
  RopeScaling* out = &c->rope_scaling;
  const json* value = parent.find(key);
  if (value == nullptr) return Status::ok();  // absent or null: no scaling
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(*value, parent.source(), parent.name(key)));
  const core::JsonFields f(*value, parent.source(), parent.name(key) + ".");
  // transformers >= 4.45 writes "rope_type"; older configs "type".
  std::string type_key = "rope_type";
  KV_ASSIGN_OR_RETURN(std::optional<std::string> type, f.optional_string("rope_type"));
  if (!type) {
    type_key = "type";
    KV_ASSIGN_OR_RETURN(type, f.optional_string("type"));
  }
  if (!type) {
    return f.error(StatusCode::kInvalidArgument, "rope_type",
                   "missing (rope_scaling needs \"rope_type\" or \"type\")");
  }
  if (*type == "default") {
    out->rope_type = "default";
    return Status::ok();
  }
  if (*type != "linear" && *type != "dynamic" && *type != "yarn" && *type != "longrope" &&
      *type != "llama3") {
    return f.error(
        StatusCode::kUnimplemented, type_key,
        fmt::format("'{}' is not supported (supported: {})", *type, kSupportedRopeTypes));
  }
  out->rope_type = *type;
  // factor: required by every type but longrope (there, only the attention factor's input).
  std::optional<double> factor;
  if (*type == "longrope") {
    KV_ASSIGN_OR_RETURN(factor, f.optional_number("factor"));
  } else {
    KV_ASSIGN_OR_RETURN(factor, f.required_number("factor"));
  }
  // original_max_position_embeddings: required by llama3, yarn and longrope; dynamic and linear
  // do not read it.
  if (*type == "llama3" || *type == "yarn" || *type == "longrope") {
    // Phi-3-style configs keep it beside rope_scaling, at the top level (transformers 5 moves
    // it into rope_parameters).
    const bool top_level = !f.has("original_max_position_embeddings") &&
                           parent.has("original_max_position_embeddings");
    const core::JsonFields& holder = top_level ? parent : f;
    KV_ASSIGN_OR_RETURN(const int64_t original,
                        holder.required_int("original_max_position_embeddings"));
    if (original <= 0) {
      return holder.error(StatusCode::kInvalidArgument, "original_max_position_embeddings",
                          fmt::format("must be positive, got {}", original));
    }
    out->original_max_position_embeddings = original;
  }
  if (!factor) {  // longrope: the ratio of the two contexts
    factor = static_cast<double>(c->max_position_embeddings) /
             static_cast<double>(out->original_max_position_embeddings);
  } else if (*factor < 1.0) {
    return f.error(StatusCode::kInvalidArgument, "factor",
                   fmt::format("must be >= 1, got {}", *factor));
  }
  out->factor = *factor;
  if (*type != "llama3" && !f.has("original_max_position_embeddings")) {
    KV_ASSIGN_OR_RETURN(const std::optional<double> raw_factor, f.optional_number("factor"));
    out->context_factor = raw_factor.value_or(1.0);
  }
  if (*type == "llama3") {
    // Hugging Face requires all four for llama3.
    KV_ASSIGN_OR_RETURN(out->low_freq_factor, f.required_number("low_freq_factor"));
    KV_ASSIGN_OR_RETURN(out->high_freq_factor, f.required_number("high_freq_factor"));
    if (out->low_freq_factor <= 0.0 || out->high_freq_factor <= out->low_freq_factor) {
      return f.error(StatusCode::kInvalidArgument, "high_freq_factor",
                     fmt::format("must exceed low_freq_factor ({}) > 0, got {}",
                                 out->low_freq_factor, out->high_freq_factor));
    }
  }
  KV_ASSIGN_OR_RETURN(const std::optional<double> attention_factor,
                      f.optional_number("attention_factor"));
  if (attention_factor && !(*attention_factor > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "attention_factor",
                   fmt::format("must be positive, got {}", *attention_factor));
  }
  if (*type == "yarn") {
    KV_ASSIGN_OR_RETURN(const std::optional<double> mscale, f.optional_number("mscale"));
    KV_ASSIGN_OR_RETURN(const std::optional<double> mscale_all_dim,
                        f.optional_number("mscale_all_dim"));
    if (attention_factor) {
      out->attention_factor = *attention_factor;
    } else if (mscale.value_or(0.0) != 0.0 && mscale_all_dim.value_or(0.0) != 0.0) {
      out->attention_factor =
          yarn_mscale(out->factor, *mscale) / yarn_mscale(out->factor, *mscale_all_dim);
    } else {
      out->attention_factor = yarn_mscale(out->factor, 1.0);
    }
    // transformers reads these with `or`: 0 (or absent) means the default.
    KV_ASSIGN_OR_RETURN(const std::optional<double> beta_fast, f.optional_number("beta_fast"));
    KV_ASSIGN_OR_RETURN(const std::optional<double> beta_slow, f.optional_number("beta_slow"));
    out->beta_fast = beta_fast.value_or(0.0) != 0.0 ? *beta_fast : 32.0;
    out->beta_slow = beta_slow.value_or(0.0) != 0.0 ? *beta_slow : 1.0;
    if (!(out->beta_fast > 0.0) || !(out->beta_slow > 0.0)) {
      return f.error(StatusCode::kInvalidArgument, out->beta_fast > 0.0 ? "beta_slow" : "beta_fast",
                     fmt::format("must be positive, got beta_fast {} and beta_slow {}",
                                 out->beta_fast, out->beta_slow));
    }
    KV_ASSIGN_OR_RETURN(const std::optional<bool> truncate, f.optional_bool("truncate"));
    out->truncate = truncate.value_or(true);
  }
  if (*type == "longrope") {
    const int64_t half = c->head_dim / 2;
    KV_ASSIGN_OR_RETURN(out->short_factor, required_number_list(f, "short_factor", half));
    KV_ASSIGN_OR_RETURN(out->long_factor, required_number_list(f, "long_factor", half));
    if (attention_factor) {
      out->attention_factor = *attention_factor;
    } else if (out->factor <= 1.0) {
      out->attention_factor = 1.0;
    } else {
      out->attention_factor =
          std::sqrt(1.0 + std::log(out->factor) /
                              std::log(static_cast<double>(out->original_max_position_embeddings)));
    }
  }
  return Status::ok();
}

Status parse_rope(const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<double> theta, f.optional_number("rope_theta"));
  if (theta) c->rope_theta = *theta;
  KV_RETURN_IF_ERROR(parse_rope_scaling(f, "rope_scaling", c));
  // transformers v5 moves rope_theta and the scaling into "rope_parameters".
  if (const json* params = f.find("rope_parameters"); params != nullptr) {
    KV_RETURN_IF_ERROR(core::JsonFields::expect_object(*params, f.source(), "rope_parameters"));
    const core::JsonFields p(*params, f.source(), "rope_parameters.");
    KV_ASSIGN_OR_RETURN(const std::optional<double> p_theta, p.optional_number("rope_theta"));
    if (p_theta) c->rope_theta = *p_theta;
    if (p.has("rope_type") || p.has("type")) {
      KV_RETURN_IF_ERROR(parse_rope_scaling(f, "rope_parameters", c));
    }
    KV_ASSIGN_OR_RETURN(const std::optional<double> partial,
                        p.optional_number("partial_rotary_factor"));
    if (partial && *partial != 1.0) {
      return p.error(StatusCode::kUnimplemented, "partial_rotary_factor",
                     fmt::format("{} is not supported (rotary embeddings on part of each head; "
                                 "kvserve rotates the whole head)",
                                 *partial));
    }
  }
  if (!(c->rope_theta > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "rope_theta",
                   fmt::format("must be positive, got {}", c->rope_theta));
  }
  return Status::ok();
}

Status parse_dtype_field(const core::JsonFields& f, ModelConfig* c) {
  // transformers >= 4.56 writes "dtype"; earlier versions "torch_dtype".
  std::string key = "torch_dtype";
  KV_ASSIGN_OR_RETURN(std::optional<std::string> name, f.optional_string(key));
  if (!name) {
    key = "dtype";
    KV_ASSIGN_OR_RETURN(name, f.optional_string(key));
  }
  if (!name) {
    c->torch_dtype = DType::kF32;  // what transformers loads when the config declares none
    return Status::ok();
  }
  DType t;
  if (!parse_dtype(*name, &t) || !is_floating(t) || is_float8(t)) {
    return f.error(
        StatusCode::kInvalidArgument, key,
        fmt::format("'{}' is not a checkpoint dtype (bfloat16, float16, float32)", *name));
  }
  c->torch_dtype = t;
  return Status::ok();
}

Status parse_shapes(const core::JsonFields& f, int32_t default_head_dim, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(c->vocab_size, f.required_positive_int32("vocab_size"));
  KV_ASSIGN_OR_RETURN(c->hidden_size, f.required_positive_int32("hidden_size"));
  KV_ASSIGN_OR_RETURN(c->intermediate_size, f.required_positive_int32("intermediate_size"));
  KV_ASSIGN_OR_RETURN(c->num_hidden_layers, f.required_positive_int32("num_hidden_layers"));
  KV_ASSIGN_OR_RETURN(c->num_attention_heads, f.required_positive_int32("num_attention_heads"));
  KV_ASSIGN_OR_RETURN(const std::optional<int32_t> kv_heads,
                      f.optional_positive_int32("num_key_value_heads"));
  c->num_key_value_heads = kv_heads.value_or(c->num_attention_heads);
  if (c->num_attention_heads % c->num_key_value_heads != 0) {
    return f.error_about(StatusCode::kInvalidArgument, "num_key_value_heads",
                         fmt::format("({}) does not divide num_attention_heads ({})",
                                     c->num_key_value_heads, c->num_attention_heads));
  }
  KV_ASSIGN_OR_RETURN(const std::optional<int32_t> head_dim, f.optional_positive_int32("head_dim"));
  if (head_dim) {
    c->head_dim = *head_dim;  // may differ from hidden_size / heads (the projections follow it)
  } else if (default_head_dim > 0) {
    c->head_dim = default_head_dim;  // Qwen3Config / Gemma2Config / Gemma3TextConfig
  } else {
    if (c->hidden_size % c->num_attention_heads != 0) {
      return f.error_about(StatusCode::kInvalidArgument, "hidden_size",
                           fmt::format("({}) is not a multiple of num_attention_heads ({}) and no "
                                       "head_dim is given",
                                       c->hidden_size, c->num_attention_heads));
    }
    c->head_dim = c->hidden_size / c->num_attention_heads;
  }
  if (c->head_dim % 2 != 0) {
    return f.error(
        StatusCode::kInvalidArgument, head_dim ? "head_dim" : "hidden_size",
        fmt::format("head_dim {} is odd; rotary embeddings need an even head_dim", c->head_dim));
  }
  return Status::ok();
}

Status parse_attention_bias(const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<bool> attention_bias, f.optional_bool("attention_bias"));
  switch (c->architecture) {
    case Architecture::kLlama:
      if (attention_bias.value_or(false)) {
        return f.error(StatusCode::kUnimplemented, "attention_bias",
                       "true is not supported for LlamaForCausalLM (LlamaAttention then biases "
                       "q/k/v and o_proj; kvserve has no o_proj bias)");
      }
      c->attention_bias = false;
      break;
    case Architecture::kQwen2:
      c->attention_bias = true;  // Qwen2Attention: q/k/v always have a bias, o_proj none
      break;
    case Architecture::kMistral:
      if (attention_bias.value_or(false)) {
        return f.error(StatusCode::kUnimplemented, "attention_bias",
                       "true is not supported for MistralForCausalLM (MistralAttention has no "
                       "biases: the checkpoint is not a Mistral)");
      }
      c->attention_bias = false;
      break;
    case Architecture::kQwen3:
    case Architecture::kGemma2:
    case Architecture::kGemma3:
      if (attention_bias.value_or(false)) {
        return f.error(StatusCode::kUnimplemented, "attention_bias",
                       fmt::format("true is not supported for {} (its attention then biases "
                                   "q/k/v and o_proj; kvserve has no o_proj bias)",
                                   c->architecture_name));
      }
      c->attention_bias = false;
      break;
  }
  return Status::ok();
}

// Which layers transformers gives a sliding window, and the window: ModelConfig::layer_window_left.
Status parse_sliding_window(const json& root, const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<int32_t> sliding_window,
                      f.optional_positive_int32("sliding_window"));
  int32_t window = sliding_window.value_or(0);  // 0: none
  const auto layers = static_cast<size_t>(c->num_hidden_layers);
  std::vector<bool> sliding(layers, false);
  switch (c->architecture) {
    case Architecture::kLlama:
      window = 0;  // LlamaConfig has no sliding window; LlamaAttention reads none
      break;
    case Architecture::kMistral:
      // MistralConfig's default is 4096 when the key is absent; null turns it off (v0.2 on).
      // MistralModel then masks every layer with it.
      if (!root.contains("sliding_window")) window = 4096;
      if (window > 0) sliding.assign(layers, true);
      break;
    case Architecture::kQwen2:
    case Architecture::kQwen3: {
      // Qwen2Config (and Qwen3Config): sliding_window defaults to 4096 when the key is absent and
      // is kept only when use_sliding_window is true; its default layer_types slide the layers
      // from max_window_layers (default 28) on.
      if (!root.contains("sliding_window")) window = 4096;
      KV_ASSIGN_OR_RETURN(const std::optional<bool> use_sw, f.optional_bool("use_sliding_window"));
      if (!use_sw.value_or(false)) window = 0;
      KV_ASSIGN_OR_RETURN(const std::optional<int64_t> max_window_layers,
                          f.optional_int("max_window_layers"));
      if (window > 0) {
        for (size_t i = 0; i < layers; ++i) {
          sliding[i] = static_cast<int64_t>(i) >= max_window_layers.value_or(28);
        }
      }
      break;
    }
    case Architecture::kGemma2:
    case Architecture::kGemma3: {
      // Gemma2Config / Gemma3TextConfig: 4096 when the key is absent. Without layer_types,
      // Gemma 2 slides on every other layer from layer 0 and Gemma 3 on all but every
      // sliding_window_pattern-th (default 6; transformers v5 writes "_sliding_window_pattern").
      if (!root.contains("sliding_window")) window = 4096;
      int64_t pattern = 2;
      if (c->architecture == Architecture::kGemma3) {
        const char* key =
            f.has("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
        KV_ASSIGN_OR_RETURN(const std::optional<int64_t> pat, f.optional_int(key));
        pattern = pat.value_or(6);
        if (pattern <= 0) {
          return f.error(StatusCode::kInvalidArgument, "sliding_window_pattern",
                         fmt::format("must be positive, got {}", pattern));
        }
      }
      if (window) {
        for (size_t i = 0; i < layers; ++i)
          sliding[i] = (static_cast<int64_t>(i) + 1) % pattern != 0;
      }
      break;
    }
  }
  // layer_types (transformers >= 4.53 writes it): Qwen2, Qwen3 and Gemma read it in place of
  // their defaults; Llama and Mistral do not read it (Mistral warns that the model wants another
  // class).
  const bool reads_layer_types =
      c->architecture != Architecture::kLlama && c->architecture != Architecture::kMistral;
  if (const json* types = f.find("layer_types"); types != nullptr) {
    if (!types->is_array() || types->size() != layers) {
      return f.error(StatusCode::kInvalidArgument, "layer_types",
                     fmt::format("expected a list of num_hidden_layers ({}) strings, got {}",
                                 layers, core::describe_json_value(*types)));
    }
    for (size_t i = 0; i < layers; ++i) {
      const json& t = (*types)[i];
      const std::string field = fmt::format("layer_types[{}]", i);
      if (!t.is_string()) {
        return f.error(StatusCode::kInvalidArgument, field,
                       fmt::format("expected a string, got {}", core::describe_json_value(t)));
      }
      const std::string type = t.get<std::string>();
      if (type == "full_attention") {
        if (reads_layer_types) sliding[i] = false;
      } else if (type == "sliding_attention") {
        if (window == 0) {
          // transformers builds this layer's sliding mask from a null sliding_window and fails.
          return f.error(
              StatusCode::kUnimplemented, field,
              fmt::format(
                  "'sliding_attention' is not supported: {} has no sliding window here "
                  "(sliding_window is null{}), so the layer has no window to slide",
                  c->architecture_name,
                  c->architecture == Architecture::kQwen2
                      ? " or use_sliding_window is not true"
                      : (c->architecture == Architecture::kLlama ? ": LlamaConfig has none" : "")));
        }
        if (reads_layer_types) sliding[i] = true;
      } else {
        return f.error(
            StatusCode::kUnimplemented, field,
            fmt::format("'{}' is not supported (supported: full_attention, sliding_attention)",
                        type));
      }
    }
  }
  // transformers' window w masks keys at or before p - w: window_left w - 1.
  const int32_t window_left = window - 1;
  c->layer_window_left.assign(layers, -1);
  c->layer_types.assign(layers, LayerType::kFullAttention);
  for (size_t i = 0; i < layers; ++i) {
    if (sliding[i] && window > 0) {
      c->layer_window_left[i] = window_left;
      c->layer_types[i] = LayerType::kSlidingAttention;
    }
  }
  return Status::ok();
}

// Gemma 3's per-layer rope: the sliding layers' base (rope_local_base_freq, or transformers v5's
// rope_parameters keyed by layer type), the full layers' base and scaling. Called after
// parse_rope, which leaves a nested rope_parameters alone (it has no top-level rope fields).
Status parse_gemma3_rope(const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<double> theta, f.optional_number("rope_theta"));
  if (!theta) c->rope_theta = 1000000.0;  // Gemma3TextConfig's default
  KV_ASSIGN_OR_RETURN(const std::optional<double> local, f.optional_number("rope_local_base_freq"));
  c->sliding_rope_theta = local.value_or(10000.0);
  if (const json* params = f.find("rope_parameters"); params != nullptr) {
    const core::JsonFields p(*params, f.source(), "rope_parameters.");
    if (const json* full = p.find("full_attention"); full != nullptr) {
      KV_RETURN_IF_ERROR(
          core::JsonFields::expect_object(*full, f.source(), p.name("full_attention")));
      const core::JsonFields ff(*full, f.source(), p.name("full_attention") + ".");
      KV_ASSIGN_OR_RETURN(const std::optional<double> t, ff.optional_number("rope_theta"));
      if (t) c->rope_theta = *t;
      KV_RETURN_IF_ERROR(parse_rope_scaling(p, "full_attention", c));
    }
    if (const json* sliding = p.find("sliding_attention"); sliding != nullptr) {
      KV_RETURN_IF_ERROR(
          core::JsonFields::expect_object(*sliding, f.source(), p.name("sliding_attention")));
      const core::JsonFields sf(*sliding, f.source(), p.name("sliding_attention") + ".");
      KV_ASSIGN_OR_RETURN(const std::optional<double> t, sf.optional_number("rope_theta"));
      if (t) c->sliding_rope_theta = *t;
      KV_ASSIGN_OR_RETURN(const std::optional<std::string> type, sf.optional_string("rope_type"));
      if (type && *type != "default") {
        return sf.error(StatusCode::kUnimplemented, "rope_type",
                        fmt::format("'{}' is not supported for the sliding layers (kvserve scales "
                                    "only the full layers' rope; supported: default)",
                                    *type));
      }
    }
  }
  if (!(*c->sliding_rope_theta > 0.0) || !(c->rope_theta > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "rope_local_base_freq",
                   fmt::format("the rotary bases must be positive, got {} (sliding) and {} (full)",
                               *c->sliding_rope_theta, c->rope_theta));
  }
  return Status::ok();
}

// The family's math beyond Llama's: Gemma's norms, embedding scale, activation, attention scale
// and soft-capping; Qwen3's and Gemma 3's q/k norms. Other architectures refuse the Gemma keys
// that would change their math if transformers read them.
Status parse_family_fields(const json& root, const core::JsonFields& f, ModelConfig* c) {
  const bool gemma = is_gemma(c->architecture);
  c->qk_norm = c->architecture == Architecture::kQwen3 || c->architecture == Architecture::kGemma3;
  KV_ASSIGN_OR_RETURN(std::optional<double> qpas, f.optional_number("query_pre_attn_scalar"));
  KV_ASSIGN_OR_RETURN(std::optional<double> attn_cap, f.optional_number("attn_logit_softcapping"));
  KV_ASSIGN_OR_RETURN(std::optional<double> final_cap,
                      f.optional_number("final_logit_softcapping"));
  if (!gemma) {
    KV_ASSIGN_OR_RETURN(const std::optional<std::string> act, f.optional_string("hidden_act"));
    c->hidden_act = act.value_or("silu");
    if (c->hidden_act != "silu") {
      return f.error(StatusCode::kUnimplemented, "hidden_act",
                     fmt::format("'{}' is not supported (supported: silu)", c->hidden_act));
    }
    if (qpas && *qpas != static_cast<double>(c->head_dim)) {
      return f.error(StatusCode::kUnimplemented, "query_pre_attn_scalar",
                     fmt::format("{} is not supported for {} (Gemma's attention scale "
                                 "1/sqrt(query_pre_attn_scalar); kvserve scales {} by "
                                 "1/sqrt(head_dim), the same only when they are equal)",
                                 *qpas, c->architecture_name, c->architecture_name));
    }
    for (const auto& [key, value] : {std::pair{"attn_logit_softcapping", attn_cap},
                                     std::pair{"final_logit_softcapping", final_cap}}) {
      if (value) {
        return f.error(StatusCode::kUnimplemented, key,
                       fmt::format("{} is not supported for {} (Gemma's tanh soft-capping; "
                                   "kvserve caps only Gemma2ForCausalLM and Gemma3ForCausalLM)",
                                   *value, c->architecture_name));
      }
    }
    return Status::ok();
  }
  // Gemma: the keys' absence means the config class's default, null means none.
  KV_ASSIGN_OR_RETURN(const std::optional<std::string> act, f.optional_string("hidden_activation"));
  c->hidden_act = act.value_or("gelu_pytorch_tanh");
  if (c->hidden_act != "gelu_pytorch_tanh") {
    return f.error(
        StatusCode::kUnimplemented, "hidden_activation",
        fmt::format("'{}' is not supported (supported: gelu_pytorch_tanh)", c->hidden_act));
  }
  const bool gemma2 = c->architecture == Architecture::kGemma2;
  if (!root.contains("query_pre_attn_scalar")) qpas = 256.0;
  if (!root.contains("attn_logit_softcapping") && gemma2) attn_cap = 50.0;
  if (!root.contains("final_logit_softcapping") && gemma2) final_cap = 30.0;
  if (!qpas || !(*qpas > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "query_pre_attn_scalar",
                   fmt::format("must be a positive number, got {}",
                               qpas ? fmt::format("{}", *qpas) : std::string("null")));
  }
  for (const auto& [key, value] : {std::pair{"attn_logit_softcapping", attn_cap},
                                   std::pair{"final_logit_softcapping", final_cap}}) {
    if (value && !(*value > 0.0)) {
      return f.error(StatusCode::kInvalidArgument, key,
                     fmt::format("must be positive (or null: none), got {}", *value));
    }
  }
  c->query_pre_attn_scalar = qpas;
  c->attn_logit_softcapping = attn_cap;
  c->final_logit_softcapping = final_cap;
  c->norm_weight_offset = 1.0;
  c->embedding_scale = std::sqrt(static_cast<double>(c->hidden_size));
  c->sandwich_norms = true;
  return Status::ok();
}

}  // namespace

double ModelConfig::layer_rope_theta(int32_t layer) const {
  return sliding_rope_theta && layer_slides(layer) ? *sliding_rope_theta : rope_theta;
}

bool ModelConfig::layer_rope_scaled(int32_t layer) const {
  return !(sliding_rope_theta && layer_slides(layer));
}

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  KV_ASSIGN_OR_RETURN(const json root, core::parse_json(json_text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);

  ModelConfig c;
  KV_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, parse_architecture(f));
  c.architecture = arch->architecture;
  c.architecture_name = std::string(arch->name);
  c.model_type = std::string(arch->model_type);

  KV_RETURN_IF_ERROR(parse_shapes(f, arch->default_head_dim, &c));
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> max_pos,
                      f.optional_int("max_position_embeddings"));
  c.max_position_embeddings = max_pos.value_or(arch->default_max_position_embeddings);
  if (c.max_position_embeddings <= 0) {
    return f.error(StatusCode::kInvalidArgument, "max_position_embeddings",
                   fmt::format("must be positive, got {}", c.max_position_embeddings));
  }
  KV_RETURN_IF_ERROR(parse_rope(f, &c));
  if (c.architecture == Architecture::kGemma3) KV_RETURN_IF_ERROR(parse_gemma3_rope(f, &c));
  KV_ASSIGN_OR_RETURN(const std::optional<double> eps, f.optional_number("rms_norm_eps"));
  c.rms_norm_eps = eps.value_or(1e-6);
  if (!(c.rms_norm_eps > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "rms_norm_eps",
                   fmt::format("must be positive, got {}", c.rms_norm_eps));
  }
  KV_ASSIGN_OR_RETURN(const std::optional<bool> tie, f.optional_bool("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(arch->default_tie_word_embeddings);
  KV_RETURN_IF_ERROR(parse_dtype_field(f, &c));
  KV_RETURN_IF_ERROR(parse_attention_bias(f, &c));
  KV_RETURN_IF_ERROR(parse_sliding_window(root, f, &c));
  KV_RETURN_IF_ERROR(parse_family_fields(root, f, &c));
  KV_RETURN_IF_ERROR(apply_refusal_rules(f, c));
  KV_ASSIGN_OR_RETURN(c.bos_token_id, f.optional_token_id("bos_token_id"));
  KV_ASSIGN_OR_RETURN(c.eos_token_ids, f.token_id_list("eos_token_id"));
  return c;
}

int64_t default_context_length(const ModelConfig& c) {
  return static_cast<int64_t>(c.rope_scaling.context_factor *
                              static_cast<double>(c.max_position_embeddings));
}

std::vector<int32_t> sliding_layers(const ModelConfig& c) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < c.layer_window_left.size(); ++i) {
    if (c.layer_window_left[i] >= 0) out.push_back(static_cast<int32_t>(i));
  }
  return out;
}

std::vector<int32_t> served_window_left(const ModelConfig& c, int64_t context_length) {
  std::vector<int32_t> out = c.layer_window_left;
  for (int32_t& w : out) {
    if (w >= 0 && int64_t{w} + 1 >= context_length) w = -1;
  }
  return out;
}

std::vector<SupportedArchitecture> supported_architecture_table() {
  std::vector<SupportedArchitecture> out;
  for (const ArchitectureInfo& a : kArchitectures)
    out.push_back({a.name, a.model_type, a.summary});
  return out;
}

std::span<const ConfigFieldAudit> config_field_audit() {
  return kConfigFieldAudit;
}

std::string_view field_handling_name(FieldHandling h) {
  switch (h) {
    case FieldHandling::kImplemented:
      return "implemented";
    case FieldHandling::kRefused:
      return "refused";
    case FieldHandling::kIgnored:
      return "ignored";
  }
  return "?";
}

Result<ModelConfig> load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(file));
  return parse_model_config(text, file.string());
}

}  // namespace kvserve::checkpoint

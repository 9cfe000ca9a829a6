// config.json: Hugging Face's defaults (LlamaConfig, Qwen2Config, MistralConfig) and validation.
#include "kvserve/checkpoint/config.h"

#include <algorithm>
#include <array>
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
  std::string_view summary;  // what kvserve runs of it (README's supported-models table)
};

constexpr auto kArchitectures = std::to_array<ArchitectureInfo>({
    {"LlamaForCausalLM", "llama", Architecture::kLlama, 2048,
     "Llama 2/3/3.1/3.2 and Llama-shaped models: RMSNorm, SwiGLU, GQA, rope (default, llama3)"},
    {"Qwen2ForCausalLM", "qwen2", Architecture::kQwen2, 32768,
     "Qwen2 / Qwen2.5: Llama's decoder with q/k/v biases"},
    {"MistralForCausalLM", "mistral", Architecture::kMistral, 4096 * 32,
     "Mistral: Llama's decoder (no biases)"},
});

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
     "LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM; any other architecture is refused"},
    {"model_type", kImplemented, kInCode, "must match architectures[0] (llama, qwen2, mistral)"},
    {"vocab_size", kImplemented, kNone, "embedding and lm_head rows"},
    {"hidden_size", kImplemented, kNone, "the residual width"},
    {"intermediate_size", kImplemented, kNone, "the MLP width"},
    {"num_hidden_layers", kImplemented, kNone, "decoder layers"},
    {"num_attention_heads", kImplemented, kNone, "query heads"},
    {"num_key_value_heads", kImplemented, kNone,
     "grouped-query attention (default num_attention_heads); must divide num_attention_heads"},
    {"head_dim", kImplemented, kNone,
     "projections and attention follow it, also when it is not hidden_size / "
     "num_attention_heads; odd values are refused (rotary pairs)"},
    {"max_position_embeddings", kImplemented, kNone,
     "the context length served unless --context-length says otherwise"},
    {"tie_word_embeddings", kImplemented, kNone, "lm_head is embed_tokens when true"},
    {"rms_norm_eps", kImplemented, kNone, "every RMSNorm"},
    {"torch_dtype", kImplemented, kNone,
     "the checkpoint's declared dtype (\"dtype\" in transformers >= 4.56); weights are converted "
     "to the compute dtype"},
    {"bos_token_id", kImplemented, kNone, "the tokenizer's default BOS"},
    {"eos_token_id", kImplemented, kNone, "stop tokens (with generation_config.json's)"},
    // Position encoding.
    {"rope_theta", kImplemented, kNone, "the rotary base"},
    {"rope_scaling", kImplemented, kInCode,
     "rope_type default and llama3 are applied; any other type (linear, dynamic, yarn, longrope, "
     "...) is refused"},
    {"rope_parameters", kImplemented, kInCode,
     "transformers v5's rope_theta + rope_scaling, the same types; a partial_rotary_factor other "
     "than 1 in it is refused"},
    {"partial_rotary_factor", kRefused, kIfNotOne,
     "rotary embeddings on part of each head (transformers' default rope reads it for every "
     "architecture); kvserve rotates the whole head"},
    // Attention.
    {"attention_bias", kImplemented, kInCode,
     "Qwen2: q/k/v biases always, as Qwen2Attention (the key is not read); Llama and Mistral: "
     "true is refused (LlamaAttention also biases o_proj, which kvserve does not; "
     "MistralAttention has no biases, so such a checkpoint is not a Mistral)"},
    {"sliding_window", kRefused, kInCode,
     "Mistral (4096 when the key is absent, none when null: every layer) and Qwen2 (when "
     "use_sliding_window: the layers from max_window_layers on, or as layer_types says): "
     "refused at load (check_served_context) when smaller than the context length served; "
     "Llama: not read, as LlamaAttention"},
    {"use_sliding_window", kRefused, kInCode,
     "Qwen2: turns sliding_window on (see sliding_window); Llama/Mistral: not read, as "
     "transformers"},
    {"max_window_layers", kRefused, kInCode,
     "Qwen2 with use_sliding_window: layers at or past it slide (see sliding_window); at least "
     "num_hidden_layers means none"},
    {"layer_types", kRefused, kInCode,
     "num_hidden_layers entries; \"full_attention\" everywhere is the default; "
     "\"sliding_attention\" only where a sliding_window applies (see sliding_window); any other "
     "type is refused"},
    {"attn_logit_softcapping", kRefused, kIfNotNull,
     "Gemma 2's tanh soft-capping of the attention scores; kvserve does not cap them"},
    {"query_pre_attn_scalar", kRefused, kIfNotHeadDim,
     "Gemma 2's attention scale 1/sqrt(query_pre_attn_scalar); kvserve scales by "
     "1/sqrt(head_dim), the same only when they are equal"},
    {"qk_norm", kRefused, kIfTrue,
     "RMSNorm of queries and keys before rope (Qwen3-style); kvserve has none"},
    {"use_qk_norm", kRefused, kIfTrue,
     "RMSNorm of queries and keys (Llama 4-style); kvserve has none"},
    {"qk_layernorm", kRefused, kIfTrue,
     "LayerNorm of queries and keys (Persimmon/Phi-style); kvserve has none"},
    {"attention_multiplier", kRefused, kIfNotNull,
     "Granite's attention scale in place of 1/sqrt(head_dim); kvserve has none"},
    // MLP, residual, logits.
    {"hidden_act", kImplemented, kInCode, "silu; any other activation is refused"},
    {"mlp_bias", kRefused, kIfTrue, "biases on gate/up/down_proj; kvserve's MLP has none"},
    {"final_logit_softcapping", kRefused, kIfNotNull,
     "Gemma 2's tanh soft-capping of the logits; kvserve does not cap them"},
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

// "rope_scaling" (or the rope fields of transformers v5's "rope_parameters").
Status parse_rope_scaling(const core::JsonFields& parent, std::string_view key, RopeScaling* out) {
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
  if (*type != "llama3") {
    return f.error(StatusCode::kUnimplemented, type_key,
                   fmt::format("'{}' is not supported (supported: default, llama3)", *type));
  }
  out->rope_type = "llama3";
  // Hugging Face requires all four for llama3.
  KV_ASSIGN_OR_RETURN(out->factor, f.required_number("factor"));
  KV_ASSIGN_OR_RETURN(out->low_freq_factor, f.required_number("low_freq_factor"));
  KV_ASSIGN_OR_RETURN(out->high_freq_factor, f.required_number("high_freq_factor"));
  KV_ASSIGN_OR_RETURN(const int64_t original, f.required_int("original_max_position_embeddings"));
  out->original_max_position_embeddings = original;
  if (out->factor < 1.0) {
    return f.error(StatusCode::kInvalidArgument, "factor",
                   fmt::format("must be >= 1, got {}", out->factor));
  }
  if (out->low_freq_factor <= 0.0 || out->high_freq_factor <= out->low_freq_factor) {
    return f.error(StatusCode::kInvalidArgument, "high_freq_factor",
                   fmt::format("must exceed low_freq_factor ({}) > 0, got {}", out->low_freq_factor,
                               out->high_freq_factor));
  }
  if (original <= 0) {
    return f.error(StatusCode::kInvalidArgument, "original_max_position_embeddings",
                   fmt::format("must be positive, got {}", original));
  }
  return Status::ok();
}

Status parse_rope(const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<double> theta, f.optional_number("rope_theta"));
  if (theta) c->rope_theta = *theta;
  KV_RETURN_IF_ERROR(parse_rope_scaling(f, "rope_scaling", &c->rope_scaling));
  // transformers v5 moves rope_theta and the scaling into "rope_parameters".
  if (const json* params = f.find("rope_parameters"); params != nullptr) {
    KV_RETURN_IF_ERROR(core::JsonFields::expect_object(*params, f.source(), "rope_parameters"));
    const core::JsonFields p(*params, f.source(), "rope_parameters.");
    KV_ASSIGN_OR_RETURN(const std::optional<double> p_theta, p.optional_number("rope_theta"));
    if (p_theta) c->rope_theta = *p_theta;
    if (p.has("rope_type") || p.has("type")) {
      KV_RETURN_IF_ERROR(parse_rope_scaling(f, "rope_parameters", &c->rope_scaling));
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

Status parse_shapes(const core::JsonFields& f, ModelConfig* c) {
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
  }
  return Status::ok();
}

// Which layers transformers gives a sliding window, and the window: ModelConfig::sliding_window.
Status parse_sliding_window(const json& root, const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(std::optional<int32_t> window, f.optional_positive_int32("sliding_window"));
  const auto layers = static_cast<size_t>(c->num_hidden_layers);
  std::vector<bool> sliding(layers, false);
  switch (c->architecture) {
    case Architecture::kLlama:
      window.reset();  // LlamaConfig has no sliding window; LlamaAttention reads none
      break;
    case Architecture::kMistral:
      // MistralConfig's default is 4096 when the key is absent; null turns it off (v0.2 on).
      // MistralModel then masks every layer with it.
      if (!root.contains("sliding_window")) window = 4096;
      if (window) sliding.assign(layers, true);
      break;
    case Architecture::kQwen2: {
      // Qwen2Config keeps sliding_window only when use_sliding_window is true, and gives it to
      // the layers from max_window_layers (default 28) on unless layer_types says otherwise.
      KV_ASSIGN_OR_RETURN(const std::optional<bool> use_sw, f.optional_bool("use_sliding_window"));
      if (!use_sw.value_or(false)) window.reset();
      KV_ASSIGN_OR_RETURN(const std::optional<int64_t> max_window_layers,
                          f.optional_int("max_window_layers"));
      if (window) {
        for (size_t i = 0; i < layers; ++i) {
          sliding[i] = static_cast<int64_t>(i) >= max_window_layers.value_or(28);
        }
      }
      break;
    }
  }
  // layer_types (transformers >= 4.53 writes it): Qwen2 reads it in place of max_window_layers;
  // Llama and Mistral do not read it (Mistral warns that the model wants another class).
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
        if (c->architecture == Architecture::kQwen2) sliding[i] = false;
      } else if (type == "sliding_attention") {
        if (!window) {
          return f.error(
              StatusCode::kUnimplemented, field,
              fmt::format("'sliding_attention' is not supported: {} has no sliding window here "
                          "(kvserve has no sliding-window attention; only 'full_attention' layers)",
                          c->architecture_name));
        }
        if (c->architecture == Architecture::kQwen2) sliding[i] = true;
      } else {
        return f.error(StatusCode::kUnimplemented, field,
                       fmt::format("'{}' is not supported (supported: full_attention)", type));
      }
    }
  }
  c->sliding_window_layers = static_cast<int32_t>(std::count(sliding.begin(), sliding.end(), true));
  if (c->sliding_window_layers > 0) c->sliding_window = window;
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source) {
  KV_ASSIGN_OR_RETURN(const json root, core::parse_json(json_text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);

  ModelConfig c;
  KV_ASSIGN_OR_RETURN(const ArchitectureInfo* arch, parse_architecture(f));
  c.architecture = arch->architecture;
  c.architecture_name = std::string(arch->name);
  c.model_type = std::string(arch->model_type);

  KV_RETURN_IF_ERROR(parse_shapes(f, &c));
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> max_pos,
                      f.optional_int("max_position_embeddings"));
  c.max_position_embeddings = max_pos.value_or(arch->default_max_position_embeddings);
  if (c.max_position_embeddings <= 0) {
    return f.error(StatusCode::kInvalidArgument, "max_position_embeddings",
                   fmt::format("must be positive, got {}", c.max_position_embeddings));
  }
  KV_RETURN_IF_ERROR(parse_rope(f, &c));
  KV_ASSIGN_OR_RETURN(const std::optional<double> eps, f.optional_number("rms_norm_eps"));
  c.rms_norm_eps = eps.value_or(1e-6);
  if (!(c.rms_norm_eps > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "rms_norm_eps",
                   fmt::format("must be positive, got {}", c.rms_norm_eps));
  }
  KV_ASSIGN_OR_RETURN(const std::optional<bool> tie, f.optional_bool("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(false);
  KV_ASSIGN_OR_RETURN(const std::optional<std::string> act, f.optional_string("hidden_act"));
  c.hidden_act = act.value_or("silu");
  if (c.hidden_act != "silu") {
    return f.error(StatusCode::kUnimplemented, "hidden_act",
                   fmt::format("'{}' is not supported (supported: silu)", c.hidden_act));
  }
  KV_RETURN_IF_ERROR(parse_dtype_field(f, &c));
  KV_RETURN_IF_ERROR(parse_attention_bias(f, &c));
  KV_RETURN_IF_ERROR(parse_sliding_window(root, f, &c));
  KV_RETURN_IF_ERROR(apply_refusal_rules(f, c));
  KV_ASSIGN_OR_RETURN(c.bos_token_id, f.optional_token_id("bos_token_id"));
  KV_ASSIGN_OR_RETURN(c.eos_token_ids, f.token_id_list("eos_token_id"));
  return c;
}

Status check_served_context(const ModelConfig& c, int64_t context_length, std::string_view source) {
  if (!c.sliding_window || *c.sliding_window >= context_length) return Status::ok();
  const int32_t w = *c.sliding_window;
  return make_status(
      StatusCode::kUnimplemented,
      "{}: sliding_window {} is not supported with a context length of {}: {} attends only to the "
      "last {} tokens in {} of its {} layers, and kvserve has no sliding-window attention yet (it "
      "would attend to the whole context and answer sequences longer than {} tokens wrongly); "
      "serve it with --context-length {} or less",
      source, w, context_length, c.architecture_name, w, c.sliding_window_layers,
      c.num_hidden_layers, w, w);
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

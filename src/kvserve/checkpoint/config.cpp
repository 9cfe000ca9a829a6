// config.json: Hugging Face's defaults (LlamaConfig, Qwen2Config, MistralConfig) and validation.
#include "kvserve/checkpoint/config.h"

#include <array>

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
};

constexpr std::array<ArchitectureInfo, 3> kArchitectures = {{
    {"LlamaForCausalLM", "llama", Architecture::kLlama, 2048},
    {"Qwen2ForCausalLM", "qwen2", Architecture::kQwen2, 32768},
    {"MistralForCausalLM", "mistral", Architecture::kMistral, 4096 * 32},
}};

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

Status parse_architecture_specifics(const core::JsonFields& f, ModelConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<bool> attention_bias, f.optional_bool("attention_bias"));
  KV_ASSIGN_OR_RETURN(const std::optional<int32_t> sliding_window,
                      f.optional_positive_int32("sliding_window"));
  switch (c->architecture) {
    case Architecture::kLlama: {
      c->attention_bias = attention_bias.value_or(false);
      KV_ASSIGN_OR_RETURN(const std::optional<bool> mlp_bias, f.optional_bool("mlp_bias"));
      if (mlp_bias.value_or(false)) {
        return f.error(StatusCode::kUnimplemented, "mlp_bias",
                       "true is not supported (the MLP projections have no bias in kvserve)");
      }
      break;
    }
    case Architecture::kQwen2: {
      c->attention_bias = true;  // Qwen2Attention: q/k/v always have a bias, o_proj none
      // Qwen2Config keeps sliding_window only when use_sliding_window is true.
      KV_ASSIGN_OR_RETURN(const std::optional<bool> use_sw, f.optional_bool("use_sliding_window"));
      if (use_sw.value_or(false)) c->sliding_window = sliding_window;
      break;
    }
    case Architecture::kMistral:
      c->attention_bias = false;
      c->sliding_window = sliding_window;  // null in Mistral >= v0.2
      break;
  }
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
  KV_RETURN_IF_ERROR(parse_architecture_specifics(f, &c));
  KV_ASSIGN_OR_RETURN(c.bos_token_id, f.optional_token_id("bos_token_id"));
  KV_ASSIGN_OR_RETURN(c.eos_token_ids, f.token_id_list("eos_token_id"));
  return c;
}

Result<ModelConfig> load_model_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(file));
  return parse_model_config(text, file.string());
}

}  // namespace kvserve::checkpoint

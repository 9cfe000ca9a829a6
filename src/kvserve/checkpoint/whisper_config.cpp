// config.json and generation_config.json of Whisper checkpoints: transformers' WhisperConfig
// defaults and validation.
#include "kvserve/checkpoint/whisper_config.h"

#include "kvserve/core/json_fields.h"

namespace kvserve::checkpoint {
namespace {

using core::JsonFields;
using nlohmann::json;

constexpr std::string_view kArchitecture = "WhisperForConditionalGeneration";

Status parse_identity(const core::JsonFields& f, WhisperConfig* c) {
  KV_ASSIGN_OR_RETURN(const std::optional<std::string> model_type, f.optional_string("model_type"));
  if (!model_type) {
    return f.error(StatusCode::kInvalidArgument, "model_type", "missing (expected 'whisper')");
  }
  if (*model_type != "whisper") {
    return f.error(StatusCode::kInvalidArgument, "model_type",
                   fmt::format("'{}' is not a Whisper config (expected 'whisper')", *model_type));
  }
  const json* archs = f.find("architectures");
  if (archs == nullptr) return Status::ok();  // transformers picks the class from model_type
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return f.error(StatusCode::kInvalidArgument, "architectures",
                   fmt::format("expected a non-empty list of strings, got {}",
                               core::describe_json_value(*archs)));
  }
  const std::string name = (*archs)[0].get<std::string>();
  if (name != kArchitecture) {
    return f.error(StatusCode::kUnimplemented, "architectures",
                   fmt::format("'{}' is not supported (supported: {})", name, kArchitecture));
  }
  c->architecture_name = name;
  return Status::ok();
}

// A positive size, or the default when absent.
Status positive(const core::JsonFields& f, std::string_view key, int32_t* out) {
  KV_ASSIGN_OR_RETURN(const std::optional<int32_t> v, f.optional_positive_int32(key));
  if (v) *out = *v;
  return Status::ok();
}

Status heads_divide(const core::JsonFields& f, std::string_view heads_key, int32_t heads,
                    int32_t d_model) {
  if (d_model % heads == 0) return Status::ok();
  return f.error_about(StatusCode::kInvalidArgument, "d_model",
                       fmt::format("({}) is not a multiple of {} ({})", d_model, heads_key, heads));
}

Status parse_shapes(const core::JsonFields& f, WhisperConfig* c) {
  KV_RETURN_IF_ERROR(positive(f, "vocab_size", &c->vocab_size));
  KV_RETURN_IF_ERROR(positive(f, "num_mel_bins", &c->num_mel_bins));
  KV_RETURN_IF_ERROR(positive(f, "d_model", &c->d_model));
  KV_RETURN_IF_ERROR(positive(f, "encoder_layers", &c->encoder_layers));
  KV_RETURN_IF_ERROR(positive(f, "encoder_attention_heads", &c->encoder_attention_heads));
  KV_RETURN_IF_ERROR(positive(f, "encoder_ffn_dim", &c->encoder_ffn_dim));
  KV_RETURN_IF_ERROR(positive(f, "decoder_layers", &c->decoder_layers));
  KV_RETURN_IF_ERROR(positive(f, "decoder_attention_heads", &c->decoder_attention_heads));
  KV_RETURN_IF_ERROR(positive(f, "decoder_ffn_dim", &c->decoder_ffn_dim));
  KV_RETURN_IF_ERROR(positive(f, "max_source_positions", &c->max_source_positions));
  KV_RETURN_IF_ERROR(positive(f, "max_target_positions", &c->max_target_positions));
  KV_RETURN_IF_ERROR(
      heads_divide(f, "encoder_attention_heads", c->encoder_attention_heads, c->d_model));
  KV_RETURN_IF_ERROR(
      heads_divide(f, "decoder_attention_heads", c->decoder_attention_heads, c->d_model));
  if (c->d_model % 2 != 0) {
    // The encoder's sinusoidal positions have d_model / 2 sines and d_model / 2 cosines.
    return f.error(StatusCode::kInvalidArgument, "d_model",
                   fmt::format("must be even, got {}", c->d_model));
  }
  return Status::ok();
}

Status parse_dtype(const core::JsonFields& f, WhisperConfig* c) {
  // transformers >= 4.56 writes "dtype"; earlier versions "torch_dtype".
  std::string key = "torch_dtype";
  KV_ASSIGN_OR_RETURN(std::optional<std::string> name, f.optional_string(key));
  if (!name) {
    key = "dtype";
    KV_ASSIGN_OR_RETURN(name, f.optional_string(key));
  }
  if (!name) return Status::ok();  // f32, what transformers loads without a declaration
  DType t;
  if (!kvserve::parse_dtype(*name, &t) || !is_floating(t) || is_float8(t)) {
    return f.error(
        StatusCode::kInvalidArgument, key,
        fmt::format("'{}' is not a checkpoint dtype (bfloat16, float16, float32)", *name));
  }
  c->torch_dtype = t;
  return Status::ok();
}

// {"<|en|>": 50259, ...} as (name, id) pairs.
Result<std::vector<std::pair<std::string, int32_t>>> parse_id_map(const core::JsonFields& f,
                                                                  std::string_view key) {
  std::vector<std::pair<std::string, int32_t>> out;
  const json* v = f.find(key);
  if (v == nullptr) return out;
  if (!v->is_object()) {
    return f.error(
        StatusCode::kInvalidArgument, key,
        fmt::format("expected an object of token ids, got {}", core::describe_json_value(*v)));
  }
  const core::JsonFields entries(*v, f.source(), f.name(key) + ".");
  for (const auto& [name, value] : v->items()) {
    KV_ASSIGN_OR_RETURN(const std::optional<int32_t> id, entries.optional_token_id(name));
    if (!id) {
      return entries.error(StatusCode::kInvalidArgument, name, "expected a token id, got null");
    }
    out.emplace_back(name, *id);
  }
  return out;
}

// [[1, null], [2, 50359]]: (position, token or null) pairs.
Result<std::vector<std::pair<int32_t, std::optional<int32_t>>>> parse_forced_ids(
    const core::JsonFields& f) {
  std::vector<std::pair<int32_t, std::optional<int32_t>>> out;
  const json* v = f.find("forced_decoder_ids");
  if (v == nullptr) return out;
  const auto bad = [&](size_t i, const json& e) {
    return f.error(StatusCode::kInvalidArgument, "forced_decoder_ids",
                   fmt::format("element {}: expected [position, token id or null], got {}", i,
                               core::describe_json_value(e)));
  };
  if (!v->is_array()) {
    return f.error(StatusCode::kInvalidArgument, "forced_decoder_ids",
                   fmt::format("expected a list of pairs, got {}", core::describe_json_value(*v)));
  }
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_unsigned() ||
        !(e[1].is_null() || e[1].is_number_unsigned()) || e[0].get<uint64_t>() > INT32_MAX ||
        (e[1].is_number_unsigned() && e[1].get<uint64_t>() > INT32_MAX)) {
      return bad(i, e);
    }
    std::optional<int32_t> token;
    if (!e[1].is_null()) token = static_cast<int32_t>(e[1].get<uint64_t>());
    out.emplace_back(static_cast<int32_t>(e[0].get<uint64_t>()), token);
  }
  return out;
}

std::optional<int32_t> find_id(const std::vector<std::pair<std::string, int32_t>>& map,
                               std::string_view name) {
  for (const auto& [key, id] : map) {
    if (key == name) return id;
  }
  return std::nullopt;
}

}  // namespace

Result<WhisperConfig> parse_whisper_config(const std::string& json_text,
                                           const std::string& source) {
  KV_ASSIGN_OR_RETURN(const json root, core::parse_json(json_text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);
  WhisperConfig c;
  KV_RETURN_IF_ERROR(parse_identity(f, &c));
  KV_RETURN_IF_ERROR(parse_shapes(f, &c));
  KV_ASSIGN_OR_RETURN(const std::optional<bool> scale, f.optional_bool("scale_embedding"));
  c.scale_embedding = scale.value_or(false);
  KV_ASSIGN_OR_RETURN(const std::optional<bool> tie, f.optional_bool("tie_word_embeddings"));
  c.tie_word_embeddings = tie.value_or(true);
  if (!c.tie_word_embeddings) {
    return f.error(StatusCode::kUnimplemented, "tie_word_embeddings",
                   "false is not supported (proj_out is tied to model.decoder.embed_tokens)");
  }
  KV_ASSIGN_OR_RETURN(const std::optional<std::string> act,
                      f.optional_string("activation_function"));
  c.activation_function = act.value_or("gelu");
  if (c.activation_function != "gelu") {
    return f.error(StatusCode::kUnimplemented, "activation_function",
                   fmt::format("'{}' is not supported (supported: gelu)", c.activation_function));
  }
  KV_ASSIGN_OR_RETURN(const std::optional<double> eps, f.optional_number("layer_norm_eps"));
  c.layer_norm_eps = eps.value_or(1e-5);
  if (!(c.layer_norm_eps > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "layer_norm_eps",
                   fmt::format("must be positive, got {}", c.layer_norm_eps));
  }
  KV_RETURN_IF_ERROR(parse_dtype(f, &c));
  // Absent: WhisperConfig's defaults (50256 for pad/bos/eos, 50257 for decoder_start); null: none.
  KV_ASSIGN_OR_RETURN(c.pad_token_id, f.optional_token_id("pad_token_id"));
  KV_ASSIGN_OR_RETURN(c.bos_token_id, f.optional_token_id("bos_token_id"));
  KV_ASSIGN_OR_RETURN(c.eos_token_ids, f.token_id_list("eos_token_id"));
  KV_ASSIGN_OR_RETURN(c.decoder_start_token_id, f.optional_token_id("decoder_start_token_id"));
  if (!root.contains("pad_token_id")) c.pad_token_id = 50256;
  if (!root.contains("bos_token_id")) c.bos_token_id = 50256;
  if (!root.contains("eos_token_id")) c.eos_token_ids = {50256};
  if (!root.contains("decoder_start_token_id")) c.decoder_start_token_id = 50257;
  if (c.decoder_start_token_id && *c.decoder_start_token_id >= c.vocab_size) {
    return f.error_about(StatusCode::kInvalidArgument, "decoder_start_token_id",
                         fmt::format("({}) is outside the vocabulary of {}",
                                     *c.decoder_start_token_id, c.vocab_size));
  }
  return c;
}

Result<WhisperConfig> load_whisper_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "config.json";
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(file));
  return parse_whisper_config(text, file.string());
}

std::optional<int32_t> WhisperGenerationConfig::language_id(std::string_view language) const {
  if (auto id = find_id(lang_to_id, language)) return id;
  return find_id(lang_to_id, fmt::format("<|{}|>", language));
}

std::optional<int32_t> WhisperGenerationConfig::task_id(std::string_view task) const {
  return find_id(task_to_id, task);
}

Result<WhisperGenerationConfig> parse_whisper_generation_config(const std::string& json_text,
                                                                const std::string& source) {
  KV_ASSIGN_OR_RETURN(const json root, core::parse_json(json_text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);
  WhisperGenerationConfig g;
  KV_ASSIGN_OR_RETURN(g.suppress_tokens, f.token_id_list("suppress_tokens"));
  KV_ASSIGN_OR_RETURN(g.begin_suppress_tokens, f.token_id_list("begin_suppress_tokens"));
  KV_ASSIGN_OR_RETURN(g.forced_decoder_ids, parse_forced_ids(f));
  KV_ASSIGN_OR_RETURN(g.lang_to_id, parse_id_map(f, "lang_to_id"));
  KV_ASSIGN_OR_RETURN(g.task_to_id, parse_id_map(f, "task_to_id"));
  KV_ASSIGN_OR_RETURN(g.no_timestamps_token_id, f.optional_token_id("no_timestamps_token_id"));
  KV_ASSIGN_OR_RETURN(g.decoder_start_token_id, f.optional_token_id("decoder_start_token_id"));
  KV_ASSIGN_OR_RETURN(g.pad_token_id, f.optional_token_id("pad_token_id"));
  KV_ASSIGN_OR_RETURN(g.bos_token_id, f.optional_token_id("bos_token_id"));
  KV_ASSIGN_OR_RETURN(g.eos_token_ids, f.token_id_list("eos_token_id"));
  KV_ASSIGN_OR_RETURN(g.max_length, f.optional_positive_int32("max_length"));
  KV_ASSIGN_OR_RETURN(const std::optional<bool> multi, f.optional_bool("is_multilingual"));
  g.is_multilingual = multi.value_or(false);
  KV_ASSIGN_OR_RETURN(const std::optional<bool> ts, f.optional_bool("return_timestamps"));
  g.return_timestamps = ts.value_or(false);
  if (g.is_multilingual && (g.lang_to_id.empty() || g.task_to_id.empty())) {
    return f.error_about(StatusCode::kInvalidArgument, "is_multilingual",
                         "is true but lang_to_id or task_to_id is missing or empty");
  }
  return g;
}

Result<WhisperGenerationConfig> load_whisper_generation_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "generation_config.json";
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(file));
  return parse_whisper_generation_config(text, file.string());
}

}  // namespace kvserve::checkpoint

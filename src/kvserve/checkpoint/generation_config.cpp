// generation_config.json: the sampling defaults and stop tokens a checkpoint ships.
#include "kvserve/checkpoint/config.h"

#include <limits>

#include "kvserve/core/json_fields.h"

namespace kvserve::checkpoint {

Result<GenerationConfig> load_generation_config(const std::filesystem::path& dir) {
  const std::filesystem::path file = dir / "generation_config.json";
  GenerationConfig g;
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) return g;  // optional: the defaults
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(file));
  const std::string source = file.string();
  KV_ASSIGN_OR_RETURN(const nlohmann::json root, core::parse_json(text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);

  KV_ASSIGN_OR_RETURN(g.eos_token_ids, f.token_id_list("eos_token_id"));
  KV_ASSIGN_OR_RETURN(g.bos_token_id, f.optional_token_id("bos_token_id"));
  KV_ASSIGN_OR_RETURN(g.pad_token_id, f.optional_token_id("pad_token_id"));
  KV_ASSIGN_OR_RETURN(const std::optional<bool> do_sample, f.optional_bool("do_sample"));
  g.do_sample = do_sample.value_or(false);
  KV_ASSIGN_OR_RETURN(g.temperature, f.optional_number("temperature"));
  if (g.temperature && *g.temperature < 0.0) {
    return f.error(StatusCode::kInvalidArgument, "temperature",
                   fmt::format("must be >= 0, got {}", *g.temperature));
  }
  KV_ASSIGN_OR_RETURN(g.top_p, f.optional_number("top_p"));
  if (g.top_p && !(*g.top_p > 0.0 && *g.top_p <= 1.0)) {
    return f.error(StatusCode::kInvalidArgument, "top_p",
                   fmt::format("must be in (0, 1], got {}", *g.top_p));
  }
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> top_k, f.optional_int("top_k"));
  if (top_k) {
    // transformers uses 0 for "no top-k"; SGLang uses -1. Both mean disabled.
    if (*top_k < -1 || *top_k > std::numeric_limits<int32_t>::max()) {
      return f.error(StatusCode::kInvalidArgument, "top_k",
                     fmt::format("must be >= -1, got {}", *top_k));
    }
    g.top_k = static_cast<int32_t>(*top_k);
  }
  KV_ASSIGN_OR_RETURN(g.min_p, f.optional_number("min_p"));
  if (g.min_p && !(*g.min_p >= 0.0 && *g.min_p <= 1.0)) {
    return f.error(StatusCode::kInvalidArgument, "min_p",
                   fmt::format("must be in [0, 1], got {}", *g.min_p));
  }
  KV_ASSIGN_OR_RETURN(g.repetition_penalty, f.optional_number("repetition_penalty"));
  if (g.repetition_penalty && !(*g.repetition_penalty > 0.0)) {
    return f.error(StatusCode::kInvalidArgument, "repetition_penalty",
                   fmt::format("must be positive, got {}", *g.repetition_penalty));
  }
  KV_ASSIGN_OR_RETURN(g.max_new_tokens, f.optional_positive_int32("max_new_tokens"));
  return g;
}

}  // namespace kvserve::checkpoint

// Tokenizer::from_files / from_directory: tokenizer.json (+ tokenizer_config.json) into an
// HfTokenizer, with every failure a Status naming the file.
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kvserve/tokenizer/hf_tokenizer.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::tokenizer {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

Result<json> read_json(const fs::path& path, std::string_view what) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    return make_status(StatusCode::kNotFound, "{} not found: {}", what, path.string());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_status(StatusCode::kIoError, "cannot open {} {}", what, path.string());
  std::stringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) return make_status(StatusCode::kIoError, "cannot read {} {}", what, path.string());
  try {
    return json::parse(buffer.str());
  } catch (const json::exception& e) {
    return invalid_argument("{} {} is not valid JSON: {}", what, path.string(), e.what());
  }
}

// A token named in tokenizer_config.json: a string, {"content": ...}, or null.
std::optional<std::string> config_token(const json& config, const char* key) {
  if (!config.contains(key)) return std::nullopt;
  const json& v = config.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content")) return v.at("content").get<std::string>();
  return std::nullopt;
}

Result<HfTokenizerParts> parse_tokenizer_json(const json& j, const std::string& file) {
  if (!j.is_object()) return invalid_argument("{}: the top level is not a JSON object", file);
  HfTokenizerParts parts;
  if (!j.contains("model")) return invalid_argument("{}: no \"model\"", file);
  const json& model = j.at("model");
  const std::string type = model.value("type", std::string(model.contains("merges") ? "BPE" : ""));
  if (type != "BPE") {
    return make_status(StatusCode::kUnimplemented,
                       "{}: model type '{}' is not supported (supported: BPE)", file, type);
  }
  KV_ASSIGN_OR_RETURN(parts.model, BpeModel::from_json(model, file));
  const json null_json;
  auto component = [&](const char* key) -> const json& {
    return j.contains(key) ? j.at(key) : null_json;
  };
  KV_ASSIGN_OR_RETURN(parts.normalizer, make_normalizer(component("normalizer"), file));
  KV_ASSIGN_OR_RETURN(parts.pre_tokenizer, make_pre_tokenizer(component("pre_tokenizer"), file));
  KV_ASSIGN_OR_RETURN(parts.special_template,
                      make_post_processor_template(component("post_processor"), file));
  KV_ASSIGN_OR_RETURN(parts.decoder, make_decoder(component("decoder"), file));
  for (const json& t :
       component("added_tokens").is_array() ? component("added_tokens") : json::array()) {
    AddedToken token;
    token.content = t.at("content").get<std::string>();
    token.id = t.at("id").get<int32_t>();
    if (token.id < 0)
      return invalid_argument("{}: added token '{}' has a negative id", file, token.content);
    token.special = t.value("special", false);
    token.single_word = t.value("single_word", false);
    token.lstrip = t.value("lstrip", false);
    token.rstrip = t.value("rstrip", false);
    token.normalized = t.value("normalized", !token.special);
    parts.added_tokens.push_back(std::move(token));
  }
  return parts;
}

std::optional<int32_t> lookup(const HfTokenizerParts& parts, const std::string& token) {
  for (const AddedToken& t : parts.added_tokens) {
    if (t.content == token) return t.id;
  }
  return parts.model->token_to_id(token);
}

// tokenizer_config.json: bos/eos tokens, add_bos_token / add_eos_token, chat_template.
Status apply_config(const json& c, const std::string& file, HfTokenizerParts& parts) {
  if (!c.is_object()) return invalid_argument("{}: the top level is not a JSON object", file);
  if (const auto bos = config_token(c, "bos_token")) parts.bos_token_id = lookup(parts, *bos);
  if (c.contains("bos_token") && c.at("bos_token").is_null()) parts.bos_token_id.reset();
  if (const auto eos = config_token(c, "eos_token")) parts.eos_token_id = lookup(parts, *eos);

  // add_bos_token / add_eos_token, when given, decide whether BOS leads and EOS ends the
  // template; the rest of the post-processor's template is kept.
  SpecialTokenTemplate& t = parts.special_template;
  if (c.contains("add_bos_token") && c.at("add_bos_token").is_boolean() && parts.bos_token_id) {
    const bool has = !t.prefix.empty() && t.prefix.front() == *parts.bos_token_id;
    const bool want = c.at("add_bos_token").get<bool>();
    if (want && !has) t.prefix.insert(t.prefix.begin(), *parts.bos_token_id);
    if (!want && has) t.prefix.erase(t.prefix.begin());
  }
  if (c.contains("add_eos_token") && c.at("add_eos_token").is_boolean() && parts.eos_token_id) {
    const bool has = !t.suffix.empty() && t.suffix.back() == *parts.eos_token_id;
    const bool want = c.at("add_eos_token").get<bool>();
    if (want && !has) t.suffix.push_back(*parts.eos_token_id);
    if (!want && has) t.suffix.pop_back();
  }

  if (c.contains("chat_template")) {
    const json& ct = c.at("chat_template");
    if (ct.is_string()) {
      parts.chat_template = ct.get<std::string>();
    } else if (ct.is_array()) {
      for (const json& entry : ct) {
        if (entry.value("name", std::string()) == "default") {
          parts.chat_template = entry.at("template").get<std::string>();
        }
      }
    } else if (!ct.is_null()) {
      return invalid_argument("{}: chat_template must be a string or a list of {{name, template}}",
                              file);
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_files(
    const fs::path& tokenizer_json, const std::optional<fs::path>& tokenizer_config_json) {
  const std::string file = tokenizer_json.string();
  KV_ASSIGN_OR_RETURN(json j, read_json(tokenizer_json, "tokenizer.json"));
  std::optional<HfTokenizerParts> parts;
  try {
    KV_ASSIGN_OR_RETURN(HfTokenizerParts p, parse_tokenizer_json(j, file));
    parts = std::move(p);
  } catch (const json::exception& e) {
    return invalid_argument("{}: unexpected tokenizer.json structure: {}", file, e.what());
  }
  // Without a config, the BOS is the template's leading special token.
  if (!parts->special_template.prefix.empty()) {
    parts->bos_token_id = parts->special_template.prefix.front();
  }
  if (tokenizer_config_json.has_value()) {
    const std::string config_file = tokenizer_config_json->string();
    KV_ASSIGN_OR_RETURN(json c, read_json(*tokenizer_config_json, "tokenizer_config.json"));
    try {
      KV_RETURN_IF_ERROR(apply_config(c, config_file, *parts));
    } catch (const json::exception& e) {
      return invalid_argument("{}: unexpected tokenizer_config.json structure: {}", config_file,
                              e.what());
    }
  }
  return std::unique_ptr<Tokenizer>(std::make_unique<HfTokenizer>(std::move(*parts)));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_directory(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return make_status(StatusCode::kNotFound, "tokenizer directory not found: {}", dir.string());
  }
  std::optional<fs::path> config = dir / "tokenizer_config.json";
  if (!fs::is_regular_file(*config, ec)) config.reset();
  return from_files(dir / "tokenizer.json", config);
}

}  // namespace kvserve::tokenizer

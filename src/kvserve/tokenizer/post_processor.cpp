#include "kvserve/tokenizer/post_processor.h"

#include <nlohmann/json.hpp>
#include <string>

namespace kvserve::tokenizer {
namespace {

using nlohmann::json;

Status add_template(const json& j, std::string_view file, SpecialTokenTemplate& t) {
  if (j.is_null()) return Status::ok();
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return Status::ok();
  if (type == "Sequence") {
    for (const json& p : j.at("processors"))
      KV_RETURN_IF_ERROR(add_template(p, file, t));
    return Status::ok();
  }
  if (type != "TemplateProcessing") {
    return make_status(StatusCode::kUnimplemented,
                       "{}: post_processor type '{}' is not supported (supported: "
                       "TemplateProcessing, ByteLevel, Sequence)",
                       file, type);
  }
  const json& special_tokens = j.at("special_tokens");
  std::vector<int32_t> prefix, suffix;
  bool seen_sequence = false;
  for (const json& item : j.at("single")) {
    if (item.contains("Sequence")) {
      const std::string id = item.at("Sequence").at("id").get<std::string>();
      if (id != "A" || seen_sequence) {
        return invalid_argument("{}: TemplateProcessing single template must hold $A once", file);
      }
      seen_sequence = true;
    } else if (item.contains("SpecialToken")) {
      const std::string name = item.at("SpecialToken").at("id").get<std::string>();
      if (!special_tokens.contains(name)) {
        return invalid_argument(
            "{}: TemplateProcessing uses special token '{}' missing from its "
            "special_tokens",
            file, name);
      }
      auto& target = seen_sequence ? suffix : prefix;
      for (const json& id : special_tokens.at(name).at("ids")) {
        target.push_back(id.get<int32_t>());
      }
    } else {
      return invalid_argument("{}: unknown TemplateProcessing item {}", file, item.dump());
    }
  }
  if (!seen_sequence) {
    return invalid_argument("{}: TemplateProcessing single template has no $A", file);
  }
  // A later template wraps what the earlier ones produced.
  t.prefix.insert(t.prefix.begin(), prefix.begin(), prefix.end());
  t.suffix.insert(t.suffix.end(), suffix.begin(), suffix.end());
  return Status::ok();
}

}  // namespace

void SpecialTokenTemplate::apply(std::vector<int32_t>& ids) const {
  if (!prefix.empty()) ids.insert(ids.begin(), prefix.begin(), prefix.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
}

Result<SpecialTokenTemplate> make_post_processor_template(const json& j, std::string_view file) {
  SpecialTokenTemplate t;
  KV_RETURN_IF_ERROR(add_template(j, file, t));
  return t;
}

}  // namespace kvserve::tokenizer

#include "kvserve/core/json_fields.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <system_error>

namespace kvserve::core {

using nlohmann::json;

Result<std::string> read_text_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return make_status(StatusCode::kNotFound, "{}: no such file", path.string());
  }
  if (std::filesystem::is_directory(path, ec)) {
    return make_status(StatusCode::kInvalidArgument, "{}: is a directory, expected a file",
                       path.string());
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return make_status(StatusCode::kIoError, "{}: cannot open: {}", path.string(),
                       std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return make_status(StatusCode::kIoError, "{}: read failed", path.string());
  }
  return text.str();
}

Result<json> parse_json(const std::string& text, const std::string& source) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    return invalid_argument("{}: not valid JSON: {}", source, e.what());
  }
}

std::string describe_json_value(const json& value) {
  std::string dumped = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (dumped.size() > 60) dumped = dumped.substr(0, 57) + "...";
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean " + dumped;
    case json::value_t::string:
      return "string " + dumped;
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float:
      return "number " + dumped;
    case json::value_t::array:
      return "array " + dumped;
    case json::value_t::object:
      return "object " + dumped;
    default:
      return dumped;
  }
}

JsonFields::JsonFields(const json& obj, std::string source, std::string prefix)
    : obj_(obj), source_(std::move(source)), prefix_(std::move(prefix)) {
  KV_CHECK(obj_.is_object(), "JsonFields over a non-object (call expect_object first)");
}

Status JsonFields::expect_object(const json& value, const std::string& source,
                                 std::string_view field) {
  if (value.is_object()) return Status::ok();
  if (field.empty()) {
    return invalid_argument("{}: expected a JSON object at the top level, got {}", source,
                            describe_json_value(value));
  }
  return invalid_argument("{}: {}: expected an object, got {}", source, field,
                          describe_json_value(value));
}

const json* JsonFields::find(std::string_view key) const {
  const auto it = obj_.find(key);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(std::string_view key) const {
  return find(key) != nullptr;
}

Status JsonFields::error(StatusCode code, std::string_view key, std::string_view what) const {
  return make_status(code, "{}: {}{}: {}", source_, prefix_, key, what);
}

Status JsonFields::error_about(StatusCode code, std::string_view key, std::string_view what) const {
  return make_status(code, "{}: {}{} {}", source_, prefix_, key, what);
}

Status JsonFields::type_error(std::string_view key, std::string_view expected,
                              const json& got) const {
  return error(StatusCode::kInvalidArgument, key,
               fmt::format("expected {}, got {}", expected, describe_json_value(got)));
}

Result<std::optional<int64_t>> JsonFields::optional_int(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return std::optional<int64_t>();
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return type_error(key, "an integer that fits 64 bits", *v);
    }
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (v->is_number_integer()) return std::optional<int64_t>(v->get<int64_t>());
  return type_error(key, "an integer", *v);
}

Result<int64_t> JsonFields::required_int(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> v, optional_int(key));
  if (!v) return error(StatusCode::kInvalidArgument, key, "missing (an integer is required)");
  return *v;
}

Result<std::optional<double>> JsonFields::optional_number(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (!v->is_number()) return type_error(key, "a number", *v);
  return std::optional<double>(v->get<double>());
}

Result<double> JsonFields::required_number(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const std::optional<double> v, optional_number(key));
  if (!v) return error(StatusCode::kInvalidArgument, key, "missing (a number is required)");
  return *v;
}

Result<std::optional<bool>> JsonFields::optional_bool(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (!v->is_boolean()) return type_error(key, "true or false", *v);
  return std::optional<bool>(v->get<bool>());
}

Result<std::optional<std::string>> JsonFields::optional_string(std::string_view key) const {
  const json* v = find(key);
  if (v == nullptr) return std::optional<std::string>();
  if (!v->is_string()) return type_error(key, "a string", *v);
  return std::optional<std::string>(v->get<std::string>());
}

Result<std::vector<int64_t>> JsonFields::int_or_int_list(std::string_view key) const {
  const json* v = find(key);
  std::vector<int64_t> out;
  if (v == nullptr) return out;
  if (v->is_number_integer()) {
    KV_ASSIGN_OR_RETURN(const std::optional<int64_t> one, optional_int(key));
    out.push_back(*one);
    return out;
  }
  if (!v->is_array()) return type_error(key, "an integer or a list of integers", *v);
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_number_integer() ||
        (e.is_number_unsigned() &&
         e.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      return error(
          StatusCode::kInvalidArgument, key,
          fmt::format("element {}: expected an integer, got {}", i, describe_json_value(e)));
    }
    out.push_back(e.get<int64_t>());
  }
  return out;
}

Result<std::optional<int32_t>> JsonFields::optional_positive_int32(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> v, optional_int(key));
  if (!v) return std::optional<int32_t>();
  if (*v <= 0) {
    return error(StatusCode::kInvalidArgument, key, fmt::format("must be positive, got {}", *v));
  }
  if (*v > std::numeric_limits<int32_t>::max()) {
    return error(StatusCode::kInvalidArgument, key, fmt::format("{} is too large", *v));
  }
  return std::optional<int32_t>(static_cast<int32_t>(*v));
}

Result<int32_t> JsonFields::required_positive_int32(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const std::optional<int32_t> v, optional_positive_int32(key));
  if (!v) {
    return error(StatusCode::kInvalidArgument, key, "missing (a positive integer is required)");
  }
  return *v;
}

namespace {

Result<int32_t> checked_token_id(const JsonFields& f, std::string_view key, int64_t id) {
  if (id < 0 || id > std::numeric_limits<int32_t>::max()) {
    return f.error(StatusCode::kInvalidArgument, key,
                   fmt::format("token id {} is out of range", id));
  }
  return static_cast<int32_t>(id);
}

}  // namespace

Result<std::optional<int32_t>> JsonFields::optional_token_id(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const std::optional<int64_t> v, optional_int(key));
  if (!v) return std::optional<int32_t>();
  KV_ASSIGN_OR_RETURN(const int32_t id, checked_token_id(*this, key, *v));
  return std::optional<int32_t>(id);
}

Result<std::vector<int32_t>> JsonFields::token_id_list(std::string_view key) const {
  KV_ASSIGN_OR_RETURN(const std::vector<int64_t> ids, int_or_int_list(key));
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (const int64_t id : ids) {
    KV_ASSIGN_OR_RETURN(const int32_t checked, checked_token_id(*this, key, id));
    out.push_back(checked);
  }
  return out;
}

}  // namespace kvserve::core

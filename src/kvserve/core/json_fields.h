// Typed, named access to the fields of a JSON object read from a checkpoint file.
//
// Every error names the file and the field: "config.json: hidden_size: expected an integer, got
// string \"896\"". Absent and null fields are the same ("not set") for the optional getters,
// as in Hugging Face's configs. Used by the modules that read JSON files (checkpoint, audio,
// bench).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/status.h"

namespace kvserve::core {

// Reads a whole file; kNotFound when it does not exist, kIoError when it cannot be read.
Result<std::string> read_text_file(const std::filesystem::path& path);

// Parses JSON text; kInvalidArgument naming `source` and the parser's complaint.
Result<nlohmann::json> parse_json(const std::string& text, const std::string& source);

class JsonFields {
 public:
  // `obj` must outlive this view. `prefix` qualifies nested fields ("rope_scaling.").
  JsonFields(const nlohmann::json& obj, std::string source, std::string prefix = "");

  // kInvalidArgument when the value is not a JSON object.
  static Status expect_object(const nlohmann::json& value, const std::string& source,
                              std::string_view field);

  // Present and not null.
  bool has(std::string_view key) const;
  const nlohmann::json* find(std::string_view key) const;
  std::string name(std::string_view key) const { return prefix_ + std::string(key); }
  const std::string& source() const { return source_; }

  // "<source>: <prefix><key>: <what>"
  Status error(StatusCode code, std::string_view key, std::string_view what) const;
  // "<source>: <prefix><key> <what>", for sentences about a value: "num_key_value_heads (3)
  // does not divide num_attention_heads (8)".
  Status error_about(StatusCode code, std::string_view key, std::string_view what) const;

  Result<std::optional<int64_t>> optional_int(std::string_view key) const;
  Result<int64_t> required_int(std::string_view key) const;
  Result<std::optional<double>> optional_number(std::string_view key) const;
  Result<double> required_number(std::string_view key) const;
  Result<std::optional<bool>> optional_bool(std::string_view key) const;
  Result<std::optional<std::string>> optional_string(std::string_view key) const;
  // An integer or a list of integers ("eos_token_id": 2 or [128001, 128009]); empty when unset.
  Result<std::vector<int64_t>> int_or_int_list(std::string_view key) const;

  // Integers that must fit an int32 and be > 0 (sizes, counts).
  Result<int32_t> required_positive_int32(std::string_view key) const;
  Result<std::optional<int32_t>> optional_positive_int32(std::string_view key) const;
  // Token ids: >= 0 and within int32.
  Result<std::optional<int32_t>> optional_token_id(std::string_view key) const;
  Result<std::vector<int32_t>> token_id_list(std::string_view key) const;

 private:
  Status type_error(std::string_view key, std::string_view expected,
                    const nlohmann::json& got) const;

  const nlohmann::json& obj_;
  std::string source_;
  std::string prefix_;
};

// "string \"896\"", "number 1.5", "null", ... for error messages (long values are cut).
std::string describe_json_value(const nlohmann::json& value);

}  // namespace kvserve::core

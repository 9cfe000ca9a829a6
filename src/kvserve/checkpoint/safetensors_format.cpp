#include "kvserve/checkpoint/safetensors_format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <limits>

#include "kvserve/core/json_fields.h"

namespace kvserve::checkpoint {
namespace {

using nlohmann::json;

// The reference's Dtype enum, in its order (F4 and F6 omitted: sub-byte elements).
const std::array<SafetensorsDType, 16> kDTypes = {{
    {"BOOL", 1, std::nullopt, 0},
    {"U8", 1, DType::kU8, 1},
    {"I8", 1, std::nullopt, 2},
    {"F8_E5M2", 1, DType::kFP8E5M2, 3},
    {"F8_E4M3", 1, DType::kFP8E4M3, 4},
    {"F8_E8M0", 1, std::nullopt, 5},
    {"I16", 2, std::nullopt, 6},
    {"U16", 2, std::nullopt, 7},
    {"F16", 2, DType::kF16, 8},
    {"BF16", 2, DType::kBF16, 9},
    {"I32", 4, DType::kI32, 10},
    {"U32", 4, std::nullopt, 11},
    {"F32", 4, DType::kF32, 12},
    {"F64", 8, std::nullopt, 13},
    {"I64", 8, DType::kI64, 14},
    {"U64", 8, std::nullopt, 15},
}};

Status entry_error(const std::string& file, std::string_view tensor, std::string_view what) {
  return invalid_argument("{}: tensor '{}': {}", file, tensor, what);
}

Result<uint64_t> non_negative(const json& v, const std::string& file, std::string_view tensor,
                              std::string_view field) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return entry_error(file, tensor,
                     fmt::format("{}: expected a non-negative integer, got {}", field,
                                 core::describe_json_value(v)));
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& v, uint64_t data_bytes,
                                     const std::string& file) {
  if (!v.is_object()) {
    return entry_error(file, name,
                       fmt::format("expected an object, got {}", core::describe_json_value(v)));
  }
  SafetensorsEntry e;
  e.name = name;
  const auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string())
    return entry_error(file, name, "dtype: missing or not a string");
  e.dtype = find_safetensors_dtype(dt->get<std::string>());
  if (e.dtype == nullptr) {
    return entry_error(file, name,
                       fmt::format("dtype: unknown dtype '{}'", dt->get<std::string>()));
  }
  const auto shape = v.find("shape");
  if (shape == v.end() || !shape->is_array())
    return entry_error(file, name, "shape: missing or not a list");
  for (const json& d : *shape) {
    KV_ASSIGN_OR_RETURN(const uint64_t dim, non_negative(d, file, name, "shape"));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return entry_error(file, name, fmt::format("shape: dimension {} is too large", dim));
    }
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  const auto offsets = v.find("data_offsets");
  if (offsets == v.end() || !offsets->is_array() || offsets->size() != 2) {
    return entry_error(file, name, "data_offsets: missing or not a [begin, end] pair");
  }
  KV_ASSIGN_OR_RETURN(e.begin, non_negative((*offsets)[0], file, name, "data_offsets"));
  KV_ASSIGN_OR_RETURN(e.end, non_negative((*offsets)[1], file, name, "data_offsets"));
  if (e.begin > e.end) {
    return entry_error(file, name,
                       fmt::format("data_offsets [{}, {}]: begin is after end", e.begin, e.end));
  }
  if (e.end > data_bytes) {
    return entry_error(file, name,
                       fmt::format("data_offsets [{}, {}] run past the end of the data ({} bytes; "
                                   "the file is truncated or corrupt)",
                                   e.begin, e.end, data_bytes));
  }
  const std::optional<uint64_t> numel = shape_numel(e.shape);
  if (!numel || *numel > std::numeric_limits<uint64_t>::max() / e.dtype->size) {
    return entry_error(file, name, "shape: the element count overflows");
  }
  if (*numel * e.dtype->size != e.end - e.begin) {
    return entry_error(
        file, name,
        fmt::format("shape {} of {} needs {} bytes but data_offsets [{}, {}] hold {}",
                    json(e.shape).dump(), e.dtype->name, *numel * e.dtype->size, e.begin, e.end,
                    e.end - e.begin));
  }
  return e;
}

}  // namespace

const SafetensorsDType* find_safetensors_dtype(std::string_view name) {
  for (const SafetensorsDType& d : kDTypes) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const SafetensorsDType& safetensors_dtype(DType t) {
  for (const SafetensorsDType& d : kDTypes) {
    if (d.dtype == t) return d;
  }
  KV_CHECK(false, "dtype {} has no safetensors name", dtype_name(t));
}

std::string_view safetensors_dtype_name(DType t) {
  return safetensors_dtype(t).name;
}

std::optional<uint64_t> shape_numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (const int64_t d : shape) {
    if (d < 0) return std::nullopt;
    const auto ud = static_cast<uint64_t>(d);
    if (ud != 0 && n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ud) {
      return std::nullopt;
    }
    n *= ud;
  }
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::string_view header_json,
                                                   uint64_t data_bytes, const std::string& file) {
  json root;
  try {
    root = json::parse(header_json);
  } catch (const json::parse_error& e) {
    return invalid_argument("{}: the safetensors header is not valid JSON: {}", file, e.what());
  }
  if (!root.is_object()) {
    return invalid_argument("{}: the safetensors header is not a JSON object", file);
  }
  SafetensorsHeader h;
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return invalid_argument("{}: __metadata__ is not an object", file);
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return invalid_argument("{}: __metadata__.{}: expected a string, got {}", file, m.key(),
                                  core::describe_json_value(*m));
        }
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    KV_ASSIGN_OR_RETURN(SafetensorsEntry e, parse_entry(it.key(), *it, data_bytes, file));
    h.tensors.push_back(std::move(e));
  }
  std::sort(h.tensors.begin(), h.tensors.end(),
            [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  const SafetensorsEntry* last = nullptr;  // the non-empty tensor that ends last so far
  for (const SafetensorsEntry& e : h.tensors) {
    if (e.begin == e.end) continue;  // empty tensors occupy nothing
    if (last != nullptr && e.begin < last->end) {
      return invalid_argument("{}: tensors '{}' [{}, {}] and '{}' [{}, {}] overlap", file,
                              last->name, last->begin, last->end, e.name, e.begin, e.end);
    }
    last = &e;
  }
  return h;
}

uint64_t TensorSpec::bytes() const {
  const std::optional<uint64_t> n = shape_numel(shape);
  KV_CHECK(n.has_value(), "tensor {}: bad shape", name);
  return *n * dtype_size(dtype);
}

std::vector<TensorSpec> safetensors_write_order(std::vector<TensorSpec> specs) {
  std::sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    const int ra = safetensors_dtype(a.dtype).rank;
    const int rb = safetensors_dtype(b.dtype).rank;
    return ra != rb ? ra > rb : a.name < b.name;
  });
  return specs;
}

std::string serialize_safetensors_header(const std::vector<TensorSpec>& ordered,
                                         const std::map<std::string, std::string>& metadata) {
  std::string out = "{";
  bool first = true;
  if (!metadata.empty()) {
    out += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (!first) out += ',';
      first = false;
      out += json(key).dump() + ':' + json(value).dump();
    }
    out += '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const TensorSpec& t : ordered) {
    if (!first) out += ',';
    first = false;
    const uint64_t end = offset + t.bytes();
    out += fmt::format("{}:{{\"dtype\":\"{}\",\"shape\":{},\"data_offsets\":[{},{}]}}",
                       json(t.name).dump(), safetensors_dtype_name(t.dtype), json(t.shape).dump(),
                       offset, end);
    offset = end;
  }
  out += '}';
  out.append((8 - out.size() % 8) % 8, ' ');
  return out;
}

}  // namespace kvserve::checkpoint

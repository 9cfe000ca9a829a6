#include "kvserve/checkpoint/safetensors_file.h"

#include <cstring>

namespace kvserve::checkpoint {

Result<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::filesystem::path& path) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<MappedFile> map, MappedFile::open(path));
  const std::string name = path.string();
  const size_t size = map->size();
  if (size < 8) {
    return invalid_argument(
        "{}: truncated safetensors file: {} bytes, too short for the 8-byte header length", name,
        size);
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | map->data()[i];  // little-endian
  if (header_len > size - 8) {
    return invalid_argument(
        "{}: truncated or not a safetensors file: the header length {} runs past the end of the "
        "file ({} bytes)",
        name, header_len, size);
  }
  if (header_len > kMaxSafetensorsHeaderBytes) {
    return invalid_argument("{}: the safetensors header length {} exceeds the limit of {} bytes",
                            name, header_len, kMaxSafetensorsHeaderBytes);
  }
  const std::string_view header_text(reinterpret_cast<const char*>(map->data() + 8), header_len);
  const uint64_t data_bytes = size - 8 - header_len;
  KV_ASSIGN_OR_RETURN(SafetensorsHeader header,
                      parse_safetensors_header(header_text, data_bytes, name));

  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->data_ = map->data() + 8 + header_len;
  f->map_ = std::move(map);
  f->path_ = name;
  f->header_ = std::move(header);
  for (size_t i = 0; i < f->header_.tensors.size(); ++i) {
    f->index_.emplace(f->header_.tensors[i].name, i);
  }
  return f;
}

const SafetensorsEntry* SafetensorsFile::find(std::string_view name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

Result<WeightView> SafetensorsFile::view(const SafetensorsEntry& entry) const {
  if (!entry.dtype->dtype) {
    return make_status(StatusCode::kUnimplemented,
                       "{}: tensor '{}' has dtype {}, which kvserve cannot load", path_, entry.name,
                       entry.dtype->name);
  }
  WeightView v;
  v.name = entry.name;
  v.dtype = *entry.dtype->dtype;
  v.shape = entry.shape;
  v.data = data_ + entry.begin;
  v.bytes = entry.end - entry.begin;
  v.file = path_;
  return v;
}

uint64_t SafetensorsFile::data_bytes() const {
  uint64_t total = 0;
  for (const SafetensorsEntry& e : header_.tensors)
    total += e.end - e.begin;
  return total;
}

}  // namespace kvserve::checkpoint

#include "kvserve/checkpoint/safetensors_writer.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <set>
#include <vector>

#include "kvserve/checkpoint/weights.h"

namespace kvserve::checkpoint {
namespace {

bool valid_utf8(const std::string& s) {
  try {
    (void)nlohmann::json(s).dump();
    return true;
  } catch (const nlohmann::json::type_error&) {
    return false;
  }
}

Status check_specs(const std::vector<TensorSpec>& specs,
                   const std::map<std::string, std::string>& metadata) {
  std::set<std::string_view> seen;
  for (const TensorSpec& t : specs) {
    if (t.name.empty() || t.name == "__metadata__" || !valid_utf8(t.name)) {
      return invalid_argument("safetensors: '{}' is not a usable tensor name", t.name);
    }
    if (!seen.insert(t.name).second) {
      return invalid_argument("safetensors: tensor '{}' appears twice", t.name);
    }
    if (!shape_numel(t.shape)) {
      return invalid_argument("safetensors: tensor '{}' has a negative or overflowing shape",
                              t.name);
    }
  }
  for (const auto& [key, value] : metadata) {
    if (!valid_utf8(key) || !valid_utf8(value)) {
      return invalid_argument("safetensors: __metadata__ entry '{}' is not valid UTF-8", key);
    }
  }
  return Status::ok();
}

class FileSink final : public ByteSink {
 public:
  FileSink(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  Status write(const void* data, size_t bytes) override {
    if (bytes == 0) return Status::ok();
    if (std::fwrite(data, 1, bytes, f_) != bytes) {
      return make_status(StatusCode::kIoError, "{}: write failed: {}", path_, std::strerror(errno));
    }
    written_ += bytes;
    return Status::ok();
  }
  uint64_t written() const { return written_; }

 private:
  std::FILE* f_;
  std::string path_;
  uint64_t written_ = 0;
};

Status write_all(const std::filesystem::path& file, const std::vector<TensorSpec>& ordered,
                 const std::string& header, const TensorFill& fill) {
  const std::string path = file.string();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return make_status(StatusCode::kIoError, "{}: cannot create: {}", path, std::strerror(errno));
  }
  std::vector<char> buffer(4 << 20);
  std::setvbuf(f, buffer.data(), _IOFBF, buffer.size());
  FileSink sink(f, path);
  Status s;
  uint8_t len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = static_cast<uint8_t>(header.size() >> (8 * i));
  s = sink.write(len, sizeof(len));
  if (s.is_ok()) s = sink.write(header.data(), header.size());
  for (size_t i = 0; s.is_ok() && i < ordered.size(); ++i) {
    const uint64_t before = sink.written();
    s = fill(ordered[i], sink);
    if (s.is_ok()) {
      KV_CHECK_EQ(sink.written() - before, ordered[i].bytes(),
                  "the filler of tensor {} wrote the "
                  "wrong number of bytes",
                  ordered[i].name);
    }
  }
  if (std::fclose(f) != 0 && s.is_ok()) {
    s = make_status(StatusCode::kIoError, "{}: write failed: {}", path, std::strerror(errno));
  }
  return s;
}

}  // namespace

Status write_safetensors_streaming(const std::filesystem::path& file, std::vector<TensorSpec> specs,
                                   const std::map<std::string, std::string>& metadata,
                                   const TensorFill& fill) {
  KV_RETURN_IF_ERROR(check_specs(specs, metadata));
  const std::vector<TensorSpec> ordered = safetensors_write_order(std::move(specs));
  const std::string header = serialize_safetensors_header(ordered, metadata);
  const Status s = write_all(file, ordered, header, fill);
  if (!s.is_ok()) {
    std::error_code ec;
    std::filesystem::remove(file, ec);
  }
  return s;
}

Status write_safetensors(const std::filesystem::path& file, std::span<const TensorToWrite> tensors,
                         const std::map<std::string, std::string>& metadata) {
  std::vector<TensorSpec> specs;
  std::map<std::string, std::span<const uint8_t>> data;
  for (const TensorToWrite& t : tensors) {
    specs.push_back({t.name, t.dtype, t.shape});
    const std::optional<uint64_t> numel = shape_numel(t.shape);
    if (numel && *numel * dtype_size(t.dtype) != t.data.size()) {
      return invalid_argument("safetensors: tensor '{}': shape needs {} bytes of {} but {} given",
                              t.name, *numel * dtype_size(t.dtype), dtype_name(t.dtype),
                              t.data.size());
    }
    data[t.name] = t.data;
  }
  return write_safetensors_streaming(file, std::move(specs), metadata,
                                     [&](const TensorSpec& spec, ByteSink& out) {
                                       const std::span<const uint8_t> bytes = data.at(spec.name);
                                       return out.write(bytes.data(), bytes.size());
                                     });
}

}  // namespace kvserve::checkpoint

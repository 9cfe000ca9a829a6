// WeightStore over one safetensors file or a sharded checkpoint (model.safetensors.index.json).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>

#include "kvserve/checkpoint/safetensors_file.h"
#include "kvserve/checkpoint/weights.h"
#include "kvserve/core/json_fields.h"

namespace kvserve::checkpoint {
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

Status not_in_checkpoint(std::string_view name, const std::string& where) {
  return make_status(StatusCode::kNotFound, "tensor '{}' is not in checkpoint {}", name, where);
}

class SingleFileStore final : public WeightStore {
 public:
  explicit SingleFileStore(std::unique_ptr<SafetensorsFile> file) : file_(std::move(file)) {}

  bool contains(std::string_view name) const override { return file_->find(name) != nullptr; }
  Result<WeightView> get(std::string_view name) const override {
    const SafetensorsEntry* e = file_->find(name);
    if (e == nullptr) return not_in_checkpoint(name, file_->path());
    return file_->view(*e);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const SafetensorsEntry& e : file_->header().tensors)
      out.push_back(e.name);
    std::sort(out.begin(), out.end());
    return out;
  }
  size_t total_bytes() const override { return file_->data_bytes(); }

 private:
  std::unique_ptr<SafetensorsFile> file_;
};

class ShardedStore final : public WeightStore {
 public:
  struct Location {
    const SafetensorsFile* shard;
    const SafetensorsEntry* entry;
  };

  ShardedStore(std::string index_path, std::vector<std::unique_ptr<SafetensorsFile>> shards,
               std::map<std::string, Location, std::less<>> tensors)
      : index_path_(std::move(index_path)),
        shards_(std::move(shards)),
        tensors_(std::move(tensors)) {}

  bool contains(std::string_view name) const override { return tensors_.contains(name); }
  Result<WeightView> get(std::string_view name) const override {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) return not_in_checkpoint(name, index_path_);
    return it->second.shard->view(*it->second.entry);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& [name, loc] : tensors_)
      out.push_back(name);
    return out;
  }
  size_t total_bytes() const override {
    size_t total = 0;
    for (const auto& [name, loc] : tensors_)
      total += loc.entry->end - loc.entry->begin;
    return total;
  }

 private:
  std::string index_path_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Location, std::less<>> tensors_;
};

// A shard name from an index: a plain relative path that stays inside the checkpoint directory.
bool safe_shard_name(const std::string& shard) {
  const std::filesystem::path p(shard);
  if (shard.empty() || p.is_absolute()) return false;
  for (const auto& part : p) {
    if (part == "..") return false;
  }
  return true;
}

Result<std::unique_ptr<WeightStore>> open_sharded(const std::filesystem::path& dir) {
  const std::filesystem::path index_path = dir / kIndexFile;
  const std::string source = index_path.string();
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(index_path));
  KV_ASSIGN_OR_RETURN(const nlohmann::json root, core::parse_json(text, source));
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(root, source, ""));
  const core::JsonFields f(root, source);
  const nlohmann::json* weight_map = f.find("weight_map");
  if (weight_map == nullptr) {
    return f.error(StatusCode::kInvalidArgument, "weight_map", "missing");
  }
  KV_RETURN_IF_ERROR(core::JsonFields::expect_object(*weight_map, source, "weight_map"));

  std::map<std::string, std::string> wanted;  // tensor -> shard
  std::set<std::string> shard_names;
  for (auto it = weight_map->begin(); it != weight_map->end(); ++it) {
    if (!it->is_string() || !safe_shard_name(it->get<std::string>())) {
      return f.error(StatusCode::kInvalidArgument, "weight_map." + it.key(),
                     fmt::format("expected a shard file name in the checkpoint directory, got {}",
                                 core::describe_json_value(*it)));
    }
    wanted[it.key()] = it->get<std::string>();
    shard_names.insert(it->get<std::string>());
  }

  std::vector<std::unique_ptr<SafetensorsFile>> shards;
  std::map<std::string, const SafetensorsFile*> by_name;
  for (const std::string& shard : shard_names) {
    auto opened = SafetensorsFile::open(dir / shard);
    if (!opened.is_ok()) {
      if (opened.status().code() == StatusCode::kNotFound) {
        return make_status(StatusCode::kNotFound,
                           "{}: shard '{}' named in weight_map is missing: {}", source, shard,
                           opened.status().message());
      }
      return opened.status();
    }
    by_name[shard] = opened.value().get();
    shards.push_back(std::move(opened).value());
  }

  std::map<std::string, ShardedStore::Location, std::less<>> tensors;
  for (const auto& [tensor, shard] : wanted) {
    const SafetensorsFile* file = by_name.at(shard);
    const SafetensorsEntry* entry = file->find(tensor);
    if (entry == nullptr) {
      return invalid_argument("{}: weight_map puts tensor '{}' in '{}', which does not contain it",
                              source, tensor, shard);
    }
    tensors.emplace(tensor, ShardedStore::Location{file, entry});
  }
  return std::unique_ptr<WeightStore>(
      new ShardedStore(source, std::move(shards), std::move(tensors)));
}

}  // namespace

int64_t WeightView::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape)
    n *= d;
  return n;
}

Result<std::unique_ptr<WeightStore>> WeightStore::open_file(const std::filesystem::path& file) {
  KV_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> f, SafetensorsFile::open(file));
  return std::unique_ptr<WeightStore>(new SingleFileStore(std::move(f)));
}

Result<std::unique_ptr<WeightStore>> WeightStore::open(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return make_status(StatusCode::kNotFound, "{}: no such checkpoint directory", dir.string());
  }
  if (std::filesystem::exists(dir / kSingleFile, ec)) return open_file(dir / kSingleFile);
  if (std::filesystem::exists(dir / kIndexFile, ec)) return open_sharded(dir);
  return make_status(StatusCode::kNotFound, "{}: no {} or {} in the checkpoint directory",
                     dir.string(), kSingleFile, kIndexFile);
}

}  // namespace kvserve::checkpoint

#include "kvserve/makemodel/make_model.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <thread>
#include <unordered_map>

#include "kvserve/checkpoint/safetensors_writer.h"
#include "kvserve/makemodel/checkpoint_layout.h"
#include "kvserve/makemodel/presets.h"
#include "kvserve/makemodel/random_weights.h"
#include "kvserve/makemodel/synthetic_tokenizer.h"
#include "kvserve/makemodel/whisper_checkpoint_layout.h"
#include "kvserve/makemodel/whisper_presets.h"
#include "kvserve/makemodel/whisper_tokenizer.h"

namespace kvserve::makemodel {
namespace {

namespace fs = std::filesystem;

constexpr float kInitStd = 0.02f;    // initializer_range
constexpr size_t kChunk = 4u << 20;  // elements generated per step

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v)
    out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string human_bytes(uint64_t b) {
  if (b >= 1'000'000'000) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1'000'000) return fmt::format("{:.1f} MB", b / 1e6);
  return fmt::format("{:.1f} KB", b / 1e3);
}

// The output directory: created, or empty, or --force. With --force, stale checkpoint files
// of an earlier run (other shard counts) are removed; nothing else is touched.
Status prepare_output(const fs::path& dir, bool force) {
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    if (!fs::is_directory(dir, ec)) {
      return invalid_argument("--output {}: exists and is not a directory", dir.string());
    }
    if (!fs::is_empty(dir, ec)) {
      if (!force) {
        return invalid_argument("--output {}: directory is not empty (use --force to overwrite)",
                                dir.string());
      }
      for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string name = e.path().filename().string();
        if (name == "model.safetensors.index.json" ||
            (name.starts_with("model") && name.ends_with(".safetensors"))) {
          fs::remove(e.path(), ec);
        }
      }
    }
    return Status::ok();
  }
  fs::create_directories(dir, ec);
  if (ec) {
    return make_status(StatusCode::kIoError, "--output {}: cannot create the directory: {}",
                       dir.string(), ec.message());
  }
  return Status::ok();
}

Status write_text(const fs::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  out.close();
  if (!out) return make_status(StatusCode::kIoError, "{}: write failed", file.string());
  return Status::ok();
}

class WeightFiller {
 public:
  WeightFiller(uint64_t seed, int threads, const std::vector<CheckpointTensor>& tensors)
      : seed_(seed), threads_(threads) {
    for (const CheckpointTensor& t : tensors)
      init_[t.spec.name] = t.init;
  }

  Status operator()(const checkpoint::TensorSpec& spec, checkpoint::ByteSink& out) {
    const uint64_t numel = *checkpoint::shape_numel(spec.shape);
    const size_t elem = dtype_size(spec.dtype);
    const uint64_t key = tensor_key(seed_, spec.name);
    const auto it = init_.find(spec.name);
    const TensorInit init = it == init_.end() ? TensorInit::kNormal : it->second;
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(numel, kChunk));
    scratch_.resize(chunk);
    bytes_.resize(chunk * elem);
    for (uint64_t first = 0; first < numel; first += chunk) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(chunk, numel - first));
      if (init == TensorInit::kOnes || init == TensorInit::kZeros) {
        std::fill_n(scratch_.data(), n, init == TensorInit::kOnes ? 1.0f : 0.0f);
        convert_elements(scratch_.data(), DType::kF32, bytes_.data(), spec.dtype, n);
      } else if (init == TensorInit::kSinusoidal) {
        const int64_t channels = spec.shape.back();
        for (size_t j = 0; j < n; ++j) {
          const auto e = static_cast<int64_t>(first + j);
          scratch_[j] = whisper_sinusoid(e / channels, e % channels, channels);
        }
        convert_elements(scratch_.data(), DType::kF32, bytes_.data(), spec.dtype, n);
      } else {
        generate_normal(key, first, n, kInitStd, spec.dtype, threads_, scratch_.data(),
                        bytes_.data());
      }
      KV_RETURN_IF_ERROR(out.write(bytes_.data(), n * elem));
    }
    return Status::ok();
  }

 private:
  uint64_t seed_;
  int threads_;
  std::unordered_map<std::string, TensorInit> init_;
  std::vector<float> scratch_;
  std::vector<uint8_t> bytes_;
};

}  // namespace

Result<uint64_t> parse_shard_size(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  std::string unit(text.substr(digits));
  std::transform(unit.begin(), unit.end(), unit.begin(),
                 [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
  uint64_t scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KB") scale = 1'000;
  if (unit == "MB") scale = 1'000'000;
  if (unit == "GB") scale = 1'000'000'000;
  if (unit == "KIB") scale = uint64_t{1} << 10;
  if (unit == "MIB") scale = uint64_t{1} << 20;
  if (unit == "GIB") scale = uint64_t{1} << 30;
  if (digits == 0 || digits > 12 || scale == 0) {
    return invalid_argument("--max-shard-size: '{}' is not a size like 5GB, 500MB or 1000000",
                            text);
  }
  const uint64_t value = std::stoull(std::string(text.substr(0, digits))) * scale;
  if (value == 0) return invalid_argument("--max-shard-size: must be positive");
  return value;
}

Result<MakeModelReport> make_model(const MakeModelOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const Preset* preset = find_preset(opt.preset);
  if (preset == nullptr) {
    return invalid_argument("--preset: unknown preset '{}' (valid: {})", opt.preset,
                            join(preset_names()));
  }
  if (opt.dtype != DType::kBF16 && opt.dtype != DType::kF16 && opt.dtype != DType::kF32) {
    return invalid_argument("--dtype: {} is not a checkpoint dtype (bf16, f16, f32)",
                            dtype_name(opt.dtype));
  }
  if (opt.output.empty()) return invalid_argument("--output: no directory given");
  if (opt.max_shard_bytes == 0) return invalid_argument("--max-shard-size: must be positive");

  const bool whisper = preset->family == ModelFamily::kWhisper;
  const std::vector<CheckpointTensor> tensors =
      whisper ? whisper_checkpoint_tensors(preset->whisper, opt.dtype)
              : checkpoint_tensors(preset->config, opt.dtype);
  const std::vector<Shard> shards = plan_shards(tensors, opt.max_shard_bytes);
  MakeModelReport report;
  for (const CheckpointTensor& t : tensors) {
    report.parameters += static_cast<int64_t>(*checkpoint::shape_numel(t.spec.shape));
    report.weight_bytes += t.spec.bytes();
  }
  report.tensors = static_cast<int64_t>(tensors.size());
  report.shards = static_cast<int>(shards.size());

  // Checked before anything is created, on the nearest directory that exists.
  std::error_code ec;
  fs::path probe = fs::absolute(opt.output, ec);
  while (!probe.empty() && !fs::exists(probe, ec) && probe != probe.parent_path()) {
    probe = probe.parent_path();
  }
  const fs::space_info space = fs::space(probe, ec);
  const uint64_t needed = report.weight_bytes + (16u << 20);  // + headers and tokenizer files
  if (!ec && space.available < needed) {
    return make_status(StatusCode::kIoError,
                       "--output {}: not enough disk space: the {} checkpoint needs {}, {} is "
                       "available",
                       opt.output.string(), preset->name, human_bytes(needed),
                       human_bytes(space.available));
  }
  KV_RETURN_IF_ERROR(prepare_output(opt.output, opt.force));

  const auto text_file = [&](const std::string& name, const std::string& text) -> Status {
    KV_RETURN_IF_ERROR(write_text(opt.output / name, text));
    report.files.push_back(opt.output / name);
    if (opt.progress) opt.progress(fmt::format("wrote {}", (opt.output / name).string()));
    return Status::ok();
  };
  if (whisper) {
    const checkpoint::WhisperConfig& c = preset->whisper;
    KV_RETURN_IF_ERROR(text_file("config.json", whisper_config_json_text(c, opt.dtype)));
    KV_RETURN_IF_ERROR(text_file("generation_config.json", whisper_generation_config_json_text(c)));
    KV_RETURN_IF_ERROR(
        text_file("preprocessor_config.json", whisper_preprocessor_config_json_text(c)));
    KV_RETURN_IF_ERROR(text_file("tokenizer.json", whisper_tokenizer_json_text()));
    KV_RETURN_IF_ERROR(text_file("tokenizer_config.json", whisper_tokenizer_config_json_text()));
  } else {
    KV_RETURN_IF_ERROR(text_file("config.json", config_json_text(*preset, opt.dtype)));
    KV_RETURN_IF_ERROR(text_file("generation_config.json", generation_config_json_text(*preset)));
    KV_RETURN_IF_ERROR(text_file("tokenizer.json", tokenizer_json_text(preset->tokenizer)));
    KV_RETURN_IF_ERROR(
        text_file("tokenizer_config.json",
                  tokenizer_config_json_text(preset->tokenizer, preset->model_max_length)));
  }

  const int threads = opt.threads > 0
                          ? opt.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  WeightFiller filler(opt.seed, threads, tensors);
  for (const Shard& shard : shards) {
    std::vector<checkpoint::TensorSpec> specs;
    for (const CheckpointTensor& t : shard.tensors)
      specs.push_back(t.spec);
    const fs::path file = opt.output / shard.file;
    const auto s0 = std::chrono::steady_clock::now();
    KV_RETURN_IF_ERROR(checkpoint::write_safetensors_streaming(
        file, std::move(specs), {{"format", "pt"}},
        [&filler](const checkpoint::TensorSpec& spec, checkpoint::ByteSink& out) {
          return filler(spec, out);
        }));
    report.files.push_back(file);
    if (opt.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - s0).count();
      opt.progress(fmt::format("wrote {} ({}, {} tensors, {:.1f} s)", file.string(),
                               human_bytes(shard.bytes), shard.tensors.size(), s));
    }
  }
  if (shards.size() > 1) {
    KV_RETURN_IF_ERROR(text_file("model.safetensors.index.json", shard_index_json_text(shards)));
  }
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace kvserve::makemodel

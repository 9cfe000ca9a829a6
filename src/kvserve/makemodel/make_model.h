// kvserve make-model: a random-weight checkpoint in the standard Hugging Face layout
// (config.json, model.safetensors or shards + index, tokenizer.json, tokenizer_config.json,
// generation_config.json; + preprocessor_config.json for Whisper) from a preset (presets.h).
// Weights are normal(0, 0.02) (norm weights 1.0, Whisper's encoder positions sinusoidal), a pure
// function of (seed, tensor name, element index), streamed to disk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve::makemodel {

struct MakeModelOptions {
  std::string preset;
  std::filesystem::path output;
  uint64_t seed = 0;
  DType dtype = DType::kBF16;                      // bf16, f16 or f32
  bool force = false;                              // write into a non-empty directory
  uint64_t max_shard_bytes = 5'000'000'000;        // save_pretrained's default "5GB"
  int threads = 0;                                 // 0: one per hardware thread
  std::function<void(std::string_view)> progress;  // optional: one line per file written
};

struct MakeModelReport {
  std::vector<std::filesystem::path> files;
  int64_t tensors = 0;
  int64_t parameters = 0;
  uint64_t weight_bytes = 0;
  int shards = 0;
  double seconds = 0.0;
};

// kInvalidArgument for an unknown preset (listing the valid ones), a dtype other than
// bf16/f16/f32, an output that is a file or a non-empty directory without `force`;
// kIoError when the disk is too small or a write fails.
Result<MakeModelReport> make_model(const MakeModelOptions& options);

// Parses "5GB", "500MB", "100KB", "1GiB" or a plain byte count as save_pretrained does (GB =
// 10^9, GiB = 2^30).
Result<uint64_t> parse_shard_size(std::string_view text);

}  // namespace kvserve::makemodel

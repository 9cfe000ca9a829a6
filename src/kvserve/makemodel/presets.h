// make-model presets: a tiny model for tests and random-weight models with the exact shapes of
// real checkpoints (config values as in their Hugging Face config.json). A preset belongs to a
// model family: decoder-only causal LMs (ModelConfig + the synthetic tokenizer) or Whisper
// (WhisperConfig + the Whisper tokenizer, whisper_presets.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/makemodel/synthetic_tokenizer.h"

namespace kvserve::makemodel {

enum class ModelFamily { kCausalLM, kWhisper };

struct Preset {
  std::string name;
  std::string description;
  ModelFamily family = ModelFamily::kCausalLM;
  checkpoint::WhisperConfig whisper;  // kWhisper only; `config` and `tokenizer` are unused then
  // Token ids (bos/eos) refer to the synthetic tokenizer; vocab_size is the real model's (the
  // embedding rows past the tokenizer's size are never produced) or, for tiny, the tokenizer's.
  checkpoint::ModelConfig config;
  SyntheticTokenizer tokenizer;
  int64_t model_max_length = 0;   // tokenizer_config.json
  bool write_head_dim = false;    // config.json carries "head_dim" (as Llama-3.2's does)
  int32_t max_window_layers = 0;  // Qwen2's and Qwen3's config.json field
};

// "tiny, qwen2.5-0.5b-shape, llama-3.2-1b-shape, llama-3.1-8b-shape, llama-3.1-70b-shape,
// qwen3-8b-shape, gemma-2-9b-shape, gemma-3-12b-shape, whisper-tiny-shape,
// whisper-large-v2-shape, whisper-test"
std::vector<std::string> preset_names();
// nullptr for an unknown name.
const Preset* find_preset(std::string_view name);

// config.json for a preset whose weights are stored in `dtype`, keys sorted as transformers
// writes them.
std::string config_json_text(const Preset& preset, DType dtype);
// generation_config.json for a preset.
std::string generation_config_json_text(const Preset& preset);

// "bfloat16", "float16" or "float32".
std::string_view torch_dtype_name(DType t);

}  // namespace kvserve::makemodel

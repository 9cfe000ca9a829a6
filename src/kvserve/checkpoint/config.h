// Hugging Face model configuration: config.json and generation_config.json of a checkpoint
// directory, for LlamaForCausalLM, Qwen2ForCausalLM and MistralForCausalLM.
//
// Errors name the file and the field ("config.json: num_key_value_heads (3) does not divide
// num_attention_heads (8)") and are Status values (kInvalidArgument / kNotFound /
// kUnimplemented for an unknown architecture).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/core/dtype.h"
#include "kvserve/core/status.h"

namespace kvserve::checkpoint {

enum class Architecture { kLlama, kQwen2, kMistral };

// config.json "rope_scaling"; rope_type "default" means none. Only "llama3" is applied beyond
// the default (the llama3 type's frequency-dependent scaling of inv_freq).
struct RopeScaling {
  std::string rope_type = "default";
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as written in "architectures", e.g. "LlamaForCausalLM"
  std::string model_type;         // "llama", "qwen2", "mistral"
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t intermediate_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 0;  // defaults to num_attention_heads when absent
  int32_t head_dim = 0;             // defaults to hidden_size / num_attention_heads when absent
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2 always; Llama if set)
  std::string hidden_act = "silu";
  DType torch_dtype = DType::kBF16;       // the checkpoint's declared dtype
  std::optional<int32_t> sliding_window;  // Mistral; kvserve attends globally and warns
  std::optional<int32_t> bos_token_id;
  std::vector<int32_t> eos_token_ids;  // "eos_token_id" may be an int or a list
};

// Reads and validates <dir>/config.json.
Result<ModelConfig> load_model_config(const std::filesystem::path& dir);
// Parses a config.json text (`source` names it in errors).
Result<ModelConfig> parse_model_config(const std::string& json_text, const std::string& source);

// generation_config.json; a missing file gives the defaults below (SGLang's defaults).
struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  bool do_sample = false;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int32_t> top_k;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<int32_t> max_new_tokens;
};

Result<GenerationConfig> load_generation_config(const std::filesystem::path& dir);

}  // namespace kvserve::checkpoint

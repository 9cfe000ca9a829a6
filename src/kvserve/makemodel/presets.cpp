#include "kvserve/makemodel/presets.h"

#include <nlohmann/json.hpp>

#include <cmath>

#include "kvserve/core/check.h"
#include "kvserve/makemodel/whisper_presets.h"

namespace kvserve::makemodel {
namespace {

using nlohmann::json;

checkpoint::RopeScaling llama3_rope(double factor) {
  checkpoint::RopeScaling r;
  r.rope_type = "llama3";
  r.factor = factor;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 8192;
  return r;
}

void set_special_ids(Preset* p) {
  const SyntheticTokenizer& t = p->tokenizer;
  if (t.style == TokenizerStyle::kQwen2) {
    p->config.bos_token_id = t.special_id("<|endoftext|>");  // as Qwen2.5's config.json
    p->config.eos_token_ids = {t.special_id("<|im_end|>")};
  } else {
    p->config.bos_token_id = t.special_id("<|begin_of_text|>");
    p->config.eos_token_ids = t.generation_eos_ids();
  }
}

Preset tiny() {
  Preset p;
  p.name = "tiny";
  p.description = "Llama, 2 layers, hidden 64, for tests (under 1 MB)";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kQwen2);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kLlama;
  c.architecture_name = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = p.tokenizer.vocab_size();
  c.hidden_size = 64;
  c.intermediate_size = 176;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 2048;
  c.rope_theta = 10000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = false;
  c.attention_bias = false;
  p.model_max_length = 2048;
  p.write_head_dim = true;
  set_special_ids(&p);
  return p;
}

Preset qwen25_05b() {
  Preset p;
  p.name = "qwen2.5-0.5b-shape";
  p.description = "Qwen2.5-0.5B's shapes: 24 layers, hidden 896, 14/2 heads, tied, q/k/v bias";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kQwen2);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kQwen2;
  c.architecture_name = "Qwen2ForCausalLM";
  c.model_type = "qwen2";
  c.vocab_size = 151936;
  c.hidden_size = 896;
  c.intermediate_size = 4864;
  c.num_hidden_layers = 24;
  c.num_attention_heads = 14;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.max_position_embeddings = 32768;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.attention_bias = true;
  p.model_max_length = 131072;
  p.max_window_layers = 24;
  set_special_ids(&p);
  return p;
}

Preset llama32_1b() {
  Preset p;
  p.name = "llama-3.2-1b-shape";
  p.description = "Llama-3.2-1B's shapes: 16 layers, hidden 2048, 32/8 heads, tied, llama3 rope";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kLlama3);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kLlama;
  c.architecture_name = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = 2048;
  c.intermediate_size = 8192;
  c.num_hidden_layers = 16;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 64;
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0;
  c.rope_scaling = llama3_rope(32.0);
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = true;
  p.model_max_length = 131072;
  p.write_head_dim = true;
  set_special_ids(&p);
  return p;
}

Preset llama31_8b() {
  Preset p;
  p.name = "llama-3.1-8b-shape";
  p.description = "Llama-3.1-8B's shapes: 32 layers, hidden 4096, 32/8 heads, llama3 rope";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kLlama3);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kLlama;
  c.architecture_name = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 128256;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 32;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 131072;
  c.rope_theta = 500000.0;
  c.rope_scaling = llama3_rope(8.0);
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = false;
  p.model_max_length = 131072;
  set_special_ids(&p);
  return p;
}

// meta-llama/Llama-3.1-70B's config.json: the tensor-parallel shape (140 GB of bf16 weights do
// not fit one 141 GB GPU beside a KV cache).
Preset llama31_70b() {
  Preset p = llama31_8b();
  p.name = "llama-3.1-70b-shape";
  p.description = "Llama-3.1-70B's shapes: 80 layers, hidden 8192, 64/8 heads, llama3 rope";
  checkpoint::ModelConfig& c = p.config;
  c.hidden_size = 8192;
  c.intermediate_size = 28672;
  c.num_hidden_layers = 80;
  c.num_attention_heads = 64;
  return p;
}

// Qwen/Qwen3-8B's config.json.
Preset qwen3_8b() {
  Preset p;
  p.name = "qwen3-8b-shape";
  p.description = "Qwen3-8B's shapes: 36 layers, hidden 4096, 32/8 heads, head_dim 128, q/k norms";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kQwen2);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kQwen3;
  c.architecture_name = "Qwen3ForCausalLM";
  c.model_type = "qwen3";
  c.vocab_size = 151936;
  c.hidden_size = 4096;
  c.intermediate_size = 12288;
  c.num_hidden_layers = 36;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = 128;
  c.max_position_embeddings = 40960;
  c.rope_theta = 1000000.0;
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = false;
  c.qk_norm = true;
  c.layer_types.assign(36, checkpoint::LayerType::kFullAttention);
  p.model_max_length = 131072;
  p.write_head_dim = true;
  p.max_window_layers = 36;
  set_special_ids(&p);
  return p;
}

// The Gemma fields both presets share (Gemma2Config / Gemma3TextConfig values).
void gemma_common(checkpoint::ModelConfig& c) {
  c.hidden_act = "gelu_pytorch_tanh";
  c.rms_norm_eps = 1e-6;
  c.tie_word_embeddings = true;
  c.norm_weight_offset = 1.0;
  c.embedding_scale = std::sqrt(static_cast<double>(c.hidden_size));
  c.sandwich_norms = true;
  c.query_pre_attn_scalar = 256.0;
}

// Gemma's interleaving: the layers `slides` picks attend to the last `window` tokens
// (ModelConfig::layer_types and layer_window_left, as the config parser fills them).
template <typename Slides>
void set_sliding_layers(checkpoint::ModelConfig& c, int32_t window, Slides slides) {
  c.layer_types.assign(static_cast<size_t>(c.num_hidden_layers),
                       checkpoint::LayerType::kFullAttention);
  c.layer_window_left.assign(static_cast<size_t>(c.num_hidden_layers), -1);
  for (int32_t i = 0; i < c.num_hidden_layers; ++i) {
    if (!slides(i)) continue;
    c.layer_types[static_cast<size_t>(i)] = checkpoint::LayerType::kSlidingAttention;
    c.layer_window_left[static_cast<size_t>(i)] = window - 1;
  }
}

// google/gemma-2-9b's config.json.
Preset gemma2_9b() {
  Preset p;
  p.name = "gemma-2-9b-shape";
  p.description =
      "Gemma-2-9B's shapes: 42 layers, hidden 3584, 16/8 heads, head_dim 256, every other layer "
      "sliding (4096), soft-capping";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kLlama3);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kGemma2;
  c.architecture_name = "Gemma2ForCausalLM";
  c.model_type = "gemma2";
  c.vocab_size = 256000;
  c.hidden_size = 3584;
  c.intermediate_size = 14336;
  c.num_hidden_layers = 42;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 256;
  c.max_position_embeddings = 8192;
  c.rope_theta = 10000.0;
  gemma_common(c);
  c.attn_logit_softcapping = 50.0;
  c.final_logit_softcapping = 30.0;
  set_sliding_layers(c, 4096, [](int32_t i) { return i % 2 == 0; });
  p.model_max_length = 8192;
  p.write_head_dim = true;
  set_special_ids(&p);
  return p;
}

// google/gemma-3-12b-pt's text_config (transformers v4 keys: rope_scaling for the full layers,
// rope_local_base_freq for the sliding ones, sliding_window_pattern).
Preset gemma3_12b() {
  Preset p;
  p.name = "gemma-3-12b-shape";
  p.description =
      "Gemma-3-12B's text model: 48 layers, hidden 3840, 16/8 heads, head_dim 256, five sliding "
      "(1024) layers per full one, q/k norms, linear rope x8 on full layers";
  p.tokenizer = make_synthetic_tokenizer(TokenizerStyle::kLlama3);
  checkpoint::ModelConfig& c = p.config;
  c.architecture = checkpoint::Architecture::kGemma3;
  c.architecture_name = "Gemma3ForCausalLM";
  c.model_type = "gemma3_text";
  c.vocab_size = 262208;
  c.hidden_size = 3840;
  c.intermediate_size = 15360;
  c.num_hidden_layers = 48;
  c.num_attention_heads = 16;
  c.num_key_value_heads = 8;
  c.head_dim = 256;
  c.max_position_embeddings = 131072;
  c.rope_theta = 1000000.0;
  c.rope_scaling.rope_type = "linear";
  c.rope_scaling.factor = 8.0;
  c.sliding_rope_theta = 10000.0;
  gemma_common(c);
  c.qk_norm = true;
  set_sliding_layers(c, 1024, [](int32_t i) { return (i + 1) % 6 != 0; });
  p.model_max_length = 131072;
  p.write_head_dim = true;
  set_special_ids(&p);
  return p;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {tiny(),
                                          qwen25_05b(),
                                          llama32_1b(),
                                          llama31_8b(),
                                          llama31_70b(),
                                          qwen3_8b(),
                                          gemma2_9b(),
                                          gemma3_12b(),
                                          whisper_tiny_shape_preset(),
                                          whisper_large_v2_shape_preset(),
                                          whisper_test_preset()};
  return all;
}

}  // namespace

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const Preset& p : presets())
    names.push_back(p.name);
  return names;
}

const Preset* find_preset(std::string_view name) {
  for (const Preset& p : presets()) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::string_view torch_dtype_name(DType t) {
  switch (t) {
    case DType::kBF16:
      return "bfloat16";
    case DType::kF16:
      return "float16";
    case DType::kF32:
      return "float32";
    default:
      KV_CHECK(false, "{} is not a checkpoint dtype", dtype_name(t));
  }
}

std::string config_json_text(const Preset& preset, DType dtype) {
  const checkpoint::ModelConfig& c = preset.config;
  json j;  // std::map: keys sorted, as transformers' to_json_string(sort_keys=True)
  j["architectures"] = {c.architecture_name};
  j["attention_dropout"] = 0.0;
  j["bos_token_id"] = c.bos_token_id ? json(*c.bos_token_id) : json(nullptr);
  j["eos_token_id"] =
      c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids);
  j["hidden_act"] = c.hidden_act;  // Gemma's configs carry both keys
  j["hidden_size"] = c.hidden_size;
  j["initializer_range"] = 0.02;
  j["intermediate_size"] = c.intermediate_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["model_type"] = c.model_type;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["torch_dtype"] = torch_dtype_name(dtype);
  j["use_cache"] = true;
  j["vocab_size"] = c.vocab_size;
  if (preset.write_head_dim) j["head_dim"] = c.head_dim;
  if (c.architecture == checkpoint::Architecture::kGemma2 ||
      c.architecture == checkpoint::Architecture::kGemma3) {
    const bool gemma3 = c.architecture == checkpoint::Architecture::kGemma3;
    j["attention_bias"] = false;
    j["hidden_activation"] = c.hidden_act;
    j["query_pre_attn_scalar"] = *c.query_pre_attn_scalar;
    j["attn_logit_softcapping"] =
        c.attn_logit_softcapping ? json(*c.attn_logit_softcapping) : json(nullptr);
    j["final_logit_softcapping"] =
        c.final_logit_softcapping ? json(*c.final_logit_softcapping) : json(nullptr);
    const std::vector<int32_t> sliding = checkpoint::sliding_layers(c);
    KV_CHECK(!sliding.empty(), "a Gemma preset without sliding layers");
    j["sliding_window"] = c.layer_window_left[static_cast<size_t>(sliding.front())] + 1;
    j["cache_implementation"] = "hybrid";
    if (gemma3) {
      j["rope_local_base_freq"] = *c.sliding_rope_theta;
      j["sliding_window_pattern"] = 6;
      j["rope_scaling"] = {{"factor", c.rope_scaling.factor},
                           {"rope_type", c.rope_scaling.rope_type}};
    }
  } else if (c.architecture == checkpoint::Architecture::kQwen3) {
    j["attention_bias"] = false;
    j["max_window_layers"] = preset.max_window_layers;
    j["rope_scaling"] = nullptr;
    j["sliding_window"] = nullptr;
    j["use_sliding_window"] = false;
  } else if (c.architecture == checkpoint::Architecture::kQwen2) {
    j["max_window_layers"] = preset.max_window_layers;
    j["sliding_window"] = c.max_position_embeddings;  // present but off, as in Qwen2.5
    j["use_sliding_window"] = false;
  } else {
    j["attention_bias"] = c.attention_bias;
    j["mlp_bias"] = false;
    j["pretraining_tp"] = 1;
    if (c.rope_scaling.rope_type == "default") {
      j["rope_scaling"] = nullptr;
    } else {
      j["rope_scaling"] = {
          {"factor", c.rope_scaling.factor},
          {"high_freq_factor", c.rope_scaling.high_freq_factor},
          {"low_freq_factor", c.rope_scaling.low_freq_factor},
          {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings},
          {"rope_type", c.rope_scaling.rope_type}};
    }
  }
  return j.dump(2) + "\n";
}

std::string generation_config_json_text(const Preset& preset) {
  const SyntheticTokenizer& t = preset.tokenizer;
  json j;
  j["bos_token_id"] =
      preset.config.bos_token_id ? json(*preset.config.bos_token_id) : json(nullptr);
  j["eos_token_id"] = t.generation_eos_ids();
  if (t.pad_token) j["pad_token_id"] = t.special_id(*t.pad_token);
  j["do_sample"] = false;  // random weights: greedy by default keeps runs reproducible
  return j.dump(2) + "\n";
}

}  // namespace kvserve::makemodel

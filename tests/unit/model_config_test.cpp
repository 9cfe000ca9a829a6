// config.json and generation_config.json: real models' values, Hugging Face's defaults, and every
// error naming the file and the field.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>
#include <initializer_list>
#include <string>

#include "kvserve/checkpoint/config.h"
#include "kvserve/model/decoder_family.h"
#include "model_test_util.h"

namespace kvserve::checkpoint {
namespace {

using model::testing::fixtures_dir;
using model::testing::TempDir;
using model::testing::write_file;
using nlohmann::json;

std::filesystem::path config_fixture(const std::string& name) {
  return fixtures_dir() / "model_configs" / name;
}

ModelConfig load_ok(const std::string& fixture) {
  const Result<ModelConfig> r = load_model_config(config_fixture(fixture));
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : ModelConfig{};
}

// A minimal valid config: architectures and the five sizes, nothing else.
json minimal(const std::string& architecture) {
  return {{"architectures", {architecture}}, {"vocab_size", 1000},     {"hidden_size", 256},
          {"intermediate_size", 512},        {"num_hidden_layers", 2}, {"num_attention_heads", 8}};
}

Result<ModelConfig> parse(const json& j) {
  return parse_model_config(j.dump(), "config.json");
}

ModelConfig parse_ok(const json& j) {
  const Result<ModelConfig> r = parse(j);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : ModelConfig{};
}

void expect_error(const Result<ModelConfig>& r, StatusCode code,
                  std::initializer_list<std::string> parts) {
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), code) << r.status().to_string();
  for (const std::string& p : parts) {
    EXPECT_NE(r.status().message().find(p), std::string::npos)
        << "'" << p << "' not in: " << r.status().message();
  }
}

void expect_error(const json& j, StatusCode code, std::initializer_list<std::string> parts) {
  expect_error(parse(j), code, parts);
}

// The window (transformers' sliding_window) of the first sliding layer; nullopt: none slides.
std::optional<int32_t> window_of(const ModelConfig& c) {
  const std::vector<int32_t> sliding = sliding_layers(c);
  if (sliding.empty()) return std::nullopt;
  return c.layer_window_left[static_cast<size_t>(sliding.front())] + 1;
}

TEST(ModelConfig, Llama32Instruct) {
  const ModelConfig c = load_ok("llama-3.2-1b-instruct");
  EXPECT_EQ(c.architecture, Architecture::kLlama);
  EXPECT_EQ(c.architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 8192);
  EXPECT_EQ(c.num_hidden_layers, 16);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.torch_dtype, DType::kBF16);
  EXPECT_EQ(c.layer_window_left, std::vector<int32_t>(16, -1));
  EXPECT_TRUE(sliding_layers(c).empty());
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
}

TEST(ModelConfig, Llama31With8BShapes) {
  const ModelConfig c = load_ok("llama-3.1-8b");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.intermediate_size, 14336);
  EXPECT_EQ(c.num_hidden_layers, 32);
  EXPECT_EQ(c.head_dim, 128);  // no head_dim in the file: hidden_size / heads
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{128001});  // an int, not a list
}

TEST(ModelConfig, Qwen25Instruct) {
  const ModelConfig c = load_ok("qwen2.5-0.5b-instruct");
  EXPECT_EQ(c.architecture, Architecture::kQwen2);
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 896);
  EXPECT_EQ(c.intermediate_size, 4864);
  EXPECT_EQ(c.num_hidden_layers, 24);
  EXPECT_EQ(c.num_attention_heads, 14);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.rope_theta, 1000000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.attention_bias);  // Qwen2 always has q/k/v biases
  // sliding_window is 32768 in the file but use_sliding_window is false.
  EXPECT_TRUE(sliding_layers(c).empty());
  EXPECT_EQ(c.layer_window_left.size(), 24u);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{151645});
}

TEST(ModelConfig, Mistral) {
  const ModelConfig v1 = load_ok("mistral-7b-v0.1");
  EXPECT_EQ(v1.architecture, Architecture::kMistral);
  EXPECT_EQ(v1.model_type, "mistral");
  EXPECT_EQ(v1.layer_window_left, std::vector<int32_t>(32, 4095));  // every layer, 4096 - 1
  EXPECT_FALSE(v1.attention_bias);
  EXPECT_EQ(v1.head_dim, 128);
  EXPECT_EQ(v1.rms_norm_eps, 1e-5);
  const ModelConfig v3 = load_ok("mistral-7b-instruct-v0.3");
  EXPECT_TRUE(sliding_layers(v3).empty());  // "sliding_window": null
  EXPECT_EQ(v3.vocab_size, 32768);
  EXPECT_EQ(v3.rope_theta, 1000000.0);
}

TEST(ModelConfig, DefaultsAsTransformersAppliesThem) {
  const ModelConfig llama = parse_ok(minimal("LlamaForCausalLM"));
  EXPECT_EQ(llama.model_type, "llama");
  EXPECT_EQ(llama.num_key_value_heads, 8);  // = num_attention_heads
  EXPECT_EQ(llama.head_dim, 32);            // = hidden_size / num_attention_heads
  EXPECT_EQ(llama.max_position_embeddings, 2048);
  EXPECT_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(llama.rope_scaling.rope_type, "default");
  EXPECT_EQ(llama.rope_scaling.factor, 1.0);
  EXPECT_EQ(llama.rms_norm_eps, 1e-6);
  EXPECT_FALSE(llama.tie_word_embeddings);
  EXPECT_FALSE(llama.attention_bias);
  EXPECT_EQ(llama.hidden_act, "silu");
  EXPECT_EQ(llama.torch_dtype, DType::kF32);  // no declared dtype: transformers loads float32
  EXPECT_EQ(llama.layer_window_left, (std::vector<int32_t>{-1, -1}));
  EXPECT_FALSE(llama.bos_token_id.has_value());
  EXPECT_TRUE(llama.eos_token_ids.empty());

  const ModelConfig qwen = parse_ok(minimal("Qwen2ForCausalLM"));
  EXPECT_EQ(qwen.model_type, "qwen2");
  EXPECT_TRUE(qwen.attention_bias);
  EXPECT_EQ(qwen.max_position_embeddings, 32768);
  EXPECT_EQ(qwen.num_key_value_heads, 8);

  const ModelConfig mistral = parse_ok(minimal("MistralForCausalLM"));
  EXPECT_EQ(mistral.max_position_embeddings, 131072);
  // MistralConfig's default window when the key is absent, on every layer.
  EXPECT_EQ(mistral.layer_window_left, (std::vector<int32_t>{4095, 4095}));
}

TEST(ModelConfig, OptionalFieldVariants) {
  json j = minimal("LlamaForCausalLM");
  j["attention_bias"] = false;  // true is refused for Llama (config_audit_test.cpp)
  j["rope_scaling"] = nullptr;
  j["eos_token_id"] = 7;
  j["bos_token_id"] = nullptr;
  j["dtype"] = "float16";  // transformers >= 4.56 writes "dtype"
  ModelConfig c = parse_ok(j);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{7});
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, DType::kF16);

  j["torch_dtype"] = "float32";  // torch_dtype wins over dtype
  j["eos_token_id"] = json::array({3, 4});
  j["head_dim"] = 64;  // explicit head_dim may differ from hidden_size / heads
  c = parse_ok(j);
  EXPECT_EQ(c.torch_dtype, DType::kF32);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{3, 4}));
  EXPECT_EQ(c.head_dim, 64);

  // Legacy "type" instead of "rope_type"; "default" as an explicit type.
  j["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  c = parse_ok(j);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_EQ(parse_ok(j).rope_scaling.rope_type, "default");

  // transformers v5's "rope_parameters".
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "llama3"},   {"rope_theta", 500000.0},
                          {"factor", 32.0},          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  c = parse_ok(j);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);

  json q = minimal("Qwen2ForCausalLM");
  q["use_sliding_window"] = true;
  q["sliding_window"] = 4096;
  q["max_window_layers"] = 1;  // layer 1 slides
  EXPECT_EQ(parse_ok(q).layer_window_left, (std::vector<int32_t>{-1, 4095}));
  EXPECT_EQ(sliding_layers(parse_ok(q)), std::vector<int32_t>{1});
  q.erase("sliding_window");  // Qwen2Config's default window, 4096
  EXPECT_EQ(parse_ok(q).layer_window_left, (std::vector<int32_t>{-1, 4095}));
  q["layer_types"] = {"sliding_attention", "full_attention"};  // in place of max_window_layers
  q["sliding_window"] = 24;
  EXPECT_EQ(parse_ok(q).layer_window_left, (std::vector<int32_t>{23, -1}));
  q["use_sliding_window"] = false;  // then no window to slide: refused naming the layer
  const Result<ModelConfig> r = parse_model_config(q.dump(), "config.json");
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("layer_types[0]"), std::string::npos) << r.status().message();
}

TEST(ModelConfigErrors, MissingFileAndBadJsonNameTheFile) {
  TempDir dir;
  Result<ModelConfig> r = load_model_config(dir.path());
  expect_error(r, StatusCode::kNotFound, {(dir.path() / "config.json").string()});

  write_file(dir / "config.json", "{\"architectures\": [\"LlamaForCausalLM\",");
  r = load_model_config(dir.path());
  expect_error(r, StatusCode::kInvalidArgument,
               {(dir.path() / "config.json").string(), "not valid JSON"});

  write_file(dir / "config.json", "[1, 2]");
  expect_error(load_model_config(dir.path()), StatusCode::kInvalidArgument,
               {"config.json", "object"});

  std::filesystem::create_directories(dir / "sub" / "config.json");
  expect_error(load_model_config(dir / "sub"), StatusCode::kInvalidArgument, {"directory"});
}

TEST(ModelConfigErrors, MissingRequiredFields) {
  for (const char* field : {"architectures", "vocab_size", "hidden_size", "intermediate_size",
                            "num_hidden_layers", "num_attention_heads"}) {
    json j = minimal("LlamaForCausalLM");
    j.erase(field);
    expect_error(j, StatusCode::kInvalidArgument, {"config.json", field, "missing"});
    j[field] = nullptr;  // null counts as missing
    expect_error(j, StatusCode::kInvalidArgument, {"config.json", field, "missing"});
  }
}

TEST(ModelConfigErrors, WrongTypes) {
  struct Case {
    const char* field;
    json value;
    const char* got;
  };
  const Case cases[] = {
      {"hidden_size", "896", "string"},
      {"vocab_size", 1000.5, "number"},
      {"num_key_value_heads", true, "boolean"},
      {"tie_word_embeddings", "true", "string"},
      {"attention_bias", 1, "number"},
      {"rope_theta", "1e6", "string"},
      {"rms_norm_eps", json::array({1e-6}), "array"},
      {"max_position_embeddings", "2048", "string"},
      {"hidden_act", 1, "number"},
      {"torch_dtype", 16, "number"},
      {"eos_token_id", "</s>", "string"},
      {"bos_token_id", 1.5, "number"},
      {"rope_scaling", "llama3", "string"},
      {"model_type", json::array({"llama"}), "array"},
      {"architectures", "LlamaForCausalLM", "string"},
  };
  for (const Case& c : cases) {
    json j = minimal("LlamaForCausalLM");
    j[c.field] = c.value;
    expect_error(j, StatusCode::kInvalidArgument, {"config.json", c.field, c.got});
  }
  json j = minimal("LlamaForCausalLM");
  j["eos_token_id"] = json::array({1, "x"});
  expect_error(j, StatusCode::kInvalidArgument, {"eos_token_id", "element 1"});
  j = json::array();
  expect_error(parse(j), StatusCode::kInvalidArgument, {"config.json", "object"});
}

TEST(ModelConfigErrors, BadValues) {
  json j = minimal("LlamaForCausalLM");
  j["hidden_size"] = 0;
  expect_error(j, StatusCode::kInvalidArgument, {"hidden_size", "positive"});
  j = minimal("LlamaForCausalLM");
  j["num_hidden_layers"] = -2;
  expect_error(j, StatusCode::kInvalidArgument, {"num_hidden_layers", "positive"});
  j = minimal("LlamaForCausalLM");
  j["vocab_size"] = 10000000000LL;
  expect_error(j, StatusCode::kInvalidArgument, {"vocab_size", "too large"});
  j = minimal("LlamaForCausalLM");
  j["max_position_embeddings"] = 0;
  expect_error(j, StatusCode::kInvalidArgument, {"max_position_embeddings"});
  j = minimal("LlamaForCausalLM");
  j["rope_theta"] = 0;
  expect_error(j, StatusCode::kInvalidArgument, {"rope_theta"});
  j = minimal("LlamaForCausalLM");
  j["rms_norm_eps"] = -1e-6;
  expect_error(j, StatusCode::kInvalidArgument, {"rms_norm_eps"});
  j = minimal("LlamaForCausalLM");
  j["eos_token_id"] = -1;
  expect_error(j, StatusCode::kInvalidArgument, {"eos_token_id", "out of range"});
  j = minimal("LlamaForCausalLM");
  j["torch_dtype"] = "int8";
  expect_error(j, StatusCode::kInvalidArgument, {"torch_dtype", "int8"});
  j["torch_dtype"] = "float8_e4m3fn";
  expect_error(j, StatusCode::kInvalidArgument, {"torch_dtype"});
  j.erase("torch_dtype");
  j["dtype"] = "complex64";
  expect_error(j, StatusCode::kInvalidArgument, {"config.json: dtype"});
}

TEST(ModelConfigErrors, InconsistentHeads) {
  json j = minimal("LlamaForCausalLM");
  j["num_key_value_heads"] = 3;
  expect_error(j, StatusCode::kInvalidArgument,
               {"config.json: num_key_value_heads (3) does not divide num_attention_heads (8)"});
  j = minimal("LlamaForCausalLM");
  j["num_attention_heads"] = 6;  // 256 / 6
  expect_error(j, StatusCode::kInvalidArgument, {"hidden_size", "num_attention_heads"});
  j = minimal("LlamaForCausalLM");
  j["head_dim"] = 33;
  expect_error(j, StatusCode::kInvalidArgument, {"head_dim", "odd"});
  j["head_dim"] = 0;
  expect_error(j, StatusCode::kInvalidArgument, {"head_dim", "positive"});
}

TEST(ModelConfigErrors, UnsupportedArchitectureAndFeatures) {
  json j = minimal("GPT2LMHeadModel");
  expect_error(j, StatusCode::kUnimplemented,
               {"config.json: architectures", "GPT2LMHeadModel", "LlamaForCausalLM"});
  j = minimal("LlamaForCausalLM");
  j["architectures"] = json::array();
  expect_error(j, StatusCode::kInvalidArgument, {"architectures"});
  j = minimal("LlamaForCausalLM");
  j["model_type"] = "qwen2";
  expect_error(j, StatusCode::kInvalidArgument, {"model_type", "qwen2", "llama"});
  j = minimal("LlamaForCausalLM");
  j["hidden_act"] = "gelu";
  expect_error(j, StatusCode::kUnimplemented, {"config.json: hidden_act", "gelu"});
  j = minimal("LlamaForCausalLM");
  j["mlp_bias"] = true;
  expect_error(j, StatusCode::kUnimplemented, {"mlp_bias"});
}

TEST(ModelConfigErrors, RopeScaling) {
  json j = minimal("LlamaForCausalLM");
  j["rope_scaling"] = {{"rope_type", "su"}, {"factor", 4.0}};
  expect_error(j, StatusCode::kUnimplemented, {"config.json: rope_scaling.rope_type", "su"});
  j["rope_scaling"] = {{"type", "ntk"}, {"factor", 2.0}};
  expect_error(j, StatusCode::kUnimplemented, {"rope_scaling.type", "ntk"});
  // Each type's required fields.
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(j, StatusCode::kInvalidArgument,
               {"rope_scaling.original_max_position_embeddings", "missing"});
  j["rope_scaling"] = {{"rope_type", "linear"}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.factor", "missing"});
  j["rope_scaling"] = {{"rope_type", "dynamic"}, {"factor", 0.5}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.factor", ">= 1"});
  j["rope_scaling"] = {{"rope_type", "longrope"}, {"original_max_position_embeddings", 64}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.short_factor", "missing"});
  j["rope_scaling"]["short_factor"] = {1.0, 2.0};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.short_factor", "2 entries"});
  j["rope_scaling"] = {{"rope_type", "yarn"},
                       {"factor", 4.0},
                       {"original_max_position_embeddings", 64},
                       {"truncate", "yes"}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.truncate"});
  j["rope_scaling"] = {{"factor", 2.0}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.rope_type", "missing"});
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.factor", "missing"});
  j["rope_scaling"]["factor"] = 0.5;
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.factor", ">= 1"});
  j["rope_scaling"]["factor"] = 8.0;
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  expect_error(j, StatusCode::kInvalidArgument, {"rope_scaling.high_freq_factor"});
  j["rope_scaling"]["high_freq_factor"] = 4.0;
  j["rope_scaling"]["original_max_position_embeddings"] = "8192";
  expect_error(j, StatusCode::kInvalidArgument,
               {"rope_scaling.original_max_position_embeddings", "string"});
  j.erase("rope_scaling");
  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 10000.0}};
  expect_error(j, StatusCode::kInvalidArgument, {"rope_parameters.factor", "missing"});
}

// What each type leaves out is resolved as transformers 5 resolves it; the default context
// follows SGLang's get_context_length.
TEST(ModelConfig, RopeScalingTypesResolveTheirDefaults) {
  json j = minimal("LlamaForCausalLM");
  j["max_position_embeddings"] = 256;
  j["rope_parameters"] = {{"rope_type", "yarn"},
                          {"rope_theta", 10000.0},
                          {"factor", 4.0},
                          {"original_max_position_embeddings", 64}};
  ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.rope_scaling.rope_type, "yarn");
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 0.1 * std::log(4.0) + 1.0);
  EXPECT_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_TRUE(c.rope_scaling.truncate);
  EXPECT_EQ(default_context_length(c), 256);  // original_max_position_embeddings named: x1
  j["rope_parameters"]["mscale"] = 0.707;
  j["rope_parameters"]["mscale_all_dim"] = 0.707;
  j["rope_parameters"]["beta_fast"] = 0;  // transformers reads `or 32`
  j["rope_parameters"]["truncate"] = false;
  c = parse_ok(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_FALSE(c.rope_scaling.truncate);
  j["rope_parameters"]["attention_factor"] = 1.25;
  EXPECT_DOUBLE_EQ(parse_ok(j).rope_scaling.attention_factor, 1.25);

  const int head_dim = parse_ok(j).head_dim;
  j["rope_parameters"] = {{"rope_type", "longrope"},
                          {"original_max_position_embeddings", 64},
                          {"short_factor", std::vector<double>(head_dim / 2, 1.0)},
                          {"long_factor", std::vector<double>(head_dim / 2, 3.0)}};
  c = parse_ok(j);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 4.0);  // 256 / 64
  EXPECT_DOUBLE_EQ(c.rope_scaling.attention_factor,
                   std::sqrt(1.0 + std::log(4.0) / std::log(64.0)));
  EXPECT_EQ(c.rope_scaling.long_factor[0], 3.0);
  EXPECT_EQ(default_context_length(c), 256);

  j["rope_parameters"] = {{"rope_type", "dynamic"}, {"factor", 2.0}};
  c = parse_ok(j);
  EXPECT_EQ(c.rope_scaling.attention_factor, 1.0);
  EXPECT_EQ(default_context_length(c), 512);  // factor x max_position_embeddings
  j["rope_parameters"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  EXPECT_EQ(default_context_length(parse_ok(j)), 1024);
  j["rope_parameters"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 64}};
  EXPECT_EQ(default_context_length(parse_ok(j)), 256);
}

TEST(GenerationConfig, RealFiles) {
  Result<GenerationConfig> r = load_generation_config(config_fixture("llama-3.2-1b-instruct"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{128001, 128008, 128009}));
  EXPECT_EQ(r->bos_token_id, 128000);
  EXPECT_FALSE(r->pad_token_id.has_value());
  EXPECT_TRUE(r->do_sample);
  EXPECT_EQ(r->temperature, 0.6);
  EXPECT_EQ(r->top_p, 0.9);
  EXPECT_FALSE(r->top_k.has_value());

  r = load_generation_config(config_fixture("qwen2.5-0.5b-instruct"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->eos_token_ids, (std::vector<int32_t>{151645, 151643}));
  EXPECT_EQ(r->pad_token_id, 151643);
  EXPECT_EQ(r->top_k, 20);
  EXPECT_EQ(r->repetition_penalty, 1.1);
  EXPECT_EQ(r->temperature, 0.7);
  EXPECT_EQ(r->top_p, 0.8);
  EXPECT_FALSE(r->min_p.has_value());
  EXPECT_FALSE(r->max_new_tokens.has_value());
}

TEST(GenerationConfig, MissingFileGivesDefaults) {
  TempDir dir;
  const Result<GenerationConfig> r = load_generation_config(dir.path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_TRUE(r->eos_token_ids.empty());
  EXPECT_FALSE(r->do_sample);
  EXPECT_FALSE(r->temperature.has_value());
  EXPECT_FALSE(r->bos_token_id.has_value());
}

TEST(GenerationConfig, ErrorsNameFileAndField) {
  TempDir dir;
  const std::string file = (dir.path() / "generation_config.json").string();
  write_file(dir / "generation_config.json", "{\"eos_token_id\": 2,,}");
  Result<GenerationConfig> r = load_generation_config(dir.path());
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find(file), std::string::npos) << r.status().message();

  struct Case {
    const char* text;
    const char* field;
  };
  const Case cases[] = {
      {R"({"top_k": "20"})", "top_k"},
      {R"({"do_sample": "yes"})", "do_sample"},
      {R"({"eos_token_id": [1, null]})", "eos_token_id"},
      {R"({"temperature": -1})", "temperature"},
      {R"({"top_p": 0})", "top_p"},
      {R"({"min_p": 2})", "min_p"},
      {R"({"max_new_tokens": 0})", "max_new_tokens"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"},
      {R"({"pad_token_id": [0]})", "pad_token_id"},
  };
  for (const Case& c : cases) {
    write_file(dir / "generation_config.json", c.text);
    r = load_generation_config(dir.path());
    ASSERT_FALSE(r.is_ok()) << c.text;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(file + ": " + c.field), std::string::npos)
        << r.status().message();
  }
  write_file(dir / "generation_config.json", R"({"eos_token_id": 2, "max_new_tokens": 16})");
  r = load_generation_config(dir.path());
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->eos_token_ids, std::vector<int32_t>{2});
  EXPECT_EQ(r->max_new_tokens, 16);
}

// ---- Qwen3, Gemma 2, Gemma 3 ------------------------------------------------------------------

json oracle_config(const std::string& fixture) {
  std::ifstream in(fixtures_dir() / "oracle" / fixture / "config.json");
  return json::parse(in);
}

TEST(ModelConfig, Qwen3FixtureHasQkNormsAndNoGemmaMath) {
  const ModelConfig c = parse_ok(oracle_config("qwen3"));
  EXPECT_EQ(c.architecture, Architecture::kQwen3);
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.norm_weight_offset, 0.0);
  EXPECT_EQ(c.embedding_scale, 1.0);
  EXPECT_FALSE(c.sandwich_norms);
  EXPECT_FALSE(c.query_pre_attn_scalar);
  EXPECT_FALSE(c.attn_logit_softcapping);
  EXPECT_FALSE(c.final_logit_softcapping);
  EXPECT_FALSE(window_of(c));
  EXPECT_EQ(c.layer_types, std::vector<LayerType>(2, LayerType::kFullAttention));
  EXPECT_TRUE(c.tie_word_embeddings);
  // Qwen3Config's defaults: head_dim 128 (not hidden / heads), untied.
  const ModelConfig d = parse_ok(minimal("Qwen3ForCausalLM"));
  EXPECT_EQ(d.head_dim, 128);
  EXPECT_FALSE(d.tie_word_embeddings);
  EXPECT_EQ(d.max_position_embeddings, 32768);
  // Qwen3Attention biases o_proj too when attention_bias: refused.
  json j = minimal("Qwen3ForCausalLM");
  j["attention_bias"] = true;
  expect_error(j, StatusCode::kUnimplemented, {"attention_bias", "o_proj"});
  // Qwen3's sliding window follows Qwen2's rule (use_sliding_window, max_window_layers).
  j = minimal("Qwen3ForCausalLM");
  j["use_sliding_window"] = true;
  j["sliding_window"] = 64;
  j["max_window_layers"] = 1;
  const ModelConfig w = parse_ok(j);
  EXPECT_EQ(window_of(w), 64);
  EXPECT_EQ(w.layer_types,
            (std::vector<LayerType>{LayerType::kFullAttention, LayerType::kSlidingAttention}));
}

TEST(ModelConfig, Gemma2FixtureEveryField) {
  const ModelConfig c = parse_ok(oracle_config("gemma2"));
  EXPECT_EQ(c.architecture, Architecture::kGemma2);
  EXPECT_EQ(c.model_type, "gemma2");
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(c.norm_weight_offset, 1.0);
  EXPECT_EQ(c.embedding_scale, std::sqrt(128.0));
  EXPECT_TRUE(c.sandwich_norms);
  EXPECT_EQ(c.query_pre_attn_scalar, 48.0);
  EXPECT_EQ(c.attn_logit_softcapping, 3.0);
  EXPECT_EQ(c.final_logit_softcapping, 5.0);
  EXPECT_EQ(window_of(c), 16);
  EXPECT_EQ(sliding_layers(c).size(), 2u);
  using enum LayerType;
  EXPECT_EQ(c.layer_types,
            (std::vector{kSlidingAttention, kFullAttention, kSlidingAttention, kFullAttention}));
  EXPECT_FALSE(c.sliding_rope_theta);
  EXPECT_EQ(c.layer_rope_theta(0), 10000.0);
  EXPECT_TRUE(c.layer_rope_scaled(0));
  EXPECT_TRUE(c.tie_word_embeddings);
  // A window shorter than the served context stays; one covering it is full attention.
  EXPECT_EQ(served_window_left(c, 512), c.layer_window_left);
  EXPECT_EQ(served_window_left(c, 16), std::vector<int32_t>(4, -1));
}

TEST(ModelConfig, Gemma2DefaultsAreGemma2Configs) {
  json j = minimal("Gemma2ForCausalLM");
  j["num_hidden_layers"] = 4;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_EQ(c.attn_logit_softcapping, 50.0);
  EXPECT_EQ(c.final_logit_softcapping, 30.0);
  EXPECT_EQ(window_of(c), 4096);
  using enum LayerType;
  EXPECT_EQ(c.layer_types,
            (std::vector{kSlidingAttention, kFullAttention, kSlidingAttention, kFullAttention}));
  // null: no capping.
  j["attn_logit_softcapping"] = nullptr;
  j["final_logit_softcapping"] = nullptr;
  const ModelConfig n = parse_ok(j);
  EXPECT_FALSE(n.attn_logit_softcapping);
  EXPECT_FALSE(n.final_logit_softcapping);
}

TEST(ModelConfig, GemmaRefusals) {
  for (const char* arch : {"Gemma2ForCausalLM", "Gemma3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    json j = minimal(arch);
    j["use_bidirectional_attention"] = true;
    expect_error(j, StatusCode::kUnimplemented, {"use_bidirectional_attention", "true"});
    j = minimal(arch);
    j["hidden_activation"] = "gelu";
    expect_error(j, StatusCode::kUnimplemented, {"hidden_activation", "gelu"});
    j = minimal(arch);
    j["attention_bias"] = true;
    expect_error(j, StatusCode::kUnimplemented, {"attention_bias"});
    j = minimal(arch);
    j["final_logit_softcapping"] = -1.0;
    expect_error(j, StatusCode::kInvalidArgument, {"final_logit_softcapping", "-1"});
    j = minimal(arch);
    j["query_pre_attn_scalar"] = 0;
    expect_error(j, StatusCode::kInvalidArgument, {"query_pre_attn_scalar"});
    j = minimal(arch);
    j["layer_types"] = {"full_attention", "chunked_attention"};
    expect_error(j, StatusCode::kUnimplemented, {"layer_types[1]", "chunked_attention"});
  }
  // Gemma's soft-capping on another architecture is refused naming it.
  json j = minimal("LlamaForCausalLM");
  j["final_logit_softcapping"] = 30.0;
  expect_error(j, StatusCode::kUnimplemented, {"final_logit_softcapping", "30"});
  // Gemma 3: a scaled rope on the sliding layers is not implemented.
  j = minimal("Gemma3ForCausalLM");
  j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "dynamic"}, {"factor", 2.0}}}};
  expect_error(j, StatusCode::kUnimplemented, {"sliding_attention", "dynamic"});
}

// The Gemma 3 fixture with its nested rope_parameters, the full layers' linear scaling replaced
// by default (the next test parses the fixture as written).
TEST(ModelConfig, Gemma3FixtureNestedRopeParameters) {
  json j = oracle_config("gemma3");
  j["rope_parameters"]["full_attention"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.architecture, Architecture::kGemma3);
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_TRUE(c.qk_norm);
  EXPECT_TRUE(c.sandwich_norms);
  EXPECT_EQ(c.norm_weight_offset, 1.0);
  EXPECT_EQ(c.query_pre_attn_scalar, 64.0);
  EXPECT_FALSE(c.attn_logit_softcapping);
  EXPECT_FALSE(c.final_logit_softcapping);
  EXPECT_EQ(window_of(c), 16);
  using enum LayerType;
  EXPECT_EQ(c.layer_types,
            (std::vector{kSlidingAttention, kSlidingAttention, kFullAttention, kSlidingAttention}));
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.sliding_rope_theta, 10000.0);
  EXPECT_EQ(c.layer_rope_theta(0), 10000.0);
  EXPECT_FALSE(c.layer_rope_scaled(0));
  EXPECT_EQ(c.layer_rope_theta(2), 1e6);
  EXPECT_TRUE(c.layer_rope_scaled(2));
}

TEST(ModelConfig, Gemma3FixtureLinearRopeOnFullLayers) {
  const Result<ModelConfig> r = parse(oracle_config("gemma3"));
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ(r->rope_scaling.rope_type, "linear");
  EXPECT_EQ(r->rope_scaling.factor, 8.0);
  EXPECT_EQ(r->rope_theta, 1e6);
  EXPECT_EQ(r->sliding_rope_theta, 10000.0);
}

// transformers v4's Gemma 3 keys (as google/gemma-3-1b-pt): rope_local_base_freq and
// sliding_window_pattern, no layer_types; Gemma3TextConfig's defaults otherwise.
TEST(ModelConfig, Gemma3LegacyKeysAndDefaults) {
  json j = minimal("Gemma3ForCausalLM");
  j["num_hidden_layers"] = 7;
  j["rope_local_base_freq"] = 10000;
  j["rope_theta"] = 1000000;
  j["rope_scaling"] = nullptr;
  j["sliding_window"] = 512;
  j["sliding_window_pattern"] = 6;
  const ModelConfig c = parse_ok(j);
  using enum LayerType;
  EXPECT_EQ(c.layer_types,
            (std::vector{kSlidingAttention, kSlidingAttention, kSlidingAttention, kSlidingAttention,
                         kSlidingAttention, kFullAttention, kSlidingAttention}));
  EXPECT_EQ(sliding_layers(c).size(), 6u);
  EXPECT_EQ(c.layer_rope_theta(5), 1e6);
  EXPECT_EQ(c.layer_rope_theta(6), 1e4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_EQ(c.query_pre_attn_scalar, 256.0);
  EXPECT_FALSE(c.attn_logit_softcapping);
  EXPECT_FALSE(c.final_logit_softcapping);
  EXPECT_TRUE(c.tie_word_embeddings);
  // Without any rope key: rope_theta 1e6 (full), 1e4 (sliding).
  const ModelConfig d = parse_ok(minimal("Gemma3ForCausalLM"));
  EXPECT_EQ(d.rope_theta, 1e6);
  EXPECT_EQ(d.sliding_rope_theta, 1e4);
  EXPECT_EQ(window_of(d), 4096);
}

// What CausalLM computes for each family, from the fixtures' configs: transformers' scaling
// (query_pre_attn_scalar ** -0.5 or head_dim ** -0.5), window_left = sliding_window - 1 on the
// sliding layers, one rope table per distinct base, the embedding scale rounded to the dtype.
TEST(DecoderFamily, FromTheFixtureConfigs) {
  using model::describe_decoder_family;
  const model::DecoderFamily q =
      describe_decoder_family(parse_ok(oracle_config("qwen3")), DType::kF32);
  EXPECT_TRUE(q.qk_norm);
  EXPECT_FALSE(q.sandwich_norms);
  EXPECT_FALSE(q.qkv_bias);
  EXPECT_EQ(q.norm_weight_offset, 0.0f);
  EXPECT_EQ(q.embedding_scale, 1.0f);
  EXPECT_EQ(q.activation, ops::GatedActivation::kSilu);
  EXPECT_FLOAT_EQ(q.attention_scaling, 0.125f);  // 64 ** -0.5
  EXPECT_EQ(q.attn_logit_softcap, 0.0f);
  EXPECT_EQ(q.final_logit_softcap, 0.0f);
  EXPECT_EQ(q.window_left, (std::vector<int32_t>{-1, -1}));
  ASSERT_EQ(q.ropes.size(), 1u);
  EXPECT_EQ(q.ropes[0].theta, 1e6);

  const ModelConfig g2c = parse_ok(oracle_config("gemma2"));
  const model::DecoderFamily g2 = describe_decoder_family(g2c, DType::kF32);
  EXPECT_FALSE(g2.qk_norm);
  EXPECT_TRUE(g2.sandwich_norms);
  EXPECT_EQ(g2.norm_weight_offset, 1.0f);
  EXPECT_EQ(g2.embedding_scale, static_cast<float>(std::sqrt(128.0)));
  EXPECT_EQ(g2.activation, ops::GatedActivation::kGeluTanh);
  EXPECT_FLOAT_EQ(g2.attention_scaling, static_cast<float>(1 / std::sqrt(48.0)));
  EXPECT_EQ(g2.attn_logit_softcap, 3.0f);
  EXPECT_EQ(g2.final_logit_softcap, 5.0f);
  EXPECT_EQ(g2.window_left, (std::vector<int32_t>{15, -1, 15, -1}));
  EXPECT_EQ(g2.layer_rope, (std::vector<int32_t>{0, 0, 0, 0}));
  // bf16: sqrt(128) = 11.3137... is held as 11.3125.
  EXPECT_EQ(describe_decoder_family(g2c, DType::kBF16).embedding_scale, 11.3125f);

  json j = oracle_config("gemma3");
  j["rope_parameters"]["full_attention"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  const model::DecoderFamily g3 = describe_decoder_family(parse_ok(j), DType::kF32);
  EXPECT_TRUE(g3.qk_norm);
  EXPECT_TRUE(g3.sandwich_norms);
  EXPECT_FLOAT_EQ(g3.attention_scaling, 0.125f);  // query_pre_attn_scalar 64
  EXPECT_EQ(g3.attn_logit_softcap, 0.0f);
  EXPECT_EQ(g3.window_left, (std::vector<int32_t>{15, 15, -1, 15}));
  ASSERT_EQ(g3.ropes.size(), 2u);
  EXPECT_EQ(g3.ropes[0], (model::RopeSpec{.theta = 1e4, .scaled = false}));
  EXPECT_EQ(g3.ropes[1], (model::RopeSpec{.theta = 1e6, .scaled = true}));
  EXPECT_EQ(g3.layer_rope, (std::vector<int32_t>{0, 0, 1, 0}));
}

}  // namespace
}  // namespace kvserve::checkpoint

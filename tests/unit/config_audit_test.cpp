// The config.json audit (checkpoint/config.h): every field of the audit table is exercised with a
// value other than its default and is either accepted with the value reflected in ModelConfig
// (implemented), refused with kUnimplemented naming the field and the value, or accepted with the
// math unchanged (ignored). Sliding windows: per-layer windows as transformers gives them, full
// attention where the window covers the served context, refused at load only by a backend without
// windows. A table entry without a case here, or a case for a field the table lacks, fails.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/model/model_runner.h"
#include "model_test_util.h"

namespace kvserve::checkpoint {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A minimal valid config: architectures and the five sizes (head_dim 256 / 8 = 32); Mistral's
// with "sliding_window": null, as Mistral v0.2 on (MistralConfig's default is 4096).
json minimal(const std::string& architecture) {
  json j = {
      {"architectures", {architecture}}, {"vocab_size", 1000},     {"hidden_size", 256},
      {"intermediate_size", 512},        {"num_hidden_layers", 2}, {"num_attention_heads", 8}};
  if (architecture == "MistralForCausalLM") j["sliding_window"] = nullptr;
  // Gemma's default window (4096) then covers the whole context.
  if (architecture.starts_with("Gemma")) j["max_position_embeddings"] = 4096;
  return j;
}

enum class Expect {
  kAccepted,  // parses; `check` holds on the ModelConfig
  kRefused,   // kUnimplemented at parse naming the field and `value_text`
  kSameMath,  // parses to the same ModelConfig as without the patch
};

struct Case {
  const char* field;
  const char* architecture;
  json patch;  // its keys set on minimal(architecture)
  Expect expect;
  std::function<bool(const ModelConfig&)> check = nullptr;  // kAccepted only
  const char* value_text = "";                              // kRefused: in the message
  const char* erase = nullptr;  // a key of minimal(architecture) to remove
};

bool same_math(const ModelConfig& a, const ModelConfig& b) {
  return a.architecture == b.architecture && a.vocab_size == b.vocab_size &&
         a.hidden_size == b.hidden_size && a.intermediate_size == b.intermediate_size &&
         a.num_hidden_layers == b.num_hidden_layers &&
         a.num_attention_heads == b.num_attention_heads &&
         a.num_key_value_heads == b.num_key_value_heads && a.head_dim == b.head_dim &&
         a.max_position_embeddings == b.max_position_embeddings && a.rope_theta == b.rope_theta &&
         a.rope_scaling.rope_type == b.rope_scaling.rope_type &&
         a.rope_scaling.factor == b.rope_scaling.factor && a.rms_norm_eps == b.rms_norm_eps &&
         a.tie_word_embeddings == b.tie_word_embeddings && a.attention_bias == b.attention_bias &&
         a.hidden_act == b.hidden_act && a.torch_dtype == b.torch_dtype &&
         a.layer_window_left == b.layer_window_left && a.bos_token_id == b.bos_token_id &&
         a.eos_token_ids == b.eos_token_ids;
}

const json kLlama3Rope = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};

std::vector<Case> cases() {
  const char* llama = "LlamaForCausalLM";
  const char* qwen2 = "Qwen2ForCausalLM";
  const char* mistral = "MistralForCausalLM";
  const char* qwen3 = "Qwen3ForCausalLM";
  const char* gemma2 = "Gemma2ForCausalLM";
  const char* gemma3 = "Gemma3ForCausalLM";
  using E = Expect;
  using C = const ModelConfig&;
  return {
      // Implemented: the value reaches ModelConfig.
      {"architectures",
       llama,
       {{"architectures", {qwen2}}},
       E::kAccepted,
       [](C c) { return c.architecture == Architecture::kQwen2; }},
      {"architectures",
       llama,
       {{"architectures", {"Gemma3ForConditionalGeneration"}}},
       E::kRefused,
       nullptr,
       "Gemma3ForConditionalGeneration"},
      {"architectures",
       llama,
       {{"architectures", {gemma3}}, {"sliding_window", nullptr}},
       E::kAccepted,
       [](C c) { return c.architecture == Architecture::kGemma3 && c.qk_norm; }},
      {"model_type",
       mistral,
       {{"model_type", "mistral"}},
       E::kAccepted,
       [](C c) { return c.model_type == "mistral"; }},
      {"vocab_size",
       llama,
       {{"vocab_size", 1234}},
       E::kAccepted,
       [](C c) { return c.vocab_size == 1234; }},
      {"hidden_size",
       llama,
       {{"hidden_size", 512}},
       E::kAccepted,
       [](C c) { return c.hidden_size == 512 && c.head_dim == 64; }},
      {"intermediate_size",
       llama,
       {{"intermediate_size", 1024}},
       E::kAccepted,
       [](C c) { return c.intermediate_size == 1024; }},
      {"num_hidden_layers",
       llama,
       {{"num_hidden_layers", 3}},
       E::kAccepted,
       [](C c) { return c.num_hidden_layers == 3; }},
      {"num_attention_heads",
       llama,
       {{"num_attention_heads", 4}},
       E::kAccepted,
       [](C c) { return c.num_attention_heads == 4 && c.head_dim == 64; }},
      {"num_key_value_heads",
       llama,
       {{"num_key_value_heads", 2}},
       E::kAccepted,
       [](C c) { return c.num_key_value_heads == 2; }},
      {"head_dim", llama, {{"head_dim", 64}}, E::kAccepted, [](C c) { return c.head_dim == 64; }},
      {"max_position_embeddings",
       llama,
       {{"max_position_embeddings", 4096}},
       E::kAccepted,
       [](C c) { return c.max_position_embeddings == 4096; }},
      {"tie_word_embeddings",
       llama,
       {{"tie_word_embeddings", true}},
       E::kAccepted,
       [](C c) { return c.tie_word_embeddings; }},
      {"rms_norm_eps",
       llama,
       {{"rms_norm_eps", 1e-5}},
       E::kAccepted,
       [](C c) { return c.rms_norm_eps == 1e-5; }},
      {"torch_dtype",
       llama,
       {{"torch_dtype", "float16"}},
       E::kAccepted,
       [](C c) { return c.torch_dtype == DType::kF16; }},
      {"bos_token_id",
       llama,
       {{"bos_token_id", 5}},
       E::kAccepted,
       [](C c) { return c.bos_token_id == 5; }},
      {"eos_token_id",
       llama,
       {{"eos_token_id", {6, 7}}},
       E::kAccepted,
       [](C c) {
         return c.eos_token_ids == std::vector<int32_t>{6, 7};
       }},
      {"rope_theta",
       llama,
       {{"rope_theta", 500000.0}},
       E::kAccepted,
       [](C c) { return c.rope_theta == 500000.0; }},
      {"rope_scaling",
       llama,
       {{"rope_scaling", kLlama3Rope}},
       E::kAccepted,
       [](C c) { return c.rope_scaling.rope_type == "llama3" && c.rope_scaling.factor == 8.0; }},
      {"rope_scaling",
       llama,
       {{"rope_scaling",
         {{"rope_type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64}}}},
       E::kAccepted,
       [](C c) { return c.rope_scaling.rope_type == "yarn" && c.rope_scaling.factor == 4.0; }},
      {"rope_scaling",
       llama,
       {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 2.0}}}},
       E::kAccepted,
       [](C c) { return c.rope_scaling.rope_type == "linear" && c.rope_scaling.factor == 2.0; }},
      {"rope_scaling",
       llama,
       {{"rope_scaling", {{"rope_type", "su"}, {"factor", 4.0}}}},
       E::kRefused,
       nullptr,
       "su"},
      {"rope_parameters",
       llama,
       {{"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e6}}}},
       E::kAccepted,
       [](C c) { return c.rope_theta == 1e6; }},
      {"rope_parameters",
       llama,
       {{"rope_parameters", {{"rope_type", "dynamic"}, {"rope_theta", 1e6}, {"factor", 2.0}}}},
       E::kAccepted,
       [](C c) { return c.rope_scaling.rope_type == "dynamic" && c.rope_scaling.factor == 2.0; }},
      {"rope_parameters",
       llama,
       {{"rope_parameters", {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}}}},
       E::kRefused,
       nullptr,
       "0.5"},
      {"hidden_act",
       llama,
       {{"hidden_act", "silu"}},
       E::kAccepted,
       [](C c) { return c.hidden_act == "silu"; }},
      {"hidden_act",
       llama,
       {{"hidden_act", "gelu_pytorch_tanh"}},
       E::kRefused,
       nullptr,
       "gelu_pytorch_tanh"},
      {"attention_bias",
       qwen2,
       {{"attention_bias", false}},
       E::kAccepted,
       [](C c) { return c.attention_bias; }},  // Qwen2Attention ignores the key
      {"attention_bias",
       llama,
       {{"attention_bias", false}},
       E::kAccepted,
       [](C c) { return !c.attention_bias; }},
      {"attention_bias", llama, {{"attention_bias", true}}, E::kRefused, nullptr, "true"},
      {"attention_bias", mistral, {{"attention_bias", true}}, E::kRefused, nullptr, "true"},

      // Refused when they change the math; accepted with their neutral values.
      {"partial_rotary_factor",
       llama,
       {{"partial_rotary_factor", 0.5}},
       E::kRefused,
       nullptr,
       "0.5"},
      {"partial_rotary_factor", llama, {{"partial_rotary_factor", 1.0}}, E::kSameMath},
      // Sliding windows: ModelConfig::layer_window_left is sliding_window - 1 on the layers
      // transformers slides, -1 elsewhere (two layers here).
      {"sliding_window",
       mistral,
       {{"sliding_window", 4096}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{4095, 4095};
       }},
      {"sliding_window", mistral, json::object(), E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{4095, 4095};
       },
       "", "sliding_window"},  // MistralConfig's default when the key is absent
      {"sliding_window",
       mistral,
       {{"sliding_window", nullptr}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{-1, -1};
       }},
      {"sliding_window", llama, {{"sliding_window", 16}}, E::kSameMath},  // LlamaAttention
      {"use_sliding_window",
       qwen2,
       {{"use_sliding_window", false}, {"sliding_window", 16}, {"max_window_layers", 0}},
       E::kSameMath},
      {"use_sliding_window",
       qwen2,
       {{"use_sliding_window", true}, {"sliding_window", 16}, {"max_window_layers", 0}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{15, 15};
       }},
      {"use_sliding_window",
       qwen2,  // Qwen2Config's sliding_window is 4096 when the key is absent
       {{"use_sliding_window", true}, {"max_window_layers", 0}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{4095, 4095};
       }},
      {"use_sliding_window",
       mistral,
       {{"use_sliding_window", false}, {"sliding_window", 16}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{15, 15};
       }},  // MistralConfig does not read it
      {"max_window_layers",
       qwen2,
       {{"use_sliding_window", true}, {"sliding_window", 16}, {"max_window_layers", 1}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{-1, 15};
       }},
      {"max_window_layers",
       qwen2,  // Qwen2Config's default 28 >= 2 layers: no layer slides
       {{"use_sliding_window", true}, {"sliding_window", 16}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{-1, -1};
       }},
      {"layer_types", llama, {{"layer_types", {"full_attention", "full_attention"}}}, E::kSameMath},
      {"layer_types",
       llama,
       {{"layer_types", {"full_attention", "sliding_attention"}}},
       E::kRefused,
       nullptr,
       "layer_types[1]"},
      {"layer_types",
       qwen2,
       {{"layer_types", {"sliding_attention", "full_attention"}}},
       E::kRefused,
       nullptr,
       "sliding_attention"},  // no use_sliding_window: no window
      {"layer_types",
       qwen2,
       {{"use_sliding_window", true},
        {"sliding_window", 16},
        {"max_window_layers", 0},
        {"layer_types", {"full_attention", "full_attention"}}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{-1, -1};
       }},  // it wins
      {"layer_types",
       qwen2,  // Gemma-style interleaving, against max_window_layers
       {{"use_sliding_window", true},
        {"sliding_window", 16},
        {"max_window_layers", 1},
        {"layer_types", {"sliding_attention", "full_attention"}}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{15, -1};
       }},
      {"layer_types",
       mistral,  // MistralConfig does not read it: every layer slides
       {{"sliding_window", 16}, {"layer_types", {"full_attention", "sliding_attention"}}},
       E::kAccepted,
       [](C c) {
         return c.layer_window_left == std::vector<int32_t>{15, 15};
       }},
      {"layer_types",
       mistral,
       {{"layer_types", {"chunked_attention", "full_attention"}}},
       E::kRefused,
       nullptr,
       "chunked_attention"},
      {"attn_logit_softcapping",
       llama,
       {{"attn_logit_softcapping", 50.0}},
       E::kRefused,
       nullptr,
       "50"},
      {"attn_logit_softcapping", llama, {{"attn_logit_softcapping", nullptr}}, E::kSameMath},
      {"final_logit_softcapping",
       qwen2,
       {{"final_logit_softcapping", 30.0}},
       E::kRefused,
       nullptr,
       "30"},
      {"final_logit_softcapping", qwen2, {{"final_logit_softcapping", nullptr}}, E::kSameMath},
      {"query_pre_attn_scalar",
       llama,
       {{"query_pre_attn_scalar", 256}},
       E::kRefused,
       nullptr,
       "256"},
      {"query_pre_attn_scalar", llama, {{"query_pre_attn_scalar", 32}}, E::kSameMath},
      {"qk_norm", qwen2, {{"qk_norm", true}}, E::kRefused, nullptr, "true"},
      {"qk_norm", qwen2, {{"qk_norm", false}}, E::kSameMath},
      {"use_qk_norm", llama, {{"use_qk_norm", true}}, E::kRefused, nullptr, "true"},
      {"use_qk_norm", llama, {{"use_qk_norm", false}}, E::kSameMath},
      {"qk_layernorm", llama, {{"qk_layernorm", true}}, E::kRefused, nullptr, "true"},
      {"qk_layernorm", llama, {{"qk_layernorm", false}}, E::kSameMath},
      {"attention_multiplier",
       llama,
       {{"attention_multiplier", 0.015625}},
       E::kRefused,
       nullptr,
       "0.015625"},
      {"attention_multiplier", llama, {{"attention_multiplier", nullptr}}, E::kSameMath},
      {"mlp_bias", llama, {{"mlp_bias", true}}, E::kRefused, nullptr, "true"},
      {"mlp_bias", qwen2, {{"mlp_bias", true}}, E::kRefused, nullptr, "true"},
      {"mlp_bias", mistral, {{"mlp_bias", false}}, E::kSameMath},
      {"embedding_multiplier", llama, {{"embedding_multiplier", 12.0}}, E::kRefused, nullptr, "12"},
      {"embedding_multiplier", llama, {{"embedding_multiplier", 1.0}}, E::kSameMath},
      {"residual_multiplier", llama, {{"residual_multiplier", 0.22}}, E::kRefused, nullptr, "0.22"},
      {"residual_multiplier", llama, {{"residual_multiplier", 1}}, E::kSameMath},
      {"logits_scaling", llama, {{"logits_scaling", 8.0}}, E::kRefused, nullptr, "8"},
      {"logits_scaling", llama, {{"logits_scaling", 1.0}}, E::kSameMath},
      {"logit_scale", llama, {{"logit_scale", 0.0625}}, E::kRefused, nullptr, "0.0625"},
      {"logit_scale", llama, {{"logit_scale", 1.0}}, E::kSameMath},
      {"quantization_config",
       llama,
       {{"quantization_config", {{"quant_method", "fp8"}, {"activation_scheme", "dynamic"}}}},
       E::kRefused,
       nullptr,
       "fp8"},
      {"quantization_config", llama, {{"quantization_config", nullptr}}, E::kSameMath},

      // The Qwen3 / Gemma fields.
      {"hidden_activation",
       gemma2,
       {{"hidden_activation", "gelu_pytorch_tanh"}, {"hidden_act", "silu"}},
       E::kAccepted,
       [](C c) { return c.hidden_act == "gelu_pytorch_tanh"; }},  // Gemma reads only this key
      {"hidden_activation", gemma2, {{"hidden_activation", "gelu"}}, E::kRefused, nullptr, "gelu"},
      {"hidden_activation", llama, {{"hidden_activation", "gelu"}}, E::kSameMath},  // not read
      {"rope_local_base_freq",
       gemma3,
       {{"rope_local_base_freq", 20000.0}},
       E::kAccepted,
       [](C c) { return c.sliding_rope_theta == 20000.0 && c.rope_theta == 1e6; }},
      {"rope_local_base_freq", llama, {{"rope_local_base_freq", 20000.0}}, E::kSameMath},
      {"sliding_window_pattern",
       gemma3,
       {{"sliding_window_pattern", 2}},
       E::kAccepted,
       [](C c) {
         return c.layer_types ==
                std::vector{LayerType::kSlidingAttention, LayerType::kFullAttention};
       }},
      {"use_bidirectional_attention",
       gemma3,
       {{"use_bidirectional_attention", true}},
       E::kRefused,
       nullptr,
       "true"},
      {"use_bidirectional_attention",
       gemma2,
       {{"use_bidirectional_attention", false}},
       E::kSameMath},
      {"attn_logit_softcapping",
       gemma2,
       {{"attn_logit_softcapping", 20.0}},
       E::kAccepted,
       [](C c) { return c.attn_logit_softcapping == 20.0; }},
      {"final_logit_softcapping",
       gemma3,
       {{"final_logit_softcapping", 20.0}},
       E::kAccepted,
       [](C c) { return c.final_logit_softcapping == 20.0; }},
      {"query_pre_attn_scalar",
       gemma2,
       {{"query_pre_attn_scalar", 144}},
       E::kAccepted,
       [](C c) { return c.query_pre_attn_scalar == 144.0; }},
      {"attention_bias", qwen3, {{"attention_bias", true}}, E::kRefused, nullptr, "true"},
      {"attention_bias", gemma2, {{"attention_bias", true}}, E::kRefused, nullptr, "true"},
      {"cache_implementation", gemma2, {{"cache_implementation", "hybrid"}}, E::kSameMath},

      // Ignored: the math does not change.
      {"pretraining_tp", llama, {{"pretraining_tp", 2}}, E::kSameMath},
      {"attention_dropout", qwen2, {{"attention_dropout", 0.1}}, E::kSameMath},
      {"initializer_range", mistral, {{"initializer_range", 0.5}}, E::kSameMath},
      {"use_cache", llama, {{"use_cache", false}}, E::kSameMath},
      {"pad_token_id", llama, {{"pad_token_id", 0}}, E::kSameMath},
      {"transformers_version", llama, {{"transformers_version", "9.99.0"}}, E::kSameMath},
      {"_name_or_path", llama, {{"_name_or_path", "/somewhere"}}, E::kSameMath},
  };
}

std::string describe(const Case& c) {
  return fmt::format("{} on {}: {}", c.field, c.architecture, c.patch.dump());
}

void expect_names(const Status& s, const Case& c) {
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented) << describe(c) << ": " << s.to_string();
  for (const std::string& part : {std::string(c.field), std::string(c.value_text)}) {
    EXPECT_NE(s.message().find(part), std::string::npos)
        << describe(c) << ": '" << part << "' not in: " << s.message();
  }
}

TEST(ConfigAudit, EveryCaseIsHandledAsTheTableSays) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(describe(c));
    const json base = minimal(c.architecture);
    json j = base;
    if (c.erase != nullptr) j.erase(c.erase);
    for (auto it = c.patch.begin(); it != c.patch.end(); ++it)
      j[it.key()] = it.value();
    const Result<ModelConfig> r = parse_model_config(j.dump(), "config.json");
    if (c.expect == Expect::kRefused) {
      ASSERT_FALSE(r.is_ok());
      expect_names(r.status(), c);
      continue;
    }
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    const ModelConfig& cfg = r.value();
    switch (c.expect) {
      case Expect::kAccepted:
        EXPECT_TRUE(c.check(cfg));
        break;
      case Expect::kSameMath: {
        const Result<ModelConfig> plain = parse_model_config(base.dump(), "config.json");
        ASSERT_TRUE(plain.is_ok()) << plain.status().to_string();
        EXPECT_TRUE(same_math(cfg, plain.value()));
        break;
      }
      case Expect::kRefused:
        break;
    }
  }
}

// The table and the cases agree: every implemented field has an accepted case, every refused
// field a refused case and a case showing its neutral value accepted, every ignored field a case
// showing the math unchanged; and every case's field is in the table.
TEST(ConfigAudit, TheTableAndTheCasesCoverEachOther) {
  std::set<std::string> table;
  for (const ConfigFieldAudit& a : config_field_audit()) {
    SCOPED_TRACE(std::string(a.field));
    EXPECT_TRUE(table.insert(std::string(a.field)).second) << "listed twice";
    EXPECT_FALSE(a.note.empty());
    EXPECT_EQ(a.handling == FieldHandling::kIgnored,
              a.rule == RefusalRule::kNone && a.handling != FieldHandling::kImplemented)
        << field_handling_name(a.handling);
    bool accepted = false;
    bool refused = false;
    bool same = false;
    for (const Case& c : cases()) {
      if (c.field != a.field) continue;
      accepted |= c.expect == Expect::kAccepted || c.expect == Expect::kSameMath;
      refused |= c.expect == Expect::kRefused;
      same |= c.expect == Expect::kSameMath;
    }
    switch (a.handling) {
      case FieldHandling::kImplemented:
        EXPECT_TRUE(accepted) << "an implemented field needs an accepted case";
        break;
      case FieldHandling::kRefused:
        EXPECT_TRUE(refused) << "a refused field needs a refused case";
        EXPECT_TRUE(accepted) << "a refused field needs its neutral value accepted";
        break;
      case FieldHandling::kIgnored:
        EXPECT_TRUE(same) << "an ignored field needs a case with the math unchanged";
        break;
    }
  }
  for (const Case& c : cases()) {
    EXPECT_TRUE(table.contains(c.field)) << c.field << " has a case but no audit entry";
  }
}

// Where the context length is known (ModelRunner::create), a window that covers it becomes full
// attention; a smaller one stays, and only a backend with windows serves it.
class SlidingWindowAtLoad : public ::testing::Test {
 protected:
  void SetUp() override {
    makemodel::MakeModelOptions o;
    o.preset = "tiny";  // Llama, 2 layers, max_position_embeddings 2048
    o.output = dir_.path() / "m";
    ASSERT_TRUE(makemodel::make_model(o).is_ok());
  }

  // The tiny checkpoint relabelled MistralForCausalLM (the same tensors) with `window`.
  void set_mistral_window(const json& window) {
    const fs::path file = dir_.path() / "m" / "config.json";
    json c = json::parse(model::testing::read_file(file));
    c["architectures"] = {"MistralForCausalLM"};
    c["model_type"] = "mistral";
    c["sliding_window"] = window;
    model::testing::write_file(file, c.dump(2));
  }

  static model::ModelRunnerOptions options(int64_t context_length) {
    model::ModelRunnerOptions o;
    o.max_total_tokens = 1024;
    o.context_length = context_length;
    return o;
  }

  Result<std::unique_ptr<model::ModelRunner>> load(int64_t context_length = 0) {
    return model::ModelRunner::create(dir_.path() / "m", options(context_length));
  }

  model::testing::TempDir dir_;
};

TEST_F(SlidingWindowAtLoad, AWindowShorterThanTheContextIsServedWhereABackendHasWindows) {
  set_mistral_window(512);
  for (const std::string backend : {"cpu", "native"}) {
    model::ModelRunnerOptions o = options(0);
    o.attention_backend = attention::parse_attention_backend(backend).value();
    auto r = model::ModelRunner::create(dir_.path() / "m", o);
    ASSERT_TRUE(r.is_ok()) << backend << ": " << r.status().to_string();
    EXPECT_EQ((*r)->context_len(), 2048);
    EXPECT_EQ((*r)->config().layer_window_left, (std::vector<int32_t>{511, 511}));
  }
  // What a backend is asked, and every backend of the table answers by its sliding_window flag
  // (the CUDA rows as a CUDA device would ask).
  const Result<ModelConfig> config = load_model_config(dir_.path() / "m");
  ASSERT_TRUE(config.is_ok());
  for (const attention::AttentionCapabilities& c : attention::attention_backend_table()) {
    SCOPED_TRACE(std::string(c.name));
    model::ModelRunnerOptions o = options(0);
    o.device = Device{c.device, 0};
    attention::AttentionRequirements need = model::ModelRunner::attention_requirements(*config, o);
    EXPECT_EQ(need.sliding_window_field,
              "sliding_window 512 (smaller than the context length 2048)");
    // The tiny model's head_dim 16 aside (not every backend has it): only the window differs.
    need.head_dim = 128;
    need.kv_dtype = c.kv_dtypes.front();
    attention::AttentionRequirements full = need;
    full.sliding_window_field.clear();
    ASSERT_TRUE(attention::check_attention_support(c.kind, full).is_ok());
    const Status s = attention::check_attention_support(c.kind, need);
    EXPECT_EQ(s.is_ok(), c.sliding_window) << s.to_string();
    if (!s.is_ok()) {
      EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
      EXPECT_NE(s.message().find("config.json: sliding_window 512"), std::string::npos)
          << s.message();
    }
    // A served context within the window asks for nothing.
    EXPECT_TRUE(model::ModelRunner::attention_requirements(*config, options(512))
                    .sliding_window_field.empty());
  }
  // Within the window: the same math as full attention, and full attention it is.
  auto r = load(512);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->context_len(), 512);
  EXPECT_EQ((*r)->config().layer_window_left, (std::vector<int32_t>{-1, -1}));
}

TEST_F(SlidingWindowAtLoad, AWindowAtLeastTheContextIsFullAttention) {
  set_mistral_window(2048);
  auto r = load();
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->context_len(), 2048);
  EXPECT_EQ((*r)->config().layer_window_left, (std::vector<int32_t>{-1, -1}));
  r = load(4096);  // --context-length beyond max_position_embeddings: now the window matters
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->config().layer_window_left, (std::vector<int32_t>{2047, 2047}));

  set_mistral_window(nullptr);  // Mistral v0.2 on: no window
  r = load(4096);
  ASSERT_TRUE(r.is_ok()) << r.status().to_string();
  EXPECT_EQ((*r)->config().layer_window_left, (std::vector<int32_t>{-1, -1}));
}

TEST(SlidingWindow, ServedWindowsAndSlidingLayers) {
  ModelConfig c;
  c.num_hidden_layers = 4;
  c.layer_window_left = {-1, 15, -1, 4095};
  EXPECT_EQ(sliding_layers(c), (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(served_window_left(c, 4097), (std::vector<int32_t>{-1, 15, -1, 4095}));
  EXPECT_EQ(served_window_left(c, 4096), (std::vector<int32_t>{-1, 15, -1, -1}));  // covers it
  EXPECT_EQ(served_window_left(c, 17), (std::vector<int32_t>{-1, 15, -1, -1}));
  EXPECT_EQ(served_window_left(c, 16), (std::vector<int32_t>{-1, -1, -1, -1}));
}

}  // namespace
}  // namespace kvserve::checkpoint

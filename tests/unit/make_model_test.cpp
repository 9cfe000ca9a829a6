// kvserve make-model: the tiny preset end to end (files, config, tensors, determinism, value
// statistics), the shape presets' configs and parameter counts, sharding, errors and the command
// line. The tokenizer files are tested in make_model_tokenizer_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "kvserve/checkpoint/config.h"
#include "kvserve/checkpoint/weights.h"
#include "kvserve/makemodel/checkpoint_layout.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/makemodel/presets.h"
#include "kvserve/makemodel/random_weights.h"
#include "model_test_util.h"
#include "run_kvserve.h"

namespace kvserve::makemodel {
namespace {

namespace fs = std::filesystem;
using model::testing::fixtures_dir;
using model::testing::read_file;
using model::testing::TempDir;
using model::testing::write_file;
using nlohmann::json;

MakeModelOptions tiny_options(const fs::path& out, uint64_t seed = 1) {
  MakeModelOptions o;
  o.preset = "tiny";
  o.output = out;
  o.seed = seed;
  return o;
}

MakeModelReport make_ok(const MakeModelOptions& o) {
  const Result<MakeModelReport> r = make_model(o);
  EXPECT_TRUE(r.is_ok()) << r.status().to_string();
  return r.is_ok() ? r.value() : MakeModelReport{};
}

uint64_t directory_bytes(const fs::path& dir) {
  uint64_t total = 0;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir)) {
    if (e.is_regular_file()) total += e.file_size();
  }
  return total;
}

std::vector<float> as_floats(const checkpoint::WeightView& v) {
  std::vector<float> out(static_cast<size_t>(v.numel()));
  convert_elements(v.data, v.dtype, out.data(), DType::kF32, out.size());
  return out;
}

// The tensors of a Llama-architecture checkpoint with the tiny shapes.
std::map<std::string, std::vector<int64_t>> tiny_expected_shapes() {
  std::map<std::string, std::vector<int64_t>> m;
  m["model.embed_tokens.weight"] = {4355, 64};
  m["lm_head.weight"] = {4355, 64};
  m["model.norm.weight"] = {64};
  for (int i = 0; i < 2; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    m[p + "self_attn.q_proj.weight"] = {64, 64};
    m[p + "self_attn.k_proj.weight"] = {32, 64};
    m[p + "self_attn.v_proj.weight"] = {32, 64};
    m[p + "self_attn.o_proj.weight"] = {64, 64};
    m[p + "mlp.gate_proj.weight"] = {176, 64};
    m[p + "mlp.up_proj.weight"] = {176, 64};
    m[p + "mlp.down_proj.weight"] = {64, 176};
    m[p + "input_layernorm.weight"] = {64};
    m[p + "post_attention_layernorm.weight"] = {64};
  }
  return m;
}

TEST(MakeModel, TinyWritesAStandardCheckpointUnder5MB) {
  TempDir tmp;
  const fs::path out = tmp / "tiny";
  const MakeModelReport r = make_ok(tiny_options(out));
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::is_regular_file(out / f)) << f;
  }
  EXPECT_FALSE(fs::exists(out / "model.safetensors.index.json"));
  EXPECT_EQ(r.files.size(), 5u);
  EXPECT_EQ(r.shards, 1);
  EXPECT_EQ(r.tensors, 21);
  EXPECT_LT(directory_bytes(out), 5u << 20);
}

TEST(MakeModel, TinyConfigParsesBackToThePreset) {
  TempDir tmp;
  make_ok(tiny_options(tmp.path()));
  const Result<checkpoint::ModelConfig> c = checkpoint::load_model_config(tmp.path());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture, checkpoint::Architecture::kLlama);
  EXPECT_EQ(c->architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c->hidden_size, 64);
  EXPECT_EQ(c->intermediate_size, 176);
  EXPECT_EQ(c->num_hidden_layers, 2);
  EXPECT_EQ(c->num_attention_heads, 4);
  EXPECT_EQ(c->num_key_value_heads, 2);
  EXPECT_EQ(c->head_dim, 16);
  EXPECT_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.rope_type, "default");
  EXPECT_EQ(c->rms_norm_eps, 1e-6);
  EXPECT_FALSE(c->tie_word_embeddings);
  EXPECT_FALSE(c->attention_bias);
  EXPECT_EQ(c->vocab_size, 4355);  // 4352 BPE tokens + 3 special tokens
  EXPECT_EQ(c->max_position_embeddings, 2048);
  EXPECT_EQ(c->torch_dtype, DType::kBF16);
  EXPECT_EQ(c->bos_token_id, 4352);                         // <|endoftext|>
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{4354});  // <|im_end|>

  const Result<checkpoint::GenerationConfig> g = checkpoint::load_generation_config(tmp.path());
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_EQ(g->eos_token_ids, (std::vector<int32_t>{4354, 4352}));  // <|im_end|>, <|endoftext|>
  EXPECT_EQ(g->pad_token_id, 4352);
  EXPECT_FALSE(g->do_sample);
}

TEST(MakeModel, TinyTensorsHaveHfNamesShapesAndDtype) {
  TempDir tmp;
  make_ok(tiny_options(tmp.path()));
  const auto store = checkpoint::WeightStore::open(tmp.path());
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  const auto expected = tiny_expected_shapes();
  std::vector<std::string> expected_names;
  for (const auto& [name, shape] : expected)
    expected_names.push_back(name);
  EXPECT_EQ((*store)->names(), expected_names);
  int64_t params = 0;
  for (const auto& [name, shape] : expected) {
    const Result<checkpoint::WeightView> v = (*store)->get(name);
    ASSERT_TRUE(v.is_ok()) << v.status().to_string();
    EXPECT_EQ(v->shape, shape) << name;
    EXPECT_EQ(v->dtype, DType::kBF16) << name;
    params += v->numel();
  }
  EXPECT_EQ((*store)->total_bytes(), static_cast<size_t>(params) * 2);
}

TEST(MakeModel, DeterministicForASeedDifferentForAnother) {
  TempDir tmp;
  make_ok(tiny_options(tmp / "a", 7));
  make_ok(tiny_options(tmp / "b", 7));
  make_ok(tiny_options(tmp / "c", 8));
  for (const char* f : {"config.json", "generation_config.json", "tokenizer.json",
                        "tokenizer_config.json", "model.safetensors"}) {
    EXPECT_EQ(read_file(tmp / "a" / f), read_file(tmp / "b" / f)) << f;
  }
  EXPECT_NE(read_file(tmp / "a" / "model.safetensors"), read_file(tmp / "c" / "model.safetensors"));
  EXPECT_EQ(read_file(tmp / "a" / "tokenizer.json"), read_file(tmp / "c" / "tokenizer.json"));

  const auto a = checkpoint::WeightStore::open(tmp / "a");
  const auto c = checkpoint::WeightStore::open(tmp / "c");
  ASSERT_TRUE(a.is_ok() && c.is_ok());
  for (const std::string& name : (*a)->names()) {
    const checkpoint::WeightView va = *(*a)->get(name);
    const checkpoint::WeightView vc = *(*c)->get(name);
    const bool same = std::memcmp(va.data, vc.data, va.bytes) == 0;
    EXPECT_EQ(same, name.ends_with("norm.weight")) << name;  // only the all-ones norms agree
  }
  // Two tensors of one checkpoint differ too (each has its own stream).
  const checkpoint::WeightView q = *(*a)->get("model.layers.0.self_attn.q_proj.weight");
  const checkpoint::WeightView o = *(*a)->get("model.layers.0.self_attn.o_proj.weight");
  EXPECT_NE(std::memcmp(q.data, o.data, q.bytes), 0);
}

TEST(MakeModel, NormWeightsAreExactlyOneAndMatricesAreNormal002) {
  for (const DType dtype : {DType::kBF16, DType::kF16, DType::kF32}) {
    SCOPED_TRACE(dtype_name(dtype));
    TempDir tmp;
    MakeModelOptions o = tiny_options(tmp.path(), 3);
    o.dtype = dtype;
    make_ok(o);
    const auto store = checkpoint::WeightStore::open(tmp.path());
    ASSERT_TRUE(store.is_ok());
    for (const std::string& name : (*store)->names()) {
      const checkpoint::WeightView v = *(*store)->get(name);
      EXPECT_EQ(v.dtype, dtype);
      if (!name.ends_with("norm.weight")) continue;
      for (const float x : as_floats(v))
        ASSERT_EQ(x, 1.0f) << name;
    }
    // 4355 x 64 = 278720 samples: the std estimate is within ~0.3% (1 sigma) of 0.02.
    const std::vector<float> e = as_floats(*(*store)->get("model.embed_tokens.weight"));
    double sum = 0, sq = 0;
    float max_abs = 0;
    for (const float x : e) {
      sum += x;
      sq += double{x} * x;
      max_abs = std::max(max_abs, std::abs(x));
    }
    const double mean = sum / e.size();
    const double stddev = std::sqrt(sq / e.size() - mean * mean);
    EXPECT_NEAR(mean, 0.0, 2e-4);
    EXPECT_NEAR(stddev, 0.02, 0.02 * 0.02);
    EXPECT_GT(max_abs, 0.02f * 4);  // real tails, not a bounded approximation
    EXPECT_LT(max_abs, 0.02f * 7);
    // About 68.3% within one sigma.
    size_t within = 0;
    for (const float x : e)
      within += std::abs(x) < 0.02f;
    EXPECT_NEAR(static_cast<double>(within) / e.size(), 0.6827, 0.005);
  }
}

TEST(MakeModel, ShardsWithAnIndexAboveTheShardSize) {
  TempDir tmp;
  MakeModelOptions o = tiny_options(tmp.path());
  o.max_shard_bytes = 300'000;
  const MakeModelReport r = make_ok(o);
  // The 557 KB embeddings are over the limit: each goes alone into a shard the moment it is met,
  // while the layers (185 KB) collect in the open shard, which closes last.
  EXPECT_EQ(r.shards, 3);
  EXPECT_FALSE(fs::exists(tmp / "model.safetensors"));
  ASSERT_TRUE(fs::exists(tmp / "model.safetensors.index.json"));
  const json index = json::parse(read_file(tmp / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), r.weight_bytes);
  EXPECT_EQ(index["weight_map"].size(), 21u);
  EXPECT_EQ(index["weight_map"]["model.embed_tokens.weight"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["lm_head.weight"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.norm.weight"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.layers.0.mlp.up_proj.weight"],
            "model-00003-of-00003.safetensors");
  const auto store = checkpoint::WeightStore::open(tmp.path());
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  EXPECT_EQ((*store)->names().size(), 21u);

  // The same weights as the single-file checkpoint of the same seed.
  TempDir single;
  make_ok(tiny_options(single.path()));
  const auto one = checkpoint::WeightStore::open(single.path());
  ASSERT_TRUE(one.is_ok());
  for (const std::string& name : (*one)->names()) {
    const checkpoint::WeightView a = *(*one)->get(name);
    const checkpoint::WeightView b = *(*store)->get(name);
    ASSERT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(std::memcmp(a.data, b.data, a.bytes), 0) << name;
  }

  // --force over the sharded directory: the stale shards and index go.
  o.max_shard_bytes = 5'000'000'000;
  o.force = true;
  make_ok(o);
  EXPECT_TRUE(fs::exists(tmp / "model.safetensors"));
  EXPECT_FALSE(fs::exists(tmp / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(tmp / "model-00001-of-00003.safetensors"));
}

TEST(MakeModel, PlanShardsFollowsSavePretrained) {
  std::vector<CheckpointTensor> t;
  for (const int64_t n : {40, 40, 100, 30, 30, 30}) {
    t.push_back({checkpoint::TensorSpec{"t" + std::to_string(t.size()), DType::kU8, {n}},
                 TensorInit::kNormal});
  }
  const std::vector<Shard> s = plan_shards(t, 90);
  // [t0 t1] (80), t2 alone (over the limit, emitted at once), [t3 t4 t5] (90).
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].tensors.size(), 1u);  // t2 was emitted before the open shard closed
  EXPECT_EQ(s[0].tensors[0].spec.name, "t2");
  EXPECT_EQ(s[1].bytes, 80u);
  EXPECT_EQ(s[2].bytes, 90u);
  EXPECT_EQ(s[2].file, "model-00003-of-00003.safetensors");
  EXPECT_EQ(plan_shards(t, 1000).size(), 1u);
  EXPECT_EQ(plan_shards(t, 1000)[0].file, "model.safetensors");
}

TEST(MakeModel, ShapePresetsHaveTheRealModelsConfigsAndParameterCounts) {
  struct Expect {
    const char* preset;
    const char* real_config;  // fixture with the real model's config.json
    int64_t parameters;       // published parameter counts
    size_t tensors;
  };
  const Expect cases[] = {
      {"qwen2.5-0.5b-shape", "qwen2.5-0.5b-instruct", 494'032'768, 1 + 24 * 12 + 1},
      {"llama-3.2-1b-shape", "llama-3.2-1b-instruct", 1'235'814'400, 1 + 16 * 9 + 1},
      {"llama-3.1-8b-shape", "llama-3.1-8b", 8'030'261'248, 1 + 32 * 9 + 2},
      {"llama-3.1-70b-shape", "llama-3.1-70b", 70'553'706'496, 1 + 80 * 9 + 2},
  };
  for (const Expect& e : cases) {
    SCOPED_TRACE(e.preset);
    const Preset* p = find_preset(e.preset);
    ASSERT_NE(p, nullptr);
    const Result<checkpoint::ModelConfig> ours =
        checkpoint::parse_model_config(config_json_text(*p, DType::kBF16), "ours");
    ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
    const Result<checkpoint::ModelConfig> real =
        checkpoint::load_model_config(fixtures_dir() / "model_configs" / e.real_config);
    ASSERT_TRUE(real.is_ok());
    EXPECT_EQ(ours->architecture_name, real->architecture_name);
    EXPECT_EQ(ours->vocab_size, real->vocab_size);
    EXPECT_EQ(ours->hidden_size, real->hidden_size);
    EXPECT_EQ(ours->intermediate_size, real->intermediate_size);
    EXPECT_EQ(ours->num_hidden_layers, real->num_hidden_layers);
    EXPECT_EQ(ours->num_attention_heads, real->num_attention_heads);
    EXPECT_EQ(ours->num_key_value_heads, real->num_key_value_heads);
    EXPECT_EQ(ours->head_dim, real->head_dim);
    EXPECT_EQ(ours->max_position_embeddings, real->max_position_embeddings);
    EXPECT_EQ(ours->rope_theta, real->rope_theta);
    EXPECT_EQ(ours->rope_scaling.rope_type, real->rope_scaling.rope_type);
    EXPECT_EQ(ours->rope_scaling.factor, real->rope_scaling.factor);
    EXPECT_EQ(ours->rope_scaling.low_freq_factor, real->rope_scaling.low_freq_factor);
    EXPECT_EQ(ours->rope_scaling.high_freq_factor, real->rope_scaling.high_freq_factor);
    EXPECT_EQ(ours->rope_scaling.original_max_position_embeddings,
              real->rope_scaling.original_max_position_embeddings);
    EXPECT_EQ(ours->rms_norm_eps, real->rms_norm_eps);
    EXPECT_EQ(ours->tie_word_embeddings, real->tie_word_embeddings);
    EXPECT_EQ(ours->attention_bias, real->attention_bias);
    EXPECT_EQ(ours->layer_window_left, real->layer_window_left);
    EXPECT_EQ(ours->torch_dtype, real->torch_dtype);
    // Token ids are the synthetic tokenizer's, inside the embedding.
    ASSERT_TRUE(ours->bos_token_id.has_value());
    EXPECT_LT(*ours->bos_token_id, p->tokenizer.vocab_size());
    for (const int32_t id : ours->eos_token_ids)
      EXPECT_LT(id, p->tokenizer.vocab_size());

    const std::vector<CheckpointTensor> t = checkpoint_tensors(p->config, DType::kBF16);
    int64_t params = 0;
    for (const CheckpointTensor& c : t)
      params += static_cast<int64_t>(*checkpoint::shape_numel(c.spec.shape));
    EXPECT_EQ(params, e.parameters);
    EXPECT_EQ(t.size(), e.tensors);
  }
  EXPECT_EQ(checkpoint::parse_model_config(config_json_text(*find_preset("tiny"), DType::kF32), "x")
                ->torch_dtype,
            DType::kF32);
  // Llama-3.1-8B at bf16 (16.06 GB) is sharded at save_pretrained's 5 GB, like the real one.
  const Preset* l8 = find_preset("llama-3.1-8b-shape");
  EXPECT_EQ(plan_shards(checkpoint_tensors(l8->config, DType::kBF16), 5'000'000'000).size(), 4u);
  const Preset* q = find_preset("qwen2.5-0.5b-shape");
  EXPECT_EQ(plan_shards(checkpoint_tensors(q->config, DType::kBF16), 5'000'000'000).size(), 1u);
}

// The Qwen3 / Gemma presets: their config.json parses back to the real models' values (Hugging
// Face's Qwen/Qwen3-8B, google/gemma-2-9b, google/gemma-3-12b-pt's text_config, written out
// here) and the tensors count the real parameters (Qwen3-8B 8,190,735,360 and Gemma-2-9B
// 9,241,705,984 as published; Gemma-3-12B's text model without its vision tower).
TEST(MakeModel, Qwen3AndGemmaPresetsParseBackToTheRealConfigs) {
  using checkpoint::LayerType;
  struct Expect {
    const char* preset;
    checkpoint::Architecture arch;
    int32_t vocab, hidden, inter, layers, heads, kv_heads, head_dim;
    int64_t max_pos;
    double rope_theta;
    bool tied, qk_norm;
    std::optional<int32_t> window;
    int32_t sliding_layers;
    std::optional<double> qpas, attn_cap, final_cap;
    int64_t parameters;
    size_t tensors;
  };
  const Expect cases[] = {
      {"qwen3-8b-shape",
       checkpoint::Architecture::kQwen3,
       151936,
       4096,
       12288,
       36,
       32,
       8,
       128,
       40960,
       1e6,
       false,
       true,
       std::nullopt,
       0,
       std::nullopt,
       std::nullopt,
       std::nullopt,
       8'190'735'360,
       1 + 36 * 11 + 2},
      {"gemma-2-9b-shape",
       checkpoint::Architecture::kGemma2,
       256000,
       3584,
       14336,
       42,
       16,
       8,
       256,
       8192,
       1e4,
       true,
       false,
       4096,
       21,
       256.0,
       50.0,
       30.0,
       9'241'705'984,
       1 + 42 * 11 + 1},
      {"gemma-3-12b-shape",
       checkpoint::Architecture::kGemma3,
       262208,
       3840,
       15360,
       48,
       16,
       8,
       256,
       131072,
       1e6,
       true,
       true,
       1024,
       40,
       256.0,
       std::nullopt,
       std::nullopt,
       11'766'034'176,
       1 + 48 * 13 + 1},
  };
  for (const Expect& e : cases) {
    SCOPED_TRACE(e.preset);
    const Preset* p = find_preset(e.preset);
    ASSERT_NE(p, nullptr);
    const Result<checkpoint::ModelConfig> ours =
        checkpoint::parse_model_config(config_json_text(*p, DType::kBF16), "ours");
    ASSERT_TRUE(ours.is_ok()) << ours.status().to_string();
    const checkpoint::ModelConfig& c = *ours;
    EXPECT_EQ(c.architecture, e.arch);
    EXPECT_EQ(c.vocab_size, e.vocab);
    EXPECT_EQ(c.hidden_size, e.hidden);
    EXPECT_EQ(c.intermediate_size, e.inter);
    EXPECT_EQ(c.num_hidden_layers, e.layers);
    EXPECT_EQ(c.num_attention_heads, e.heads);
    EXPECT_EQ(c.num_key_value_heads, e.kv_heads);
    EXPECT_EQ(c.head_dim, e.head_dim);
    EXPECT_EQ(c.max_position_embeddings, e.max_pos);
    EXPECT_EQ(c.rope_theta, e.rope_theta);
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.tie_word_embeddings, e.tied);
    EXPECT_EQ(c.qk_norm, e.qk_norm);
    EXPECT_FALSE(c.attention_bias);
    const std::vector<int32_t> sliding = checkpoint::sliding_layers(c);
    EXPECT_EQ(static_cast<int32_t>(sliding.size()), e.sliding_layers);
    EXPECT_EQ(sliding.empty() ? std::nullopt
                              : std::optional<int32_t>(
                                    c.layer_window_left[static_cast<size_t>(sliding.front())] + 1),
              e.window);
    EXPECT_EQ(checkpoint::sliding_layers(c), checkpoint::sliding_layers(p->config));
    EXPECT_EQ(c.query_pre_attn_scalar, e.qpas);
    EXPECT_EQ(c.attn_logit_softcapping, e.attn_cap);
    EXPECT_EQ(c.final_logit_softcapping, e.final_cap);
    // What the preset holds is what its config.json says.
    EXPECT_EQ(c.layer_types, p->config.layer_types);
    EXPECT_EQ(c.sandwich_norms, p->config.sandwich_norms);
    EXPECT_EQ(c.norm_weight_offset, p->config.norm_weight_offset);
    EXPECT_EQ(c.embedding_scale, p->config.embedding_scale);
    EXPECT_EQ(c.hidden_act, p->config.hidden_act);
    EXPECT_EQ(c.sliding_rope_theta, p->config.sliding_rope_theta);
    if (e.arch == checkpoint::Architecture::kGemma3) {
      EXPECT_EQ(c.layer_types[5], LayerType::kFullAttention);
      EXPECT_EQ(c.layer_types[4], LayerType::kSlidingAttention);
      EXPECT_EQ(c.sliding_rope_theta, 10000.0);
      EXPECT_EQ(c.rope_scaling.rope_type, "linear");
      EXPECT_EQ(c.rope_scaling.factor, 8.0);
    }
    const std::vector<CheckpointTensor> t = checkpoint_tensors(p->config, DType::kBF16);
    int64_t params = 0;
    for (const CheckpointTensor& ct : t)
      params += static_cast<int64_t>(*checkpoint::shape_numel(ct.spec.shape));
    EXPECT_EQ(params, e.parameters);
    EXPECT_EQ(t.size(), e.tensors);
    // Gemma's norms multiply by 1 + w: written as zeros, the identity.
    for (const CheckpointTensor& ct : t) {
      if (ct.spec.name.find("norm") == std::string::npos) continue;
      EXPECT_EQ(ct.init,
                p->config.norm_weight_offset != 0.0 ? TensorInit::kZeros : TensorInit::kOnes)
          << ct.spec.name;
    }
  }
}

TEST(MakeModel, Errors) {
  TempDir tmp;
  MakeModelOptions o = tiny_options(tmp / "x");
  o.preset = "gpt-5";
  Result<MakeModelReport> r = make_model(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  for (const char* name :
       {"gpt-5", "tiny", "qwen2.5-0.5b-shape", "llama-3.2-1b-shape", "llama-3.1-8b-shape"}) {
    EXPECT_NE(r.status().message().find(name), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(fs::exists(tmp / "x"));  // nothing created for a bad preset

  o = tiny_options(tmp / "x");
  o.dtype = DType::kFP8E4M3;
  r = make_model(o);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--dtype"), std::string::npos);

  write_file(tmp / "file", "not a directory");
  r = make_model(tiny_options(tmp / "file"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find((tmp / "file").string()), std::string::npos);

  r = make_model(tiny_options(tmp / "file" / "sub"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kIoError);
  EXPECT_NE(r.status().message().find((tmp / "file" / "sub").string()), std::string::npos);

  // A non-empty directory is refused without --force and its files are left alone.
  write_file(tmp / "full" / "notes.txt", "mine");
  r = make_model(tiny_options(tmp / "full"));
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--force"), std::string::npos);
  EXPECT_FALSE(fs::exists(tmp / "full" / "config.json"));
  o = tiny_options(tmp / "full");
  o.force = true;
  make_ok(o);
  EXPECT_EQ(read_file(tmp / "full" / "notes.txt"), "mine");
  EXPECT_TRUE(fs::exists(tmp / "full" / "model.safetensors"));

  EXPECT_EQ(*parse_shard_size("5GB"), 5'000'000'000u);
  EXPECT_EQ(*parse_shard_size("500mb"), 500'000'000u);
  EXPECT_EQ(*parse_shard_size("1GiB"), uint64_t{1} << 30);
  EXPECT_EQ(*parse_shard_size("1234"), 1234u);
  EXPECT_FALSE(parse_shard_size("five").is_ok());
  EXPECT_FALSE(parse_shard_size("0").is_ok());
  EXPECT_FALSE(parse_shard_size("5TB").is_ok());
}

TEST(MakeModel, RandomStreamIsIndependentOfChunkingAndThreads) {
  const uint64_t key = tensor_key(42, "model.layers.0.mlp.up_proj.weight");
  EXPECT_NE(key, tensor_key(43, "model.layers.0.mlp.up_proj.weight"));
  EXPECT_NE(key, tensor_key(42, "model.layers.1.mlp.up_proj.weight"));
  std::vector<float> whole(300001), parts(300001);
  fill_normal(key, 0, whole.size(), 0.02f, whole.data());
  size_t at = 0;
  for (const size_t n : {1, 2, 333, 4096, 100000, 195569}) {
    fill_normal(key, at, n, 0.02f, parts.data() + at);
    at += n;
  }
  ASSERT_EQ(at, whole.size());
  EXPECT_EQ(whole, parts);
  std::vector<float> scratch(whole.size());
  std::vector<uint16_t> one(whole.size()), four(whole.size());
  generate_normal(key, 0, whole.size(), 0.02f, DType::kBF16, 1, scratch.data(), one.data());
  generate_normal(key, 0, whole.size(), 0.02f, DType::kBF16, 4, scratch.data(), four.data());
  EXPECT_EQ(one, four);
  for (size_t i = 0; i < whole.size(); i += 997)
    EXPECT_EQ(one[i], float_to_bf16(whole[i]));
}

// ---- the command line -------------------------------------------------------------------------

using testing_util::CommandResult;
using testing_util::run_kvserve;

TEST(MakeModelCli, ExitCodesAndMessages) {
  TempDir tmp;
  const std::string out = (tmp / "m").string();
  CommandResult r = run_kvserve("make-model --preset tiny --output " + out + " --seed 5 --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("21 tensors"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::exists(tmp / "m" / "model.safetensors"));

  r = run_kvserve("make-model --preset tiny --output " + out);  // not empty now
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(out), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--force"), std::string::npos) << r.output;
  r = run_kvserve("make-model --preset tiny --output " + out + " --force --seed 5 --quiet");
  EXPECT_EQ(r.exit_code, 0) << r.output;

  r = run_kvserve("make-model --preset llama-9b --output " + (tmp / "n").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("llama-3.1-8b-shape"), std::string::npos) << r.output;
  r = run_kvserve("make-model --output " + (tmp / "n").string());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--preset"), std::string::npos) << r.output;
  r = run_kvserve("make-model --preset tiny");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--output"), std::string::npos) << r.output;
  r = run_kvserve("make-model --preset tiny --output " + (tmp / "n").string() + " --dtype fp8");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--dtype"), std::string::npos) << r.output;
  r = run_kvserve("make-model --preset tiny --output " + (tmp / "n").string() +
                  " --max-shard-size lots");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--max-shard-size"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp / "n"));

  write_file(tmp / "f", "x");  // under a file: the directory cannot be created
  r = run_kvserve("make-model --preset tiny --output " + (tmp / "f" / "sub").string());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find((tmp / "f" / "sub").string()), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvserve::makemodel

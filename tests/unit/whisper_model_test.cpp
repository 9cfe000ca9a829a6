// Whisper checkpoints from make-model and the CPU model against a float64 reference of the
// Whisper forward (whisper_reference.h) on the whisper-test preset: encoder output, first-step
// and later logits; aligned vs ragged encoder layouts x page sizes 1/16/64/128 x the cpu and native
// backends; batched vs one request at a time; text-only requests (encoder_len 0) that never read
// the pool; and transformers fixtures (tests/fixtures/whisper/, tools/whisper_oracle.py) when
// present.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "kvserve/audio/log_mel_config.h"
#include "kvserve/checkpoint/safetensors_writer.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/makemodel/whisper_checkpoint_layout.h"
#include "kvserve/makemodel/whisper_presets.h"
#include "kvserve/makemodel/whisper_tokenizer.h"
#include "kvserve/model/whisper_generate.h"
#include "kvserve/tokenizer/tokenizer.h"
#include "model_test_util.h"
#include "support/whisper_test_util.h"
#include "whisper_reference.h"

namespace kvserve::model {
namespace {

namespace fs = std::filesystem;
using testing::make_whisper_checkpoint;
using testing::make_whisper_runner;
using testing::max_rel_diff;
using testing::synthetic_features;
using testing::TempDir;
using testing::Vec;
using testing::WhisperReference;

constexpr double kTolerance = 1e-4;  // relative to max(1, max |reference|)

// ---------------------------------------------------------------------------------------------
// make-model

TEST(WhisperMakeModel, TestPresetWritesALoadableCheckpoint) {
  TempDir tmp;
  const Status made = make_whisper_checkpoint("whisper-test", tmp.path());
  ASSERT_TRUE(made.is_ok()) << made.to_string();
  for (const char* f : {"config.json", "generation_config.json", "preprocessor_config.json",
                        "tokenizer.json", "tokenizer_config.json", "model.safetensors"}) {
    EXPECT_TRUE(fs::is_regular_file(tmp / f)) << f;
  }
  const makemodel::Preset preset = makemodel::whisper_test_preset();
  const Result<checkpoint::WhisperConfig> c = checkpoint::load_whisper_config(tmp.path());
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->d_model, 64);
  EXPECT_EQ(c->encoder_layers, 2);
  EXPECT_EQ(c->decoder_layers, 2);
  EXPECT_EQ(c->encoder_attention_heads, 4);
  EXPECT_EQ(c->encoder_ffn_dim, 256);
  EXPECT_EQ(c->max_source_positions, 1500);
  EXPECT_EQ(c->max_target_positions, preset.whisper.max_target_positions);
  EXPECT_EQ(c->vocab_size, 51865);
  ASSERT_TRUE(checkpoint::load_whisper_generation_config(tmp.path()).is_ok());
  const auto mel = audio::parse_preprocessor_config(tmp / "preprocessor_config.json");
  ASSERT_TRUE(mel.is_ok()) << mel.status().to_string();
  EXPECT_EQ(mel->feature_size, 80);
  EXPECT_EQ(mel->num_frames(), c->input_frames());

  // Names and shapes: transformers' state dict, proj_out tied (absent), k_proj without bias.
  const auto store = checkpoint::WeightStore::open(tmp.path());
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  const std::vector<makemodel::CheckpointTensor> expected =
      makemodel::whisper_checkpoint_tensors(*c, DType::kF32);
  EXPECT_EQ((*store)->names().size(), expected.size());
  for (const makemodel::CheckpointTensor& t : expected) {
    const auto v = (*store)->get(t.spec.name);
    ASSERT_TRUE(v.is_ok()) << t.spec.name;
    EXPECT_EQ(v->shape, t.spec.shape) << t.spec.name;
    EXPECT_EQ(v->dtype, DType::kF32);
  }
  EXPECT_TRUE((*store)->contains("model.decoder.layers.1.encoder_attn.v_proj.bias"));
  EXPECT_FALSE((*store)->contains("model.encoder.layers.0.self_attn.k_proj.bias"));
  EXPECT_FALSE((*store)->contains("proj_out.weight"));
  EXPECT_EQ((*store)->get("model.encoder.conv1.weight")->shape, (std::vector<int64_t>{64, 80, 3}));

  // Encoder positions: transformers' sinusoids(1500, 64), recomputed here in float64.
  const auto pos = (*store)->get("model.encoder.embed_positions.weight");
  ASSERT_TRUE(pos.is_ok());
  const auto* p = static_cast<const float*>(pos->data);
  double worst = 0;
  for (int64_t t = 0; t < 1500; ++t) {
    for (int64_t i = 0; i < 64; ++i) {
      const double inv = std::exp(-std::log(10000.0) / 31.0 * static_cast<double>(i % 32));
      const double want = i < 32 ? std::sin(t * inv) : std::cos(t * inv);
      worst = std::max(worst, std::abs(p[t * 64 + i] - want));
    }
  }
  EXPECT_LT(worst, 1e-3);  // torch computes the angles in f32: |t * inv| up to 1500 rad
  EXPECT_EQ(p[0], 0.0f);
  EXPECT_EQ(p[32], 1.0f);

  // The tokenizer keeps openai/whisper-tiny's special ids.
  const auto tok = tokenizer::Tokenizer::from_directory(tmp.path());
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), 51865);
  EXPECT_EQ((*tok)->token_to_id("<|endoftext|>"), 50257);
  EXPECT_EQ((*tok)->token_to_id("<|startoftranscript|>"), 50258);
  EXPECT_EQ((*tok)->token_to_id("<|en|>"), 50259);
  EXPECT_EQ((*tok)->token_to_id("<|su|>"), 50357);
  EXPECT_EQ((*tok)->token_to_id("<|translate|>"), 50358);
  EXPECT_EQ((*tok)->token_to_id("<|transcribe|>"), 50359);
  EXPECT_EQ((*tok)->token_to_id("<|nocaptions|>"), 50362);
  EXPECT_EQ((*tok)->token_to_id("<|notimestamps|>"), 50363);
  EXPECT_EQ((*tok)->token_to_id("<|0.00|>"), 50364);
  EXPECT_EQ((*tok)->token_to_id("<|30.00|>"), 51864);
  const std::vector<int32_t> ids = (*tok)->encode("Hello world", /*add_special_tokens=*/true);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids.front(), 50258);
  EXPECT_EQ(ids[1], 50363);
  EXPECT_EQ(ids.back(), 50257);
  EXPECT_EQ((*tok)->decode(ids, /*skip_special_tokens=*/true), "Hello world");
}

TEST(WhisperMakeModel, TinyShapeHasWhisperTinysParameters) {
  const makemodel::Preset* p = makemodel::find_preset("whisper-tiny-shape");
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->family, makemodel::ModelFamily::kWhisper);
  const std::vector<makemodel::CheckpointTensor> t =
      makemodel::whisper_checkpoint_tensors(p->whisper, DType::kF32);
  int64_t params = 0;
  for (const makemodel::CheckpointTensor& x : t)
    params += *checkpoint::shape_numel(x.spec.shape);
  EXPECT_EQ(params, 37'760'640);  // openai/whisper-tiny's sum(p.numel()), proj_out tied
  EXPECT_EQ(t.size(), 5u + 4 * 15 + 2 + 2 + 4 * 24 + 2);
}

// ---------------------------------------------------------------------------------------------
// The model against the float64 reference

// One whisper-test checkpoint for the suite, its weights redrawn with a larger spread (std 0.2,
// layer-norm weights 1 + N(0, 0.2)) so that attention is far from uniform and every weight
// matters; features drawn from a printed seed.
class WhisperModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    const Status made = make_whisper_checkpoint("whisper-test", dir_->path());
    ASSERT_TRUE(made.is_ok()) << made.to_string();
    config_ = new checkpoint::WhisperConfig(*checkpoint::load_whisper_config(dir_->path()));
    seed_ = std::random_device{}();
    std::printf("WhisperModelTest seed %llu\n", static_cast<unsigned long long>(seed_));
    std::mt19937_64 rng(seed_);
    const Status written = testing::redraw_whisper_weights(dir_->path(), 0.2f, rng);
    ASSERT_TRUE(written.is_ok()) << written.to_string();
    auto opened = checkpoint::WeightStore::open(dir_->path());
    ASSERT_TRUE(opened.is_ok()) << opened.status().to_string();
    store_ = opened->release();
    reference_ = new WhisperReference(*config_, *store_);
    features_a_ = new std::vector<float>(
        testing::random_features(rng, config_->num_mel_bins, config_->input_frames()));
    features_b_ =
        new std::vector<float>(synthetic_features(config_->num_mel_bins, config_->input_frames()));
    encoder_a_ = new Vec(reference_->encode(*features_a_));
    encoder_b_ = new Vec(reference_->encode(*features_b_));
  }

  static void TearDownTestSuite() {
    delete encoder_a_;
    delete encoder_b_;
    delete features_a_;
    delete features_b_;
    delete reference_;
    delete store_;
    delete config_;
    delete dir_;
  }

  static std::unique_ptr<WhisperRunner> runner(int32_t page_size, mem::EncoderKvLayout layout,
                                               const std::string& backend = "cpu") {
    return make_whisper_runner(dir_->path(), page_size, layout, backend);
  }

  static std::vector<int32_t> prompt() { return {50258, 50259, 50359, 50363}; }

  // Greedy, checking every step's logits against the reference over the same tokens.
  static void expect_steps_match_reference(const WhisperGenerateResult& res, const Vec* encoder,
                                           const checkpoint::WhisperGenerationConfig& g) {
    std::vector<int32_t> seq = res.prompt;
    ASSERT_EQ(res.step_logits.size(), res.tokens.size());
    for (size_t j = 0; j < res.tokens.size(); ++j) {
      Vec want = reference_->last_logits(seq, encoder);
      const double diff = max_rel_diff(res.step_logits[j], want);
      EXPECT_LT(diff, kTolerance) << "step " << j << " seed " << seed_;
      // The reference's greedy choice, unless its top two are closer than the error.
      std::vector<float> f(want.begin(), want.end());
      apply_whisper_suppression(g, j == 0, f);
      std::vector<float> sorted = f;
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 1e-3) {
        EXPECT_EQ(res.tokens[j], std::max_element(f.begin(), f.end()) - f.begin()) << "step " << j;
      }
      seq.push_back(res.tokens[j]);
    }
  }

  static inline TempDir* dir_ = nullptr;
  static inline checkpoint::WhisperConfig* config_ = nullptr;
  static inline checkpoint::WeightStore* store_ = nullptr;
  static inline WhisperReference* reference_ = nullptr;
  static inline std::vector<float>* features_a_ = nullptr;
  static inline std::vector<float>* features_b_ = nullptr;
  static inline Vec* encoder_a_ = nullptr;
  static inline Vec* encoder_b_ = nullptr;
  static inline uint64_t seed_ = 0;
};

TEST_F(WhisperModelTest, EncoderMatchesFloat64Reference) {
  auto r = runner(1, mem::EncoderKvLayout::kAligned);
  ASSERT_NE(r, nullptr);
  for (const auto& [features, want] :
       {std::pair{features_a_, encoder_a_}, std::pair{features_b_, encoder_b_}}) {
    std::vector<float> got;
    ASSERT_TRUE(r->model().encode(*features, got).is_ok());
    ASSERT_EQ(got.size(), 1500u * 64);
    EXPECT_LT(max_rel_diff(got, *want), kTolerance) << "seed " << seed_;
  }
  std::vector<float> out;
  const Status bad = r->model().encode(std::vector<float>(80 * 2999), out);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("expected [80, 3000]"), std::string::npos) << bad.message();
}

TEST_F(WhisperModelTest, GreedyStepsMatchReference) {
  auto r = runner(1, mem::EncoderKvLayout::kAligned);
  ASSERT_NE(r, nullptr);
  const std::vector<WhisperRequest> reqs = {{*features_a_, {}}, {{}, {}}, {*features_b_, {}}};
  const auto res = whisper_generate(*r, reqs, {.max_new_tokens = 5, .keep_logits = true});
  ASSERT_TRUE(res.is_ok()) << res.status().to_string();
  EXPECT_EQ((*res)[0].prompt, prompt());
  EXPECT_EQ(r->allocator().available_size(), r->allocator().size()) << "KV freed at the end";
  expect_steps_match_reference((*res)[0], encoder_a_, r->generation_config());
  expect_steps_match_reference((*res)[1], nullptr, r->generation_config());
  expect_steps_match_reference((*res)[2], encoder_b_, r->generation_config());
}

TEST_F(WhisperModelTest, LayoutsPageSizesAndBackendsAgree) {
  const std::vector<WhisperRequest> reqs = {{*features_a_, {}}, {{}, {50258, 50261, 50358, 50363}}};
  const WhisperGenerateOptions o{.max_new_tokens = 6, .keep_logits = true};
  auto base_runner = runner(1, mem::EncoderKvLayout::kAligned, "native");
  ASSERT_NE(base_runner, nullptr);
  const auto base = whisper_generate(*base_runner, reqs, o);
  ASSERT_TRUE(base.is_ok()) << base.status().to_string();
  for (const std::string backend : {"cpu", "native"}) {
    for (const int32_t ps : {1, 16, 64, 128}) {
      for (const auto layout : {mem::EncoderKvLayout::kAligned, mem::EncoderKvLayout::kRagged}) {
        SCOPED_TRACE(
            fmt::format("{} page {} {}", backend, ps, mem::encoder_kv_layout_name(layout)));
        auto r = runner(ps, layout, backend);
        ASSERT_NE(r, nullptr);
        const auto got = whisper_generate(*r, reqs, o);
        ASSERT_TRUE(got.is_ok()) << got.status().to_string();
        for (size_t b = 0; b < reqs.size(); ++b) {
          EXPECT_EQ((*got)[b].tokens, (*base)[b].tokens) << "request " << b;
          ASSERT_EQ((*got)[b].step_logits.size(), (*base)[b].step_logits.size());
          for (size_t j = 0; j < (*got)[b].step_logits.size(); ++j) {
            EXPECT_LT(max_rel_diff((*got)[b].step_logits[j], (*base)[b].step_logits[j]), 1e-5)
                << "request " << b << " step " << j;
          }
        }
        EXPECT_EQ(r->allocator().available_size(), r->allocator().size());
      }
    }
  }
}

TEST_F(WhisperModelTest, BatchedEqualsOneAtATime) {
  const std::vector<WhisperRequest> reqs = {
      {*features_a_, {}}, {*features_b_, {}}, {{}, {}}, {*features_b_, {50258, 50265, 50359}}};
  const WhisperGenerateOptions o{.max_new_tokens = 6, .keep_logits = true};
  auto r = runner(16, mem::EncoderKvLayout::kRagged);
  ASSERT_NE(r, nullptr);
  const auto batched = whisper_generate(*r, reqs, o);
  ASSERT_TRUE(batched.is_ok()) << batched.status().to_string();
  for (size_t b = 0; b < reqs.size(); ++b) {
    const auto alone = whisper_generate(*r, std::span(&reqs[b], 1), o);
    ASSERT_TRUE(alone.is_ok());
    EXPECT_EQ((*batched)[b].tokens, (*alone)[0].tokens) << "request " << b;
    for (size_t j = 0; j < (*alone)[0].step_logits.size(); ++j) {
      EXPECT_LT(max_rel_diff((*batched)[b].step_logits[j], (*alone)[0].step_logits[j]), 1e-5)
          << "request " << b << " step " << j;
    }
  }
}

TEST_F(WhisperModelTest, TextOnlyRequestsNeverReadThePoolForCrossAttention) {
  for (const auto layout : {mem::EncoderKvLayout::kAligned, mem::EncoderKvLayout::kRagged}) {
    for (const int32_t ps : {1, 64}) {
      SCOPED_TRACE(fmt::format("page {} {}", ps, mem::encoder_kv_layout_name(layout)));
      auto r = runner(ps, layout);
      ASSERT_NE(r, nullptr);
      // NaN everywhere: a read of any slot not written by this request would show in the logits.
      for (int32_t l = 0; l < config_->decoder_layers; ++l) {
        for (const TensorView& buf : {r->kv_pool().k_buffer(l), r->kv_pool().v_buffer(l)}) {
          std::fill_n(buf.data_as<float>(), buf.numel(), std::numeric_limits<float>::quiet_NaN());
        }
      }
      const std::vector<WhisperRequest> reqs = {{{}, {}}, {{}, {50258}}};
      const auto res = whisper_generate(*r, reqs, {.max_new_tokens = 3, .keep_logits = true});
      ASSERT_TRUE(res.is_ok()) << res.status().to_string();
      for (const WhisperGenerateResult& x : *res) {
        for (const std::vector<float>& step : x.step_logits) {
          EXPECT_TRUE(
              std::all_of(step.begin(), step.end(), [](float v) { return std::isfinite(v); }));
        }
        expect_steps_match_reference(x, nullptr, r->generation_config());
      }
    }
  }
}

TEST_F(WhisperModelTest, PromptWithoutRoomIsAnError) {
  auto r = runner(1, mem::EncoderKvLayout::kAligned);
  ASSERT_NE(r, nullptr);
  const std::vector<WhisperRequest> reqs = {{{}, std::vector<int32_t>(64, 50258)}};
  const auto res = whisper_generate(*r, reqs, {});
  ASSERT_FALSE(res.is_ok());
  EXPECT_EQ(res.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r->allocator().available_size(), r->allocator().size());
}

// A checkpoint without one tensor, or with one of the wrong shape (a tensor of its own, or a
// part of the encoder's stacked q/k/v), does not load: the status names the tensor, and for a
// shape the file and both shapes.
TEST(WhisperModelLoad, ErrorsNameTheTensorAndTheFile) {
  TempDir tmp;
  ASSERT_TRUE(make_whisper_checkpoint("whisper-test", tmp.path()).is_ok());
  const checkpoint::WhisperConfig c = *checkpoint::load_whisper_config(tmp.path());
  struct Case {
    std::string tensor;
    std::vector<int64_t> shape;  // empty: the tensor is left out
    StatusCode code;
    std::string message;
  };
  const std::string k0 = "model.encoder.layers.0.self_attn.k_proj.weight";
  const std::string fc1 = "model.decoder.layers.1.fc1.weight";
  const std::string v_bias = "model.decoder.layers.1.encoder_attn.v_proj.bias";
  const std::string norm = "model.encoder.layer_norm.bias";
  for (const Case& k : {Case{v_bias, {}, StatusCode::kNotFound, "'" + v_bias + "'"},
                        Case{norm, {}, StatusCode::kNotFound, "'" + norm + "'"},
                        Case{k0,
                             {64, 63},
                             StatusCode::kInvalidArgument,
                             "tensor " + k0 + " has shape [64, 63], expected [64, 64]"},
                        Case{fc1,
                             {255, 64},
                             StatusCode::kInvalidArgument,
                             "tensor " + fc1 + " has shape [255, 64], expected [256, 64]"}}) {
    SCOPED_TRACE(k.tensor);
    std::vector<checkpoint::TensorSpec> specs;
    for (const makemodel::CheckpointTensor& t :
         makemodel::whisper_checkpoint_tensors(c, DType::kF32)) {
      if (t.spec.name != k.tensor) {
        specs.push_back(t.spec);
      } else if (!k.shape.empty()) {
        specs.push_back({t.spec.name, t.spec.dtype, k.shape});
      }
    }
    const Status written = checkpoint::write_safetensors_streaming(
        tmp / "model.safetensors", specs, {{"format", "pt"}},
        [](const checkpoint::TensorSpec& spec, checkpoint::ByteSink& out) -> Status {
          const std::vector<float> zeros(*checkpoint::shape_numel(spec.shape));
          return out.write(zeros.data(), zeros.size() * sizeof(float));
        });
    ASSERT_TRUE(written.is_ok()) << written.to_string();
    const auto r = WhisperRunner::create(tmp.path(), {});
    ASSERT_FALSE(r.is_ok());
    EXPECT_EQ(r.status().code(), k.code) << r.status().to_string();
    EXPECT_NE(r.status().message().find(k.message), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find("model.safetensors"), std::string::npos)
        << r.status().message();
  }
}

// ---------------------------------------------------------------------------------------------
// transformers fixtures (tools/whisper_oracle.py): tests/fixtures/whisper/<name>/fixture.json

TEST(WhisperOracle, MatchesTransformersFixtures) {
  const fs::path root = testing::fixtures_dir() / "whisper";
  std::vector<fs::path> cases;
  std::error_code ec;
  if (fs::is_directory(root, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(root)) {
      if (fs::is_regular_file(e.path() / "fixture.json")) cases.push_back(e.path());
    }
  }
  if (cases.empty()) GTEST_SKIP() << "no fixtures in " << root << " (tools/whisper_oracle.py)";
  std::sort(cases.begin(), cases.end());
  for (const fs::path& dir : cases) {
    SCOPED_TRACE(dir.string());
    const nlohmann::json fx = nlohmann::json::parse(testing::read_file(dir / "fixture.json"));
    TempDir tmp;
    fs::path model_dir;
    const nlohmann::json& ck = fx.at("checkpoint");
    if (ck.contains("path")) {
      model_dir = dir / ck.at("path").get<std::string>();
    } else {
      DType dtype = DType::kF32;
      ASSERT_TRUE(parse_dtype(ck.at("dtype").get<std::string>(), &dtype));
      ASSERT_TRUE(make_whisper_checkpoint(ck.at("preset").get<std::string>(), tmp.path(), dtype,
                                          ck.at("seed").get<uint64_t>())
                      .is_ok());
      model_dir = tmp.path();
    }
    auto runner = WhisperRunner::create(model_dir, {});
    ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
    const checkpoint::WhisperConfig& c = (*runner)->config();
    std::vector<float> features;
    if (fx.at("features") == "synthetic") {
      features = synthetic_features(c.num_mel_bins, c.input_frames());
    } else {
      const std::string bytes = testing::read_file(dir / fx.at("features").get<std::string>());
      ASSERT_EQ(bytes.size(), sizeof(float) * c.num_mel_bins * c.input_frames());
      features.resize(bytes.size() / sizeof(float));
      std::memcpy(features.data(), bytes.data(), bytes.size());
    }
    // Encoder: summary statistics and a few rows.
    std::vector<float> enc;
    ASSERT_TRUE((*runner)->model().encode(features, enc).is_ok());
    const nlohmann::json& e = fx.at("encoder");
    const double scale = std::max(1.0, e.at("abs_max").get<double>());
    double sum = 0, sq = 0, amax = 0;
    for (const float v : enc) {
      sum += v;
      sq += static_cast<double>(v) * v;
      amax = std::max(amax, std::abs(static_cast<double>(v)));
    }
    const double mean = sum / enc.size();
    EXPECT_NEAR(mean, e.at("mean").get<double>(), kTolerance * scale);
    EXPECT_NEAR(std::sqrt(sq / enc.size() - mean * mean), e.at("std").get<double>(),
                kTolerance * scale);
    EXPECT_NEAR(amax, e.at("abs_max").get<double>(), kTolerance * scale);
    const auto rows = e.at("slice_rows").get<std::vector<int64_t>>();
    const auto slice = e.at("slice").get<std::vector<std::vector<double>>>();
    for (size_t i = 0; i < rows.size(); ++i) {
      for (size_t j = 0; j < slice[i].size(); ++j) {
        EXPECT_NEAR(enc[rows[i] * c.d_model + j], slice[i][j], kTolerance * scale)
            << "row " << rows[i] << " col " << j;
      }
    }
    // First-step logits and greedy tokens with the fixture's prompt.
    const std::vector<WhisperRequest> reqs = {
        {features, fx.at("prompt").get<std::vector<int32_t>>()}};
    const auto res = whisper_generate(
        **runner, reqs,
        {.max_new_tokens = fx.at("max_new_tokens").get<int32_t>(), .keep_logits = true});
    ASSERT_TRUE(res.is_ok()) << res.status().to_string();
    const std::vector<float>& logits = (*res)[0].step_logits.at(0);
    const nlohmann::json& l = fx.at("first_logits");
    const double lscale = std::max(1.0, l.at("abs_max").get<double>());
    const auto top_ids = l.at("top_ids").get<std::vector<int32_t>>();
    const auto top_values = l.at("top_values").get<std::vector<double>>();
    for (size_t i = 0; i < top_ids.size(); ++i) {
      EXPECT_NEAR(logits.at(top_ids[i]), top_values[i], kTolerance * lscale) << top_ids[i];
    }
    const auto lslice = l.at("slice").get<std::vector<double>>();
    for (size_t i = 0; i < lslice.size(); ++i)
      EXPECT_NEAR(logits[i], lslice[i], kTolerance * lscale) << "logit " << i;
    EXPECT_EQ((*res)[0].tokens, fx.at("greedy").get<std::vector<int32_t>>());
  }
}

}  // namespace
}  // namespace kvserve::model

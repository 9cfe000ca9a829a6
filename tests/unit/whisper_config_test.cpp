// Whisper config.json / generation_config.json parsing (defaults, errors naming file and field),
// the Whisper presets' files, the prompt and the token suppression of greedy decoding.
#include <gtest/gtest.h>

#include <cmath>

#include "kvserve/checkpoint/whisper_config.h"
#include "kvserve/makemodel/whisper_presets.h"
#include "kvserve/makemodel/whisper_tokenizer.h"
#include "kvserve/model/whisper_generate.h"
#include "model_test_util.h"

namespace kvserve::model {
namespace {

using testing::TempDir;
using testing::write_file;

Status config_error(const std::string& text) {
  const Result<checkpoint::WhisperConfig> r = checkpoint::parse_whisper_config(text, "config.json");
  EXPECT_FALSE(r.is_ok()) << text;
  return r.is_ok() ? Status::ok() : r.status();
}

Status generation_error(const std::string& text) {
  const Result<checkpoint::WhisperGenerationConfig> r =
      checkpoint::parse_whisper_generation_config(text, "generation_config.json");
  EXPECT_FALSE(r.is_ok()) << text;
  return r.is_ok() ? Status::ok() : r.status();
}

void expect_message(const Status& s, StatusCode code, const std::string& text) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(text), std::string::npos) << s.message();
}

TEST(WhisperConfig, TinyPresetRoundTrips) {
  const makemodel::Preset p = makemodel::whisper_tiny_shape_preset();
  const Result<checkpoint::WhisperConfig> c = checkpoint::parse_whisper_config(
      makemodel::whisper_config_json_text(p.whisper, DType::kF32), "config.json");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->architecture_name, "WhisperForConditionalGeneration");
  EXPECT_EQ(c->d_model, 384);
  EXPECT_EQ(c->encoder_layers, 4);
  EXPECT_EQ(c->decoder_layers, 4);
  EXPECT_EQ(c->encoder_attention_heads, 6);
  EXPECT_EQ(c->decoder_attention_heads, 6);
  EXPECT_EQ(c->encoder_ffn_dim, 1536);
  EXPECT_EQ(c->decoder_ffn_dim, 1536);
  EXPECT_EQ(c->num_mel_bins, 80);
  EXPECT_EQ(c->vocab_size, 51865);
  EXPECT_EQ(c->max_source_positions, 1500);
  EXPECT_EQ(c->max_target_positions, 448);
  EXPECT_EQ(c->input_frames(), 3000);
  EXPECT_EQ(c->decoder_head_dim(), 64);
  EXPECT_FALSE(c->scale_embedding);
  EXPECT_EQ(c->torch_dtype, DType::kF32);
  EXPECT_EQ(c->decoder_start_token_id, 50258);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{50257});
  EXPECT_EQ(c->pad_token_id, 50257);
  EXPECT_DOUBLE_EQ(c->layer_norm_eps, 1e-5);
}

TEST(WhisperConfig, AbsentFieldsTakeTransformersDefaults) {
  const Result<checkpoint::WhisperConfig> c =
      checkpoint::parse_whisper_config(R"({"model_type": "whisper"})", "x");
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->d_model, 384);
  EXPECT_EQ(c->vocab_size, 51865);
  EXPECT_EQ(c->activation_function, "gelu");
  EXPECT_EQ(c->decoder_start_token_id, 50257);  // WhisperConfig's default
  EXPECT_EQ(c->bos_token_id, 50256);
  EXPECT_EQ(c->eos_token_ids, std::vector<int32_t>{50256});
  EXPECT_TRUE(c->tie_word_embeddings);
  const Result<checkpoint::WhisperConfig> v5 =
      checkpoint::parse_whisper_config(R"({"model_type": "whisper", "dtype": "bfloat16"})", "x");
  ASSERT_TRUE(v5.is_ok());
  EXPECT_EQ(v5->torch_dtype, DType::kBF16);
  const Result<checkpoint::WhisperConfig> null_pad =
      checkpoint::parse_whisper_config(R"({"model_type": "whisper", "pad_token_id": null})", "x");
  ASSERT_TRUE(null_pad.is_ok());
  EXPECT_FALSE(null_pad->pad_token_id.has_value());
}

TEST(WhisperConfig, ErrorsNameFileAndField) {
  expect_message(config_error(R"({"d_model": 64})"), StatusCode::kInvalidArgument,
                 "config.json: model_type: missing");
  expect_message(config_error(R"({"model_type": "llama"})"), StatusCode::kInvalidArgument,
                 "config.json: model_type: 'llama' is not a Whisper config");
  expect_message(
      config_error(
          R"({"model_type": "whisper", "architectures": ["WhisperForAudioClassification"]})"),
      StatusCode::kUnimplemented, "config.json: architectures: 'WhisperForAudioClassification'");
  expect_message(config_error(R"({"model_type": "whisper", "d_model": "384"})"),
                 StatusCode::kInvalidArgument,
                 "config.json: d_model: expected an integer, got string \"384\"");
  expect_message(config_error(R"({"model_type": "whisper", "decoder_layers": 0})"),
                 StatusCode::kInvalidArgument, "config.json: decoder_layers: must be positive");
  expect_message(config_error(R"({"model_type": "whisper", "d_model": 100})"),
                 StatusCode::kInvalidArgument,
                 "config.json: d_model (100) is not a multiple of encoder_attention_heads (6)");
  expect_message(config_error(R"({"model_type": "whisper", "d_model": 96,
                                  "encoder_attention_heads": 4, "decoder_attention_heads": 5})"),
                 StatusCode::kInvalidArgument, "decoder_attention_heads (5)");
  expect_message(config_error(R"({"model_type": "whisper", "activation_function": "relu"})"),
                 StatusCode::kUnimplemented,
                 "config.json: activation_function: 'relu' is not supported (supported: gelu)");
  expect_message(config_error(R"({"model_type": "whisper", "layer_norm_eps": 0})"),
                 StatusCode::kInvalidArgument, "config.json: layer_norm_eps: must be positive");
  expect_message(config_error(R"({"model_type": "whisper", "torch_dtype": "int8"})"),
                 StatusCode::kInvalidArgument, "config.json: torch_dtype: 'int8'");
  expect_message(config_error(R"({"model_type": "whisper", "tie_word_embeddings": false})"),
                 StatusCode::kUnimplemented, "config.json: tie_word_embeddings");
  expect_message(config_error(R"({"model_type": "whisper", "decoder_start_token_id": 99999})"),
                 StatusCode::kInvalidArgument, "decoder_start_token_id (99999) is outside");
  expect_message(config_error("[1, 2]"), StatusCode::kInvalidArgument,
                 "config.json: expected a JSON object");
  expect_message(config_error("{"), StatusCode::kInvalidArgument, "config.json");
}

TEST(WhisperConfig, LoadNamesTheFile) {
  TempDir dir;
  const Result<checkpoint::WhisperConfig> missing = checkpoint::load_whisper_config(dir.path());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  write_file(dir / "config.json", R"({"model_type": "whisper", "num_mel_bins": -1})");
  const Result<checkpoint::WhisperConfig> bad = checkpoint::load_whisper_config(dir.path());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find((dir / "config.json").string() + ": num_mel_bins"),
            std::string::npos)
      << bad.status().message();
  const Result<checkpoint::WhisperGenerationConfig> no_gen =
      checkpoint::load_whisper_generation_config(dir.path());
  ASSERT_FALSE(no_gen.is_ok());
  EXPECT_EQ(no_gen.status().code(), StatusCode::kNotFound);
}

TEST(WhisperGenerationConfig, PresetFileParses) {
  const makemodel::Preset p = makemodel::whisper_tiny_shape_preset();
  const Result<checkpoint::WhisperGenerationConfig> g = checkpoint::parse_whisper_generation_config(
      makemodel::whisper_generation_config_json_text(p.whisper), "generation_config.json");
  ASSERT_TRUE(g.is_ok()) << g.status().to_string();
  EXPECT_TRUE(g->is_multilingual);
  EXPECT_FALSE(g->return_timestamps);
  EXPECT_EQ(g->decoder_start_token_id, 50258);
  EXPECT_EQ(g->no_timestamps_token_id, 50363);
  EXPECT_EQ(g->max_length, 448);
  EXPECT_EQ(g->eos_token_ids, std::vector<int32_t>{50257});
  EXPECT_EQ(g->begin_suppress_tokens, (std::vector<int32_t>{220, 50257}));
  ASSERT_EQ(g->suppress_tokens.size(), 88u);
  EXPECT_EQ(g->suppress_tokens.front(), 1);
  EXPECT_EQ(g->suppress_tokens.back(), 50362);
  ASSERT_EQ(g->forced_decoder_ids.size(), 2u);
  EXPECT_EQ(g->forced_decoder_ids[0].first, 1);
  EXPECT_FALSE(g->forced_decoder_ids[0].second.has_value());
  EXPECT_EQ(g->forced_decoder_ids[1].second, 50359);
  EXPECT_EQ(g->lang_to_id.size(), 99u);
  EXPECT_EQ(g->language_id("en"), 50259);
  EXPECT_EQ(g->language_id("<|ja|>"), 50266);
  EXPECT_EQ(g->language_id("su"), 50357);
  EXPECT_FALSE(g->language_id("xx").has_value());
  EXPECT_EQ(g->task_id("transcribe"), 50359);
  EXPECT_EQ(g->task_id("translate"), 50358);
}

TEST(WhisperGenerationConfig, ErrorsNameFileAndField) {
  expect_message(generation_error(R"({"suppress_tokens": "1, 2"})"), StatusCode::kInvalidArgument,
                 "generation_config.json: suppress_tokens: expected an integer or a list");
  expect_message(generation_error(R"({"begin_suppress_tokens": [220, -1]})"),
                 StatusCode::kInvalidArgument,
                 "generation_config.json: begin_suppress_tokens: token id -1 is out of range");
  expect_message(generation_error(R"({"forced_decoder_ids": [[1]]})"), StatusCode::kInvalidArgument,
                 "generation_config.json: forced_decoder_ids: element 0: expected [position");
  expect_message(generation_error(R"({"lang_to_id": ["<|en|>"]})"), StatusCode::kInvalidArgument,
                 "generation_config.json: lang_to_id: expected an object");
  expect_message(generation_error(R"({"lang_to_id": {"<|en|>": "50259"}})"),
                 StatusCode::kInvalidArgument, "lang_to_id.<|en|>: expected an integer");
  expect_message(generation_error(R"({"max_length": 0})"), StatusCode::kInvalidArgument,
                 "generation_config.json: max_length: must be positive");
  expect_message(generation_error(R"({"is_multilingual": true})"), StatusCode::kInvalidArgument,
                 "is_multilingual is true but lang_to_id");
}

TEST(WhisperGenerate, PromptFollowsGenerationConfig) {
  const makemodel::Preset p = makemodel::whisper_test_preset();
  const checkpoint::WhisperGenerationConfig g = *checkpoint::parse_whisper_generation_config(
      makemodel::whisper_generation_config_json_text(p.whisper), "g");
  EXPECT_EQ(*whisper_prompt(p.whisper, g), (std::vector<int32_t>{50258, 50259, 50359, 50363}));
  EXPECT_EQ(*whisper_prompt(p.whisper, g, "de", "translate"),
            (std::vector<int32_t>{50258, 50261, 50358, 50363}));
  const auto bad = whisper_prompt(p.whisper, g, "klingon");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("unknown language 'klingon'"), std::string::npos);
  // English-only models: no language or task token; with timestamps: no <|notimestamps|>.
  checkpoint::WhisperGenerationConfig en = g;
  en.is_multilingual = false;
  en.return_timestamps = true;
  EXPECT_EQ(*whisper_prompt(p.whisper, en), (std::vector<int32_t>{50258}));
}

TEST(WhisperGenerate, SuppressionAtEveryStepAndAtTheBeginOnly) {
  checkpoint::WhisperGenerationConfig g;
  g.suppress_tokens = {1, 5, 1000};  // 1000: outside this vocabulary, ignored
  g.begin_suppress_tokens = {2, 6};
  std::vector<float> logits(8, 0.5f);
  apply_whisper_suppression(g, /*first_step=*/false, logits);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(std::isinf(logits[i]), i == 1 || i == 5) << i;
  logits.assign(8, 0.5f);
  apply_whisper_suppression(g, /*first_step=*/true, logits);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(std::isinf(logits[i]), i == 1 || i == 5 || i == 2 || i == 6) << i;
}

TEST(WhisperPresets, TokenizerAndPreprocessorFiles) {
  EXPECT_EQ(makemodel::whisper_language_codes().size(), 99u);
  const std::vector<std::string> specials = makemodel::whisper_special_tokens();
  EXPECT_EQ(specials[0], "<|endoftext|>");
  EXPECT_EQ(specials[makemodel::kWhisperNoCaptions - makemodel::kWhisperEndOfText],
            "<|nocaptions|>");
  EXPECT_EQ(specials[makemodel::kWhisperNoTimestamps - makemodel::kWhisperEndOfText],
            "<|notimestamps|>");
  EXPECT_EQ(specials[makemodel::kWhisperFirstTimestamp - makemodel::kWhisperEndOfText], "<|0.00|>");
  EXPECT_EQ(specials.back(), "<|30.00|>");
  const std::string pre =
      makemodel::whisper_preprocessor_config_json_text(makemodel::whisper_test_preset().whisper);
  EXPECT_NE(pre.find("\"feature_size\": 80"), std::string::npos);
  EXPECT_NE(pre.find("\"nb_max_frames\": 3000"), std::string::npos);
}

}  // namespace
}  // namespace kvserve::model

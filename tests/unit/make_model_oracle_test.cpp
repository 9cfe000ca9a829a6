// `kvserve make-model --preset tiny` against Hugging Face transformers: the GPU machine loaded the
// same checkpoint (tools/check_make_model.py, seed 0) with AutoTokenizer and
// AutoModelForCausalLM; tests/fixtures/make_model_hf/tiny.json holds what transformers produced.
// kvserve's tokenizer must give the same ids and its model the same greedy tokens.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "kvserve/engine/generate.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/host_kv_memory.h"
#include "kvserve/tokenizer/tokenizer.h"
#include "unit/model_test_util.h"

namespace kvserve {
namespace {

nlohmann::json load_fixture() {
  std::ifstream in(std::string(KVSERVE_FIXTURES_DIR) + "/make_model_hf/tiny.json");
  return nlohmann::json::parse(in);
}

TEST(MakeModelOracle, TinyTokenizerAndGreedyMatchTransformers) {
  const nlohmann::json want = load_fixture();
  model::testing::TempDir dir;
  makemodel::MakeModelOptions o;
  o.preset = "tiny";
  o.output = dir.path() / "tiny";
  o.seed = 0;
  ASSERT_TRUE(makemodel::make_model(o).is_ok());

  auto tok = tokenizer::Tokenizer::from_directory(o.output);
  ASSERT_TRUE(tok.is_ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->vocab_size(), want["tokenizer_len"].get<int32_t>());
  for (const auto& e : want["encoded"]) {
    const std::string text = e["text"];
    EXPECT_EQ((*tok)->encode(text, true), e["ids"].get<std::vector<int32_t>>()) << text;
    EXPECT_EQ((*tok)->encode(text, false), e["ids_no_special"].get<std::vector<int32_t>>()) << text;
  }

  model::ModelRunnerOptions ro;
  ro.max_total_tokens = 1024;
  auto runner = model::ModelRunner::create(o.output, ro);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  mem::HostKvMemory cache((*runner)->kv_shape());
  engine::SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_new_tokens = static_cast<int32_t>(want["greedy"].size());
  const std::vector<engine::GenerateRequest> reqs = {
      {want["prompt"].get<std::vector<int32_t>>(), sp}};
  auto out = engine::generate(**runner, cache, reqs);
  ASSERT_TRUE(out.is_ok()) << out.status().to_string();
  EXPECT_EQ((*out)[0].output_ids, want["greedy"].get<std::vector<int32_t>>());
}

}  // namespace
}  // namespace kvserve

// The shipped demo model (models/demo-lm, trained by tools/train_demo_lm.py): kvserve's held-out
// perplexity equals the training script's (transformers, float32, on the GPU machine) within 1%,
// the chat template answers in kind, and `kvserve generate` / `serve` use it by default.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "kvserve/engine/engine.h"
#include "kvserve/tokenizer/chat_template.h"
#include "unit/run_kvserve.h"

namespace kvserve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDemo = fs::path(KVSERVE_FIXTURES_DIR) / ".." / ".." / "models" / "demo-lm";

std::unique_ptr<engine::Engine> demo_engine() {
  engine::EngineOptions o;
  o.model_path = kDemo;
  o.runner.max_total_tokens = 8192;
  auto e = engine::Engine::create(o);
  EXPECT_TRUE(e.is_ok()) << e.status().to_string();
  return e.is_ok() ? std::move(e).value() : nullptr;
}

// Collects one request's events until it finishes, merged into one.
engine::StreamEvent collect(engine::RequestStream& stream) {
  engine::StreamEvent all;
  while (!all.finished) {
    engine::StreamEvent ev;
    if (!stream.pop(ev, std::chrono::milliseconds(60000))) break;
    all.token_ids.insert(all.token_ids.end(), ev.token_ids.begin(), ev.token_ids.end());
    if (!ev.input_logprobs.empty()) all.input_logprobs = ev.input_logprobs;
    all.finished = ev.finished;
    all.finish = ev.finish;
  }
  return all;
}

engine::StreamEvent run(engine::Engine& e, engine::SubmitRequest req) {
  auto stream = e.submit(req);
  EXPECT_TRUE(stream.is_ok()) << stream.status().to_string();
  return stream.is_ok() ? collect(**stream) : engine::StreamEvent{};
}

TEST(DemoModel, HeldOutPerplexityMatchesTraining) {
  std::ifstream f(kDemo / "eval.json");
  ASSERT_TRUE(f) << kDemo / "eval.json";
  const json eval = json::parse(f);
  auto e = demo_engine();
  ASSERT_NE(e, nullptr);
  // All sequences at once: the engine batches them (prefix reuse and batching must not change
  // a logprob).
  std::vector<std::vector<int32_t>> seqs;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (const auto& seq : eval["subset_sequences"]) {
    engine::SubmitRequest req;
    req.input_ids = seq.get<std::vector<int32_t>>();
    req.sampling.max_new_tokens = 1;
    req.sampling.temperature = 0;
    req.sampling.return_logprob = true;
    req.logprob_start_len = 0;
    auto stream = e->submit(req);
    ASSERT_TRUE(stream.is_ok()) << stream.status().to_string();
    seqs.push_back(req.input_ids);
    streams.push_back(std::move(stream).value());
  }
  double nll = 0;
  int64_t tokens = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const engine::StreamEvent out = collect(*streams[i]);
    // One logprob per prompt token after the first: log p(ids[i + 1] | ids[..i]).
    ASSERT_EQ(out.input_logprobs.size(), seqs[i].size() - 1);
    for (const float lp : out.input_logprobs)
      nll -= lp;
    tokens += static_cast<int64_t>(out.input_logprobs.size());
  }
  EXPECT_EQ(tokens, eval["subset_tokens"].get<int64_t>());
  const double ppl = std::exp(nll / static_cast<double>(tokens));
  const double reference = eval["subset_perplexity"].get<double>();
  std::cout << "[ demo-lm  ] held-out perplexity: kvserve " << ppl << ", transformers " << reference
            << " (" << tokens << " tokens)" << std::endl;
  EXPECT_NEAR(ppl / reference, 1.0, 0.01);
}

TEST(DemoModel, ChatTemplateAndSampledAnswers) {
  auto e = demo_engine();
  ASSERT_NE(e, nullptr);
  std::ifstream f(kDemo / "tokenizer_config.json");
  const json cfg = json::parse(f);
  auto tmpl = tokenizer::ChatTemplate::parse(cfg["chat_template"].get<std::string>());
  ASSERT_TRUE(tmpl.is_ok()) << tmpl.status().to_string();
  auto prompt = tmpl->render(json::array({{{"role", "user"}, {"content", "Tell me a fortune."}}}),
                             /*add_generation_prompt=*/true);
  ASSERT_TRUE(prompt.is_ok()) << prompt.status().to_string();
  EXPECT_EQ(*prompt, "<|im_start|>user\nTell me a fortune.<|im_end|>\n<|im_start|>assistant\n");
  // Sampled as generation_config.json says (greedy decoding of so small a model loops): most
  // answers are English and end with the end-of-turn token, as trained.
  int stopped = 0;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    engine::SubmitRequest req;
    req.input_ids = e->tokenizer()->encode(*prompt, false);
    req.sampling.max_new_tokens = 200;
    req.sampling.temperature = 0.8f;
    req.sampling.top_p = 0.95f;
    req.sampling.seed = seed;
    const engine::StreamEvent out = run(*e, req);
    stopped += out.finish.kind == engine::FinishKind::kStopToken ? 1 : 0;
    const std::string text = e->tokenizer()->decode(out.token_ids, true);
    int letters = 0;
    for (const char c : text)
      letters += std::isalpha(static_cast<unsigned char>(c)) ? 1 : 0;
    EXPECT_GT(letters, 10) << text;
    std::cout << "[ demo-lm  ] seed " << seed << ": " << text << std::endl;
  }
  EXPECT_GE(stopped, 3);
}

TEST(DemoModel, GenerateUsesItWithoutModelPath) {
  const auto r = testing_util::run_kvserve("generate --prompt 'The' --max-new-tokens 12 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("demo model"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"text\""), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvserve

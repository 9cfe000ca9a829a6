// Whisper with temperature > 0 (model::whisper_pick_token, WhisperRequest::temperature / seed):
//   * the pick: the first argmax at temperature 0; otherwise draws whose frequencies over many
//     (seed, step) pairs match a float64 softmax(row / temperature) within 5 standard errors,
//     never a suppressed (-inf) token, the same token for the same (seed, step);
//   * generation on a whisper-test checkpoint: a sampled request gives the same tokens alone and
//     batched with a greedy one and another seed, twice; temperature 0 is greedy; a negative
//     temperature is an error naming the request.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "kvserve/model/whisper_generate.h"
#include "support/whisper_test_util.h"
#include "unit/model_test_util.h"

namespace kvserve::model {
namespace {

TEST(WhisperPickToken, TemperatureZeroIsTheFirstArgmax) {
  const std::vector<float> row = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(whisper_pick_token(row, 0.0f, 1, 0), 1);
  EXPECT_EQ(whisper_pick_token(row, 0.0f, 99, 7), 1);
}

TEST(WhisperPickToken, DrawsFollowSoftmaxOverTemperature) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> row = {1.0f, -inf, 0.2f, 2.1f, -0.5f, -inf, 1.4f, 0.0f};
  for (const float temperature : {0.5f, 1.0f}) {
    SCOPED_TRACE("temperature " + std::to_string(temperature));
    // float64 reference.
    std::vector<double> p(row.size(), 0.0);
    double mx = -INFINITY, sum = 0;
    for (const float x : row)
      mx = std::max(mx, double(x) / temperature);
    for (size_t i = 0; i < row.size(); ++i)
      sum += (p[i] = std::isinf(row[i]) ? 0.0 : std::exp(double(row[i]) / temperature - mx));
    for (double& x : p)
      x /= sum;
    const int n = 40000;
    const uint64_t seed = 20261201;
    std::cout << "[ seed     ] " << seed << std::endl;
    std::vector<int> count(row.size(), 0);
    for (int i = 0; i < n; ++i)
      ++count.at(whisper_pick_token(row, temperature, seed + i / 4, i % 4));
    for (size_t t = 0; t < row.size(); ++t) {
      const double freq = double(count[t]) / n;
      const double se = std::sqrt(std::max(p[t] * (1 - p[t]), 1e-12) / n);
      EXPECT_LE(std::abs(freq - p[t]), 5 * se) << "token " << t << ": " << freq << " vs " << p[t];
      if (std::isinf(row[t])) {
        EXPECT_EQ(count[t], 0) << "suppressed token " << t << " drawn";
      }
    }
  }
  EXPECT_EQ(whisper_pick_token(row, 0.7f, 5, 3), whisper_pick_token(row, 0.7f, 5, 3));
}

WhisperRequest request(std::vector<float> features, float temperature, uint64_t seed) {
  WhisperRequest r;
  r.features = std::move(features);
  r.temperature = temperature;
  r.seed = seed;
  return r;
}

class WhisperSamplingTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    ASSERT_TRUE(testing::make_whisper_checkpoint("whisper-test", dir_->path() / "m").is_ok());
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static inline testing::TempDir* dir_ = nullptr;
};

TEST_F(WhisperSamplingTest, SampledRequestsAreReproducibleAndBatchIndependent) {
  auto runner =
      testing::make_whisper_runner(dir_->path() / "m", 16, mem::EncoderKvLayout::kAligned);
  ASSERT_NE(runner, nullptr);
  const checkpoint::WhisperConfig& c = runner->config();
  std::mt19937_64 rng(3);
  const std::vector<float> f = testing::random_features(rng, c.num_mel_bins, c.input_frames());
  const WhisperGenerateOptions o{.max_new_tokens = 12};
  const WhisperRequest sampled = request(f, 0.9f, 11);
  const WhisperRequest greedy = request(f, 0.0f, 0);
  const WhisperRequest other = request(f, 0.9f, 12);

  auto alone = whisper_generate(*runner, std::span(&sampled, 1), o);
  ASSERT_TRUE(alone.is_ok()) << alone.status().to_string();
  auto again = whisper_generate(*runner, std::span(&sampled, 1), o);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ((*again)[0].tokens, (*alone)[0].tokens);
  const std::vector<WhisperRequest> batch = {greedy, sampled, other};
  auto batched = whisper_generate(*runner, batch, o);
  ASSERT_TRUE(batched.is_ok()) << batched.status().to_string();
  EXPECT_EQ((*batched)[1].tokens, (*alone)[0].tokens);
  // Near-flat logits of random weights: sampling leaves the greedy path, and seeds differ.
  EXPECT_NE((*batched)[1].tokens, (*batched)[0].tokens);
  EXPECT_NE((*batched)[1].tokens, (*batched)[2].tokens);
  auto zero = whisper_generate(*runner, std::span(&greedy, 1), o);
  ASSERT_TRUE(zero.is_ok());
  EXPECT_EQ((*zero)[0].tokens, (*batched)[0].tokens);
  EXPECT_EQ(runner->allocator().available_size(), runner->allocator().size());
}

TEST_F(WhisperSamplingTest, NegativeTemperatureIsAnError) {
  auto runner = testing::make_whisper_runner(dir_->path() / "m", 1, mem::EncoderKvLayout::kAligned);
  ASSERT_NE(runner, nullptr);
  const std::vector<WhisperRequest> reqs = {request({}, 0.0f, 0), request({}, -0.5f, 0)};
  auto r = whisper_generate(*runner, reqs, {.max_new_tokens = 2});
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("request 1"), std::string::npos) << r.status().message();
  EXPECT_EQ(runner->allocator().available_size(), runner->allocator().size());
}

}  // namespace
}  // namespace kvserve::model

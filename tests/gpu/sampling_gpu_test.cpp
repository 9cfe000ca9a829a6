// ops::sample_rows on CUDA (platform/cuda/sampling.cu) against the host sampler (the CPU op) and
// the float64 reference (tests/support/sampling_reference.h), on random f32 logits with a few
// exact ties: tokens equal except rows where the reference shows a decision within 1e-5 relative
// of its boundary (counted and bounded); greedy rows equal always; a seeded row's token does not
// depend on its batch; the draw frequencies follow the kept distribution; logprobs within 1e-4.
// Skips itself without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "kvserve/platform/ops/sampling.h"
#include "kvserve/platform/platform.h"
#include "support/sampling_reference.h"

namespace kvserve {
namespace {

using ops::PenaltyEntry;
using ops::SampleRowParams;

// The batch's penalty entries in CSR form (what engine::PenaltyCsr builds; restated here so the
// suite links the platform alone): one entry per distinct token of the prompt or the output.
struct PenaltyRows {
  std::vector<int32_t> offsets{0};
  std::vector<PenaltyEntry> entries;
  void add_row(std::span<const int32_t> prompt, std::span<const int32_t> output) {
    std::map<int32_t, PenaltyEntry> row;
    for (const int32_t t : prompt) {
      row[t].token = t;
      row[t].in_prompt = 1;
    }
    for (const int32_t t : output) {
      row[t].token = t;
      ++row[t].output_count;
    }
    for (const auto& [t, e] : row)
      entries.push_back(e);
    offsets.push_back(static_cast<int32_t>(entries.size()));
  }
};

enum class Mode { kGreedy, kTemperature, kTopK, kTopP, kMinP, kCombined, kPenalties };
constexpr Mode kModes[] = {Mode::kGreedy, Mode::kTemperature, Mode::kTopK,     Mode::kTopP,
                           Mode::kMinP,   Mode::kCombined,    Mode::kPenalties};
const char* mode_name(Mode m) {
  static const char* names[] = {"greedy", "temperature", "top-k",    "top-p",
                                "min-p",  "combined",    "penalties"};
  return names[static_cast<int>(m)];
}

struct Batch {
  int64_t vocab = 0;
  std::vector<float> logits;  // [rows, vocab] raw
  std::vector<SampleRowParams> params;
  std::vector<std::vector<int32_t>> prompt, output;
  PenaltyRows csr;
  int64_t rows() const { return static_cast<int64_t>(params.size()); }
};

struct Out {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
};

class SamplingGpuTest : public testing::Test {
 protected:
  void SetUp() override {
    auto p = platform::create_platform(Device{DeviceKind::kCuda, 0});
    if (!p.is_ok()) GTEST_SKIP() << p.status().to_string();
    gpu_ = std::move(p).value();
    cpu_ = std::move(platform::create_platform(Device{DeviceKind::kCpu, 0})).value();
    seed_ = std::random_device{}();
    std::cout << "[ seed     ] " << seed_ << std::endl;
    rng_.seed(seed_);
  }

  std::vector<float> random_logits(int64_t vocab) {
    std::normal_distribution<float> d(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(vocab));
    for (float& v : x)
      v = d(rng_);
    for (int i = 0; i < 8; ++i)  // exact ties, as bf16-derived logits have
      x[rng_() % x.size()] = x[rng_() % x.size()];
    return x;
  }

  SampleRowParams row_params(Mode m, int64_t vocab) {
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    SampleRowParams p;
    p.temperature = 0.4f + 1.1f * unit(rng_);
    p.seed = rng_();
    p.step = static_cast<int64_t>(rng_() % 4096);
    switch (m) {
      case Mode::kGreedy:
        p.greedy = 1;
        break;
      case Mode::kTemperature:
        break;
      case Mode::kTopK:
        p.top_k = 1 + static_cast<int32_t>(rng_() % std::min<int64_t>(vocab, 100));
        break;
      case Mode::kTopP:
        p.top_p = 0.05f + 0.9f * unit(rng_);
        break;
      case Mode::kMinP:
        p.min_p = 0.2f * unit(rng_);
        break;
      case Mode::kCombined:
        p.top_k = 1 + static_cast<int32_t>(rng_() % std::min<int64_t>(vocab, 400));
        p.top_p = 0.5f + 0.45f * unit(rng_);
        p.min_p = 0.05f * unit(rng_);
        break;
      case Mode::kPenalties:
        p.repetition_penalty = 0.6f + 1.2f * unit(rng_);
        p.frequency_penalty = 2.0f * unit(rng_) - 1.0f;
        p.presence_penalty = 2.0f * unit(rng_) - 1.0f;
        p.top_p = unit(rng_) < 0.5f ? 0.9f : 1.0f;
        p.greedy = rng_() % 3 == 0 ? 1 : 0;
        break;
    }
    return p;
  }

  Batch random_batch(Mode m, int64_t vocab, int64_t rows) {
    Batch b;
    b.vocab = vocab;
    for (int64_t r = 0; r < rows; ++r) {
      const auto x = random_logits(vocab);
      b.logits.insert(b.logits.end(), x.begin(), x.end());
      b.params.push_back(row_params(m, vocab));
      std::vector<int32_t> prompt, output;
      if (m == Mode::kPenalties) {
        // The prompt and output reuse the likeliest tokens, so penalties change choices.
        for (int i = 0; i < 300; ++i)
          prompt.push_back(static_cast<int32_t>(rng_() % vocab));
        for (int i = 0; i < 40; ++i)
          output.push_back(static_cast<int32_t>(rng_() % 20));
      }
      b.prompt.push_back(prompt);
      b.output.push_back(output);
      b.csr.add_row(prompt, output);
    }
    return b;
  }

  template <typename T>
  Tensor upload(const std::vector<T>& v) {
    const size_t bytes = std::max<size_t>(1, v.size() * sizeof(T));
    auto t = gpu_->empty(DType::kU8, {static_cast<int64_t>(bytes)});
    KV_CHECK(t.is_ok(), "{}", t.status().to_string());
    if (!v.empty())
      gpu_->copy(t->data(), v.data(), v.size() * sizeof(T), platform::CopyKind::kHostToDevice);
    return std::move(t).value();
  }

  Out run_device(const Batch& b, bool logprobs,
                 ops::SampleSelect select = ops::SampleSelect::kBins) {
    Tensor logits = upload(b.logits);
    Tensor params = upload(b.params);
    Tensor offsets = upload(b.csr.offsets);
    Tensor entries = upload(b.csr.entries);
    Tensor tokens = upload(std::vector<int32_t>(static_cast<size_t>(b.rows())));
    Tensor lps = upload(std::vector<float>(static_cast<size_t>(b.rows())));
    ops::sample_rows(*gpu_,
                     {.logits = logits.data_as<float>(),
                      .rows = b.rows(),
                      .vocab = b.vocab,
                      .ld = b.vocab,
                      .row_params = params.data_as<const SampleRowParams>(),
                      .penalty_offsets = offsets.data_as<const int32_t>(),
                      .penalty_entries = entries.data_as<const PenaltyEntry>(),
                      .out_tokens = tokens.data_as<int32_t>(),
                      .out_logprobs = logprobs ? lps.data_as<float>() : nullptr},
                     {}, select);
    Out out;
    out.tokens.resize(static_cast<size_t>(b.rows()));
    out.logprobs.resize(static_cast<size_t>(b.rows()));
    gpu_->copy(out.tokens.data(), tokens.data(), out.tokens.size() * 4,
               platform::CopyKind::kDeviceToHost);
    gpu_->copy(out.logprobs.data(), lps.data(), out.logprobs.size() * 4,
               platform::CopyKind::kDeviceToHost);
    gpu_->synchronize();
    return out;
  }

  Out run_host(const Batch& b, bool logprobs) {
    std::vector<float> logits = b.logits;
    Out out;
    out.tokens.resize(static_cast<size_t>(b.rows()));
    out.logprobs.resize(static_cast<size_t>(b.rows()));
    ops::sample_rows(*cpu_, {.logits = logits.data(),
                             .rows = b.rows(),
                             .vocab = b.vocab,
                             .ld = b.vocab,
                             .row_params = b.params.data(),
                             .penalty_offsets = b.csr.offsets.data(),
                             .penalty_entries = b.csr.entries.data(),
                             .out_tokens = out.tokens.data(),
                             .out_logprobs = logprobs ? out.logprobs.data() : nullptr});
    return out;
  }

  test_support::ReferenceSample reference(const Batch& b, int64_t r) {
    std::vector<float> row(b.logits.begin() + r * b.vocab, b.logits.begin() + (r + 1) * b.vocab);
    test_support::reference_penalties(row, b.params[r], b.prompt[r], b.output[r]);
    return test_support::reference_sample(row, b.params[r]);
  }

  std::unique_ptr<platform::Platform> gpu_, cpu_;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
};

constexpr ops::SampleSelect kSelects[] = {ops::SampleSelect::kBins, ops::SampleSelect::kRadix};
const char* select_name(ops::SampleSelect s) {
  return s == ops::SampleSelect::kBins ? "bins" : "radix";
}

// Both kernels (the binned select, the default, and the radix select) against the host.
TEST_F(SamplingGpuTest, DeviceMatchesHostToken) {
  for (const ops::SampleSelect select : kSelects) {
    int compared = 0, skipped = 0, sampled_rows = 0;
    for (const int64_t vocab : {1000, 1001, 32000, 128256}) {
      for (const int64_t rows : {1, 7, 33}) {
        for (const Mode m : kModes) {
          const Batch b = random_batch(m, vocab, rows);
          const Out dev = run_device(b, false, select);
          const Out host = run_host(b, false);
          for (int64_t r = 0; r < rows; ++r) {
            const auto ref = reference(b, r);
            const bool greedy = b.params[r].greedy != 0;
            if (greedy) {
              ASSERT_EQ(dev.tokens[r], ref.token) << select_name(select) << " " << mode_name(m)
                                                  << " vocab " << vocab << " row " << r;
              ASSERT_EQ(host.tokens[r], ref.token);
              continue;
            }
            ++sampled_rows;
            if (ref.margin < 1e-5) {
              ++skipped;
              continue;
            }
            ++compared;
            ASSERT_EQ(host.tokens[r], ref.token)
                << mode_name(m) << " vocab " << vocab << " row " << r;
            ASSERT_EQ(dev.tokens[r], host.tokens[r])
                << select_name(select) << " " << mode_name(m) << " vocab " << vocab << " rows "
                << rows << " row " << r << " margin " << ref.margin << " kept " << ref.kept.size()
                << " k " << b.params[r].top_k << " p " << b.params[r].top_p << " min_p "
                << b.params[r].min_p << " t " << b.params[r].temperature;
          }
        }
      }
    }
    std::cout << "[ rows     ] " << select_name(select) << ": " << compared
              << " sampled rows equal, " << skipped << " of " << sampled_rows
              << " skipped within 1e-5 of a boundary" << std::endl;
    // The test compares most rows: a 128k-token row puts ~1e-5 of its mass on a typical token,
    // so a few % of draws land within 1e-5 of a boundary there (36 of 688 rows on the H200).
    EXPECT_GE(compared, sampled_rows * 9 / 10) << select_name(select);
  }
}

// Rows of 17, 75, 125 and 147 tiles of 2048 logits, 5 to a batch, split over clusters of up to 8
// CTAs (the size follows the batch: one wave of rows, the fewest tiles per SM slot): the CTAs'
// partial maxima, sums, bin counts, gathered tokens and chunk sums combine into the host's tokens
// and logprobs, with penalties on tokens of every CTA's segment.
TEST_F(SamplingGpuTest, RowsSplitOverClustersMatchHost) {
  int compared = 0, skipped = 0, sampled_rows = 0;
  for (const int64_t vocab : {34000, 152064, 256000, 300000}) {
    for (const Mode m : kModes) {
      const Batch b = random_batch(m, vocab, 5);
      const Out dev = run_device(b, true);
      const Out host = run_host(b, true);
      for (int64_t r = 0; r < b.rows(); ++r) {
        const auto ref = reference(b, r);
        if (b.params[r].greedy != 0) {
          ASSERT_EQ(dev.tokens[r], ref.token) << mode_name(m) << " vocab " << vocab << " row " << r;
        } else {
          ++sampled_rows;
          if (ref.margin < 1e-5) {
            ++skipped;
            continue;
          }
          ++compared;
          ASSERT_EQ(host.tokens[r], ref.token) << mode_name(m) << " vocab " << vocab;
          ASSERT_EQ(dev.tokens[r], host.tokens[r])
              << mode_name(m) << " vocab " << vocab << " row " << r << " margin " << ref.margin;
        }
        if (b.csr.offsets[r + 1] > b.csr.offsets[r]) {
          EXPECT_TRUE(std::isnan(dev.logprobs[r])) << r;
        } else {
          const std::span<const float> raw(b.logits.data() + r * vocab, static_cast<size_t>(vocab));
          EXPECT_NEAR(dev.logprobs[r], ops::cpu::token_logprob(raw, dev.tokens[r]), 1e-4)
              << mode_name(m) << " vocab " << vocab << " row " << r;
        }
      }
    }
  }
  std::cout << "[ rows     ] clusters: " << compared << " sampled rows equal, " << skipped << " of "
            << sampled_rows << " skipped within 1e-5 of a boundary" << std::endl;
  // Rows of 152k-300k tokens put ~4e-6 of their mass on a typical token, so more of their draws
  // land within 1e-5 of a boundary than the 128k rows above (19 of 114 on an H100).
  EXPECT_GE(compared, sampled_rows * 3 / 4);
}

TEST_F(SamplingGpuTest, SeededRowIgnoresItsBatch) {
  // The cluster size follows the batch: a 128k or 300k row alone runs on 8 CTAs, the 40-row batch
  // on 2-4 per row (a one-wave shape, possibly two CTAs per SM with partly cached segments), so
  // every row is cut differently alone and in the batch; its sums are fixed-point, so every token
  // and logprob must agree bit for bit.
  for (const int64_t vocab : {1000, 128256, 300000}) {
    for (const Mode m : {Mode::kTopP, Mode::kCombined, Mode::kPenalties}) {
      const Batch big = random_batch(m, vocab, 40);
      const Out all = run_device(big, true);
      for (int64_t r = 0; r < big.rows(); ++r) {
        Batch one;
        one.vocab = vocab;
        one.logits.assign(big.logits.begin() + r * vocab, big.logits.begin() + (r + 1) * vocab);
        one.params = {big.params[r]};
        one.prompt = {big.prompt[r]};
        one.output = {big.output[r]};
        one.csr.add_row(big.prompt[r], big.output[r]);
        const Out alone = run_device(one, true);
        ASSERT_EQ(alone.tokens[0], all.tokens[r])
            << mode_name(m) << " vocab " << vocab << " row " << r;
        ASSERT_EQ(std::bit_cast<uint32_t>(alone.logprobs[0]),
                  std::bit_cast<uint32_t>(all.logprobs[r]))
            << mode_name(m) << " vocab " << vocab << " row " << r << ": " << alone.logprobs[0]
            << " vs " << all.logprobs[r];
      }
    }
  }
}

// 256 rows of one logits row with 100 x 256 different seeds: each kept token's frequency within
// 5 standard errors + 2e-3 of the kept distribution, and no token outside the kept set.
TEST_F(SamplingGpuTest, DrawFrequenciesFollowTheKeptDistribution) {
  const int64_t vocab = 32000;
  std::vector<float> row = random_logits(vocab);
  // A head of 30 comparable tokens over a long tail, so top-p 0.9 keeps a score of them.
  std::normal_distribution<float> head(12.0f, 0.7f);
  for (int i = 0; i < 30; ++i)
    row[rng_() % vocab] = head(rng_);
  SampleRowParams p;
  p.temperature = 0.8f;
  p.top_k = 40;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  const auto ref = test_support::reference_sample(row, p);
  ASSERT_GT(ref.kept.size(), 3u);
  std::map<int32_t, int64_t> count;
  int64_t n = 0;
  for (int launch = 0; launch < 100; ++launch) {
    Batch b;
    b.vocab = vocab;
    for (int r = 0; r < 256; ++r) {
      b.logits.insert(b.logits.end(), row.begin(), row.end());
      p.seed = static_cast<uint64_t>(launch) * 256 + r;
      b.params.push_back(p);
      b.prompt.emplace_back();
      b.output.emplace_back();
      b.csr.add_row({}, {});
    }
    for (const int32_t t : run_device(b, false).tokens) {
      ++count[t];
      ++n;
    }
  }
  int64_t in_set = 0;
  for (size_t i = 0; i < ref.kept.size(); ++i) {
    const double f = static_cast<double>(count[ref.kept[i]]) / static_cast<double>(n);
    const double q = ref.probs[i];
    EXPECT_NEAR(f, q, 5 * std::sqrt(q * (1 - q) / static_cast<double>(n)) + 2e-3) << ref.kept[i];
    in_set += count[ref.kept[i]];
  }
  EXPECT_EQ(in_set, n);
}

// The binned kernel's draws over many (k, p, min_p, temperature) settings and edge cases (k = 1,
// a tiny p, min_p near 1, equal logits, -inf logits, vocabularies off the 4-logit and 2048-logit
// tiles, 128k rows): 256 rows of one logits row, 40 launches with steps 0 .. 10239 of one seed;
// no token outside the float64 reference's kept set, and a chi-square of the counts against the
// reference's kept distribution (kept tokens expected fewer than 5 times pooled into one cell)
// below df + 5 sqrt(2 df) + 10, far above the 1e-6 tail of a correct sampler; the total
// variation distance is printed.
TEST_F(SamplingGpuTest, DrawsMatchTheFilteredDistribution) {
  enum class Row { kNormal, kHead, kEqual, kMostlyMasked, kTiedMax };
  struct Setting {
    const char* name;
    int64_t vocab;
    Row row;
    float temperature;
    int32_t top_k;
    float top_p;
    float min_p;
  };
  const Setting settings[] = {
      {"combined head", 32000, Row::kHead, 0.8f, 40, 0.9f, 0.01f},
      {"top-k off the tiles", 32003, Row::kNormal, 1.0f, 50, 1.0f, 0.0f},
      {"top-p small vocab", 1001, Row::kNormal, 1.3f, -1, 0.7f, 0.0f},
      {"temperature only", 1001, Row::kNormal, 2.0f, -1, 1.0f, 0.0f},
      {"min-p only", 32000, Row::kNormal, 1.5f, -1, 1.0f, 0.1f},
      {"128k top-p min-p", 128256, Row::kHead, 0.7f, -1, 0.95f, 0.05f},
      {"128k combined", 128256, Row::kNormal, 1.2f, 2000, 0.99f, 0.0f},
      {"128k k=1 tied max", 128256, Row::kTiedMax, 1.0f, 1, 1.0f, 0.0f},
      {"p tiny", 32000, Row::kTiedMax, 0.9f, -1, 1e-6f, 0.0f},
      {"min-p near 1", 32000, Row::kTiedMax, 1.0f, -1, 1.0f, 0.999f},
      {"equal logits", 1000, Row::kEqual, 1.0f, 100, 0.5f, 0.0f},
      {"128k equal logits", 128256, Row::kEqual, 1.0f, -1, 0.001f, 0.0f},
      {"-inf top-k past the finite", 32000, Row::kMostlyMasked, 1.0f, 5000, 1.0f, 0.0f},
      {"-inf top-p", 32000, Row::kMostlyMasked, 0.7f, -1, 0.8f, 0.02f},
  };
  constexpr int kRows = 256;
  constexpr int kLaunches = 40;
  for (const Setting& st : settings) {
    std::vector<float> row;
    switch (st.row) {
      case Row::kNormal:
        row = random_logits(st.vocab);
        break;
      case Row::kHead: {
        row = random_logits(st.vocab);
        std::normal_distribution<float> head(12.0f, 0.7f);
        for (int i = 0; i < 30; ++i)
          row[rng_() % st.vocab] = head(rng_);
        break;
      }
      case Row::kEqual:
        row.assign(static_cast<size_t>(st.vocab), 1.5f);
        break;
      case Row::kMostlyMasked: {
        row = random_logits(st.vocab);
        for (float& v : row) {
          if (rng_() % 10 != 0) v = -INFINITY;
        }
        break;
      }
      case Row::kTiedMax: {
        row = random_logits(st.vocab);
        const float top = *std::max_element(row.begin(), row.end());
        for (int i = 0; i < 3; ++i)
          row[rng_() % st.vocab] = top;
        row[rng_() % st.vocab] = std::nextafter(top, -INFINITY);
        break;
      }
    }
    SampleRowParams p;
    p.temperature = st.temperature;
    p.top_k = st.top_k;
    p.top_p = st.top_p;
    p.min_p = st.min_p;
    p.seed = rng_();
    const auto ref = test_support::reference_sample(row, p);
    std::vector<float> rows;
    rows.reserve(static_cast<size_t>(kRows * st.vocab));
    for (int r = 0; r < kRows; ++r)
      rows.insert(rows.end(), row.begin(), row.end());
    Tensor logits = upload(rows);
    std::map<int32_t, int64_t> count;
    int64_t n = 0;
    for (int launch = 0; launch < kLaunches; ++launch) {
      std::vector<SampleRowParams> params(kRows, p);
      for (int r = 0; r < kRows; ++r)
        params[r].step = static_cast<int64_t>(launch) * kRows + r;
      Tensor dev_params = upload(params);
      Tensor tokens = upload(std::vector<int32_t>(kRows));
      ops::sample_rows(*gpu_, {.logits = logits.data_as<float>(),
                               .rows = kRows,
                               .vocab = st.vocab,
                               .ld = st.vocab,
                               .row_params = dev_params.data_as<const SampleRowParams>(),
                               .out_tokens = tokens.data_as<int32_t>()});
      std::vector<int32_t> got(kRows);
      gpu_->copy(got.data(), tokens.data(), kRows * sizeof(int32_t),
                 platform::CopyKind::kDeviceToHost);
      gpu_->synchronize();
      for (const int32_t t : got) {
        ++count[t];
        ++n;
      }
    }
    std::map<int32_t, double> q;
    for (size_t i = 0; i < ref.kept.size(); ++i)
      q[ref.kept[i]] = ref.probs[i];
    int64_t outside = 0;
    double tv = 0;
    for (const auto& [t, c] : count) {
      if (!q.contains(t)) {
        outside += c;
        tv += static_cast<double>(c) / static_cast<double>(n);
      }
    }
    double chi2 = 0;
    int cells = 0;
    double pooled_e = 0;
    int64_t pooled_o = 0;
    for (const auto& [t, prob] : q) {
      const double e = prob * static_cast<double>(n);
      const int64_t o = count.contains(t) ? count.at(t) : 0;
      tv += std::abs(static_cast<double>(o) / static_cast<double>(n) - prob);
      if (e >= 5) {
        chi2 += (static_cast<double>(o) - e) * (static_cast<double>(o) - e) / e;
        ++cells;
      } else {
        pooled_e += e;
        pooled_o += o;
      }
    }
    if (pooled_e >= 5) {
      chi2 += (static_cast<double>(pooled_o) - pooled_e) *
              (static_cast<double>(pooled_o) - pooled_e) / pooled_e;
      ++cells;
    }
    tv /= 2;
    const double df = std::max(1, cells - 1);
    std::cout << "[ draws    ] " << st.name << ": vocab " << st.vocab << ", kept "
              << ref.kept.size() << ", " << n << " draws, outside " << outside << ", chi2 " << chi2
              << " (df " << df << "), tv " << tv << ", margin " << ref.margin << std::endl;
    // A token beside the kept set only where the reference puts a decision within rounding.
    if (ref.margin >= 1e-5) {
      EXPECT_EQ(outside, 0) << st.name;
    }
    EXPECT_LE(outside, n / 1000) << st.name;
    if (cells > 1) {
      EXPECT_LT(chi2, df + 5 * std::sqrt(2 * df) + 10) << st.name;
    }
    if (ref.kept.size() == 1) {
      EXPECT_EQ(count[ref.kept[0]], n) << st.name;
    }
  }
}

TEST_F(SamplingGpuTest, LogprobsMatchHost) {
  for (const int64_t vocab : {1000, 128256}) {
    for (const Mode m : {Mode::kGreedy, Mode::kCombined, Mode::kPenalties}) {
      const Batch b = random_batch(m, vocab, 7);
      const Out dev = run_device(b, true);
      const Out host = run_host(b, true);
      for (int64_t r = 0; r < b.rows(); ++r) {
        if (dev.tokens[r] != host.tokens[r]) continue;  // a boundary row (counted above)
        const bool penalized = b.csr.offsets[r + 1] > b.csr.offsets[r];
        if (penalized) {
          EXPECT_TRUE(std::isnan(dev.logprobs[r])) << r;
          continue;
        }
        const std::span<const float> raw(b.logits.data() + r * vocab, static_cast<size_t>(vocab));
        EXPECT_NEAR(dev.logprobs[r], ops::cpu::token_logprob(raw, dev.tokens[r]), 1e-4)
            << mode_name(m) << " " << r;
        EXPECT_NEAR(dev.logprobs[r], host.logprobs[r], 1e-4);
      }
    }
  }
}

// Not a pass/fail on speed: the kernel's time for a 64 x 128256 batch (temperature + top-p, and
// the combined filters), printed for docs/perf; the tokens still match the host.
TEST_F(SamplingGpuTest, TimesABatchOf64) {
  for (const Mode m : {Mode::kGreedy, Mode::kTopP, Mode::kCombined}) {
    const Batch b = random_batch(m, 128256, 64);
    Tensor logits = upload(b.logits);
    Tensor params = upload(b.params);
    Tensor tokens = upload(std::vector<int32_t>(64));
    const ops::SampleRowsParams sp{.logits = logits.data_as<float>(),
                                   .rows = 64,
                                   .vocab = b.vocab,
                                   .ld = b.vocab,
                                   .row_params = params.data_as<const SampleRowParams>(),
                                   .penalty_offsets = nullptr,
                                   .penalty_entries = nullptr,
                                   .out_tokens = tokens.data_as<int32_t>(),
                                   .out_logprobs = nullptr};
    ops::sample_rows(*gpu_, sp);
    gpu_->synchronize();
    const int iters = 20;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      ops::sample_rows(*gpu_, sp);
    gpu_->synchronize();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count() /
        iters;
    std::cout << "[ time     ] " << mode_name(m) << " 64 x 128256: " << us << " us" << std::endl;
    std::vector<int32_t> got(64);
    gpu_->copy(got.data(), tokens.data(), 64 * 4, platform::CopyKind::kDeviceToHost);
    gpu_->synchronize();
    const Out host = run_host(b, false);
    int equal = 0;
    for (int r = 0; r < 64; ++r)
      equal += got[r] == host.tokens[r] ? 1 : 0;
    EXPECT_GE(equal, 62) << mode_name(m);
  }
}

}  // namespace
}  // namespace kvserve

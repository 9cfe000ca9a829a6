// Randomised model-based tests of the whole memory system (mem/simulator.h): at least 100,000
// random operations per page size, each followed by the invariant checker, a KV-content check
// and a comparison with a reference prefix cache. The seed is printed; set KVSERVE_TEST_SEED to
// replay one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

#include "kvserve/mem/simulator.h"

namespace kvserve::mem {
namespace {

uint64_t test_seed(uint64_t fallback) {
  if (const char* s = std::getenv("KVSERVE_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return fallback;
}

void run_and_expect_ok(SimulatorConfig cfg, int64_t steps) {
  std::cout << "[ seed     ] " << cfg.seed << " (page size " << cfg.page_size << ", "
            << (cfg.radix_cache ? "radix" : "chunk") << " cache)" << std::endl;
  MemorySimulator sim(cfg);
  const Status s = sim.run(steps);
  std::cout << "[ stats    ] " << sim.stats().to_string() << std::endl;
  ASSERT_TRUE(s.is_ok()) << "seed " << cfg.seed << ": " << s.message();
  // The run must actually have exercised the hard paths, or it proves little.
  const SimulatorStats& st = sim.stats();
  EXPECT_GT(st.admitted, steps / 10);
  EXPECT_GT(st.chunks, 0);
  EXPECT_GT(st.finished, 0);
  EXPECT_GT(st.rollbacks, 0);
  if (cfg.radix_cache) {
    EXPECT_GT(st.prefix_hit_tokens, 0);
    EXPECT_GT(st.evicted_tokens, 0);
  }
}

class SimulatorTest : public testing::TestWithParam<int32_t> {};

TEST_P(SimulatorTest, RadixLru100kOperations) {
  SimulatorConfig cfg;
  cfg.page_size = GetParam();
  cfg.seed = test_seed(1000 + GetParam());
  run_and_expect_ok(cfg, 100000);
}

TEST_P(SimulatorTest, RadixLfu) {
  SimulatorConfig cfg;
  cfg.page_size = GetParam();
  cfg.eviction_policy = EvictionPolicy::kLfu;
  cfg.seed = test_seed(2000 + GetParam());
  run_and_expect_ok(cfg, 20000);
}

TEST_P(SimulatorTest, ChunkCache) {
  SimulatorConfig cfg;
  cfg.page_size = GetParam();
  cfg.radix_cache = false;
  cfg.seed = test_seed(3000 + GetParam());
  run_and_expect_ok(cfg, 20000);
}

TEST_P(SimulatorTest, TightPoolExhaustsAndRecovers) {
  SimulatorConfig cfg;
  cfg.page_size = GetParam();
  cfg.pool_slots = 12 * std::max(GetParam(), 16);  // a few requests' worth
  cfg.seed = test_seed(4000 + GetParam());
  MemorySimulator sim(cfg);
  const Status s = sim.run(20000);
  std::cout << "[ stats    ] " << sim.stats().to_string() << std::endl;
  ASSERT_TRUE(s.is_ok()) << "seed " << cfg.seed << ": " << s.message();
  EXPECT_GT(sim.stats().admit_oom + sim.stats().decode_oom, 0);
  EXPECT_GT(sim.stats().admitted, 1000);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, SimulatorTest, testing::Values(1, 2, 16, 64, 128),
                         [](const testing::TestParamInfo<int32_t>& p) {
                           return "page" + std::to_string(p.param);
                         });

}  // namespace
}  // namespace kvserve::mem

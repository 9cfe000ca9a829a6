// kvserve self-check: the randomised memory-system check (mem/simulator.h).
#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <random>

#include "kvserve/cli/commands.h"
#include "kvserve/mem/simulator.h"

namespace kvserve::cli {
namespace {

struct SelfCheckOptions {
  int64_t steps = 20000;
  uint64_t seed = 0;  // 0: random
  std::vector<int32_t> page_sizes = {1, 16, 64};
  bool disable_radix_cache = false;
  std::string eviction_policy = "lru";
};

int run_self_check(const SelfCheckOptions& opt) {
  const auto policy = mem::parse_eviction_policy(opt.eviction_policy);
  if (!policy.is_ok()) {
    fmt::print(stderr, "kvserve: --radix-eviction-policy: {}\n", policy.status().message());
    return 2;
  }
  for (const int32_t ps : opt.page_sizes) {
    if (ps < 1) {
      fmt::print(stderr, "kvserve: --page-size must be >= 1, got {}\n", ps);
      return 2;
    }
  }
  const uint64_t seed = opt.seed != 0 ? opt.seed : std::random_device{}();
  fmt::print("memory self-check: {} cache, {} steps per page size, seed {}\n",
             opt.disable_radix_cache ? "chunk" : fmt::format("radix ({})", opt.eviction_policy),
             opt.steps, seed);
  bool ok = true;
  for (const int32_t ps : opt.page_sizes) {
    mem::SimulatorConfig cfg;
    cfg.page_size = ps;
    cfg.radix_cache = !opt.disable_radix_cache;
    cfg.eviction_policy = *policy;
    cfg.seed = seed + static_cast<uint64_t>(ps);
    mem::MemorySimulator sim(cfg);
    const auto t0 = std::chrono::steady_clock::now();
    const Status s = sim.run(opt.steps);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (s.is_ok()) {
      fmt::print("  page size {:>3}: ok in {:.0f} ms: {}\n", ps, ms, sim.stats().to_string());
    } else {
      ok = false;
      fmt::print("  page size {:>3}: FAILED (seed {}): {}\n", ps, cfg.seed, s.message());
    }
  }
  return ok ? 0 : 1;
}

}  // namespace

int run_default_self_check() {
  return run_self_check(SelfCheckOptions{});
}

Command add_self_check_command(CLI::App& app) {
  auto opt = std::make_shared<SelfCheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "self-check", "Drive the KV memory system with random operations against a reference model");
  cmd->add_option("--steps", opt->steps, "Operations per page size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", opt->seed, "Random seed (0: pick one and print it)");
  cmd->add_option("--page-size", opt->page_sizes, "Page sizes to check")->capture_default_str();
  cmd->add_flag("--disable-radix-cache", opt->disable_radix_cache,
                "Check the ChunkCache instead of the radix cache");
  cmd->add_option("--radix-eviction-policy", opt->eviction_policy, "lru or lfu")
      ->capture_default_str();
  return {cmd, [opt] { return run_self_check(*opt); }};
}

}  // namespace kvserve::cli

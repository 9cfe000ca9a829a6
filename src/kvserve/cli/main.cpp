// The kvserve command line. Subcommands follow SGLang's names where they exist.
//   kvserve                 version, platforms and a memory-system self-check
//   kvserve version
//   kvserve self-check      the randomised memory-system check (mem/simulator.h)
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <random>

#include "kvserve/core/logging.h"
#include "kvserve/core/version.h"
#include "kvserve/mem/simulator.h"
#include "kvserve/platform/platform.h"

namespace kvserve::cli {
namespace {

void print_version() {
  fmt::print("kvserve {} (CUDA platform {})\n", kVersion,
             platform::cuda_compiled() ? "built" : "not built");
}

void print_platforms() {
  fmt::print("platforms:\n");
  for (const auto& p : platform::list_platforms()) {
    fmt::print("  {:<8} {}\n", p.device.to_string(), p.description);
  }
}

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
  const uint64_t seed = opt.seed != 0 ? opt.seed : std::random_device{}();
  fmt::print("memory self-check: {} cache, {} steps per page size, seed {}\n",
             opt.disable_radix_cache ? "chunk" : fmt::format("radix ({})", opt.eviction_policy),
             opt.steps, seed);
  bool ok = true;
  for (const int32_t ps : opt.page_sizes) {
    if (ps < 1) {
      fmt::print(stderr, "kvserve: --page-size must be >= 1, got {}\n", ps);
      return 2;
    }
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

int main(int argc, char** argv) {
  CLI::App app{"kvserve: an LLM serving engine with SGLang's KV-cache design, in C++"};
  app.require_subcommand(0, 1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace, debug, info, warn or error")
      ->capture_default_str();

  auto* version = app.add_subcommand("version", "Print the version and the build's platforms");

  SelfCheckOptions check;
  auto* self_check = app.add_subcommand(
      "self-check", "Drive the KV memory system with random operations against a reference model");
  self_check->add_option("--steps", check.steps, "Operations per page size")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  self_check->add_option("--seed", check.seed, "Random seed (0: pick one and print it)");
  self_check->add_option("--page-size", check.page_sizes, "Page sizes to check")
      ->capture_default_str();
  self_check->add_flag("--disable-radix-cache", check.disable_radix_cache,
                       "Check the ChunkCache instead of the radix cache");
  self_check->add_option("--radix-eviction-policy", check.eviction_policy, "lru or lfu")
      ->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  if (!set_log_level(log_level)) {
    fmt::print(stderr, "kvserve: --log-level: unknown level '{}'\n", log_level);
    return 2;
  }

  try {
    if (*version) {
      print_version();
      print_platforms();
      return 0;
    }
    if (*self_check) return run_self_check(check);
    // No subcommand: what kvserve is and whether its memory system holds up on this machine.
    print_version();
    print_platforms();
    return run_self_check(check);
  } catch (const CheckError& e) {
    fmt::print(stderr, "kvserve: internal error (a bug, please report it): {}\n", e.what());
    return 70;
  }
}

}  // namespace kvserve::cli

int main(int argc, char** argv) {
  return kvserve::cli::main(argc, argv);
}

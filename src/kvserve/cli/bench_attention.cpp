// kvserve bench-attention: one attention kernel on a fragmented paged pool, as JSON (config,
// median ms, max error against the float64 reference; decode: GB/s and % of the device-to-device
// copy bandwidth measured in the same run; prefill: TFLOP/s and % of a stated peak).
//   kvserve bench-attention --device cuda --backend cuda-paged --batch 16 --seq-len 4096
//       --page-size 16 --num-q-heads 32 --num-kv-heads 8 --head-dim 128
//   kvserve bench-attention --mode prefill --batch 8 --seq-len 1024 --prefix-len 0
//       [--kernel decode-per-token] [--variant m128w8] [--no-causal]
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "kvserve/bench/attention.h"
#include "kvserve/cli/commands.h"

namespace kvserve::cli {

Command add_bench_attention_command(CLI::App& app) {
  struct Args {
    std::string device = "cuda";
    bench::AttentionBenchConfig config;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("bench-attention", "Time an attention kernel on a fragmented paged pool");
  cmd->add_option("--device", a->device)->capture_default_str();
  cmd->add_option("--backend", a->config.backend)->capture_default_str();
  cmd->add_option("--mode", a->config.mode, "decode or prefill")->capture_default_str();
  cmd->add_option("--kernel", a->config.kernel, "prefill mode: prefill or decode-per-token")
      ->capture_default_str();
  cmd->add_option("--variant", a->config.variant, "prefill tiles: auto, m64w4, m128w8, m128w4")
      ->capture_default_str();
  cmd->add_option("--prefix-len", a->config.prefix_len, "prefill mode: cached positions")
      ->capture_default_str();
  cmd->add_flag("!--no-causal", a->config.causal, "prefill mode: every query sees all positions");
  cmd->add_option("--peak-tflops", a->config.peak_tflops, "prefill mode: the % of peak's base")
      ->capture_default_str();
  cmd->add_option("--batch", a->config.batch)->capture_default_str();
  cmd->add_option("--seq-len", a->config.seq_len)->capture_default_str();
  cmd->add_option("--page-size", a->config.page_size)->capture_default_str();
  cmd->add_option("--num-q-heads", a->config.num_q_heads)->capture_default_str();
  cmd->add_option("--num-kv-heads", a->config.num_kv_heads)->capture_default_str();
  cmd->add_option("--head-dim", a->config.head_dim)->capture_default_str();
  cmd->add_option("--iters", a->config.iters)->capture_default_str();
  cmd->add_option("--num-splits", a->config.num_splits, "0: planned")->capture_default_str();
  cmd->add_option("--seed", a->config.seed)->capture_default_str();
  cmd->add_flag("!--no-check", a->config.check, "Skip the float64 reference");
  return {cmd, [a] {
            auto device = platform::parse_device(a->device);
            if (!device.is_ok()) {
              fmt::print(stderr, "kvserve bench-attention: --device: {}\n",
                         device.status().message());
              return 2;
            }
            auto p = platform::create_platform(*device);
            if (!p.is_ok()) {
              fmt::print(stderr, "kvserve bench-attention: {}\n", p.status().message());
              return 2;
            }
            auto r = bench::run_attention_bench(**p, a->config);
            if (!r.is_ok()) {
              fmt::print(stderr, "kvserve bench-attention: {}\n", r.status().message());
              return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
            }
            const auto& c = a->config;
            const bool prefill = c.mode == "prefill";
            nlohmann::ordered_json j = {
                {"backend", c.backend},          {"mode", c.mode},
                {"device", (*p)->description()}, {"batch", c.batch},
                {"seq_len", c.seq_len},          {"page_size", c.page_size},
                {"num_q_heads", c.num_q_heads},  {"num_kv_heads", c.num_kv_heads},
                {"head_dim", c.head_dim}};
            if (prefill) {
              j["prefix_len"] = c.prefix_len;
              j["causal"] = c.causal;
              j["kernel"] = r->variant;
            }
            j["num_splits"] = r->num_splits;
            j["median_ms"] = r->median_ms;
            if (prefill) {
              j["tflops"] = r->tflops;
              j["peak_tflops"] = c.peak_tflops;
              j["peak_pct"] = r->peak_pct;
              j["checked_queries"] = r->checked_queries;
            }
            j["kv_bytes"] = r->kv_bytes;
            j["gbps"] = r->gbps;
            if (!prefill) {
              j["copy_gbps"] = r->copy_gbps;
              j["roofline_pct"] = r->roofline_pct;
            }
            j["max_abs_err"] = r->max_abs_err;
            j["max_ulp_err"] = r->max_ulp_err;
            fmt::print("{}\n", j.dump());
            return 0;
          }};
}

}  // namespace kvserve::cli

// kvserve bench-attention: one attention kernel on a fragmented paged pool, as JSON (config,
// median ms, max error against the float64 reference; decode: GB/s and % of the device-to-device
// copy bandwidth measured in the same run; prefill: TFLOP/s and % of a stated peak).
//   kvserve bench-attention --device cuda --backend cuda-paged --batch 16 --seq-len 4096
//       --page-size 16 --num-q-heads 32 --num-kv-heads 8 --head-dim 128
//   kvserve bench-attention --mode prefill --batch 8 --seq-len 1024 --prefix-len 0
//       [--kernel decode-per-token] [--variant sm90,mma,m128w8] [--no-causal]
//   kvserve bench-attention --kernel decode,tc --batch 16,64 --seq-len 1024,4096 --no-check
//       (decode on tensor cores against the CUDA-core kernel; lists run every combination)
//   kvserve bench-attention --kernel tc --kv-dtype fp8_e4m3 (an fp8 pool: half the bytes)
#include <fmt/format.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kvserve/bench/attention.h"
#include "kvserve/cli/commands.h"
#include "kvserve/platform/kernel_switches_env.h"

namespace kvserve::cli {

namespace {

// One configuration: its JSON line on stdout (flushed), or the error on stderr.
int run_one(platform::Platform& platform, const bench::AttentionBenchConfig& c) {
  auto r = bench::run_attention_bench(platform, c);
  if (!r.is_ok()) {
    fmt::print(stderr, "kvserve bench-attention: {}\n", r.status().message());
    return r.status().code() == StatusCode::kInvalidArgument ? 2 : 1;
  }
  const bool prefill = c.mode == "prefill";
  nlohmann::ordered_json j = {{"backend", c.backend},
                              {"mode", c.mode},
                              {"device", platform.description()},
                              {"batch", c.batch},
                              {"seq_len", c.seq_len},
                              {"page_size", c.page_size},
                              {"num_q_heads", c.num_q_heads},
                              {"num_kv_heads", c.num_kv_heads},
                              {"head_dim", c.head_dim},
                              {"kv_dtype", dtype_name(c.kv_dtype)}};
  if (prefill) {
    j["prefix_len"] = c.prefix_len;
    j["causal"] = c.causal;
  }
  if (c.window_left >= 0) j["window_left"] = c.window_left;
  if (c.logit_softcap > 0) j["logit_softcap"] = c.logit_softcap;
  j["kernel"] = r->variant;
  j["num_splits"] = r->num_splits;
  if (!prefill && r->ctas_per_sm > 0) j["ctas_per_sm"] = r->ctas_per_sm;
  if (!prefill && c.flush_l2) j["flush_l2"] = true;
  if (!prefill && c.layers > 0) j["layers"] = c.layers;
  if (!prefill && !c.early_loads) j["early_loads"] = false;
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
  std::fflush(stdout);  // a later configuration that crashes keeps this line
  return 0;
}

}  // namespace

Command add_bench_attention_command(CLI::App& app) {
  struct Args {
    std::string device = "cuda";
    bench::AttentionBenchConfig config;
    // Comma-separated lists: every combination runs, one JSON line each (kernel innermost).
    std::vector<int32_t> batches = {16};
    std::vector<int32_t> seq_lens = {4096};
    std::vector<int32_t> page_sizes = {16};
    std::vector<int32_t> splits = {0};
    std::vector<std::string> variants = {"auto"};
    std::vector<std::string> kernels = {""};
    std::string kv_dtype = "bf16";
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd =
      app.add_subcommand("bench-attention", "Time an attention kernel on a fragmented paged pool");
  cmd->add_option("--device", a->device)->capture_default_str();
  cmd->add_option("--backend", a->config.backend)->capture_default_str();
  cmd->add_option("--mode", a->config.mode, "decode or prefill")->capture_default_str();
  cmd->add_option("--kernel", a->kernels,
                  "decode mode: decode (default) or tc (tensor cores); prefill mode: prefill "
                  "(default) or decode-per-token; a comma-separated list runs each")
      ->delimiter(',');
  cmd->add_option(
         "--variant", a->variants,
         "prefill kernel: auto, sm90 (Hopper wgmma), sm90pp (sm90, ping-pong consumers), mma "
         "(mma.sync, tile by shape), m64w4, "
         "m128w8, m128w4; decode tc stages: auto, s2, s3, s4")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--prefix-len", a->config.prefix_len, "prefill mode: cached positions")
      ->capture_default_str();
  cmd->add_flag("!--no-causal", a->config.causal, "prefill mode: every query sees all positions");
  cmd->add_flag("--contiguous", a->config.contiguous,
                "prefill mode: contiguous K/V rows, no page list (needs --page-size 1)");
  cmd->add_option("--window-left", a->config.window_left,
                  "sliding window: a query at p sees positions [p - window_left, p] (-1: none)")
      ->capture_default_str();
  cmd->add_option("--logit-softcap", a->config.logit_softcap,
                  "attention soft-capping: score = cap * tanh(score / cap) (0: none)")
      ->capture_default_str();
  cmd->add_option("--peak-tflops", a->config.peak_tflops, "prefill mode: the % of peak's base")
      ->capture_default_str();
  cmd->add_option("--batch", a->batches, "a comma-separated list runs each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--seq-len", a->seq_lens, "a comma-separated list runs each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--page-size", a->page_sizes, "a comma-separated list runs each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--num-q-heads", a->config.num_q_heads)->capture_default_str();
  cmd->add_option("--num-kv-heads", a->config.num_kv_heads)->capture_default_str();
  cmd->add_option("--head-dim", a->config.head_dim)->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype,
                  "the pool's dtype: bf16, fp8_e4m3 or fp8_e5m2 (quantised with scale 1)")
      ->capture_default_str();
  cmd->add_option("--iters", a->config.iters)->capture_default_str();
  cmd->add_option("--num-splits", a->splits, "0: planned; a comma-separated list runs each")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--tokens-per-split", a->config.tokens_per_split,
                  "with --num-splits: the chunk (0: ceil(seq-len / splits))")
      ->capture_default_str();
  cmd->add_option("--min-tokens-per-split", a->config.min_tokens_per_split,
                  "decode: > 0 per-request splits, 0 every request cut alike, -1 the plan's")
      ->capture_default_str();
  cmd->add_flag("--flush-l2", a->config.flush_l2,
                "decode: overwrite 256 MiB between timed launches (cold L2)");
  cmd->add_option("--layers", a->config.layers,
                  "decode: time N launches queued back to back, each over its own K/V copy "
                  "(a decode step's layers), and report the time per launch (0: each launch "
                  "alone between events)")
      ->capture_default_str();
  cmd->add_flag("!--no-early-loads", a->config.early_loads,
                "decode, tensor cores: wait for the preceding kernel before any read (the "
                "metadata and first K/V tiles are otherwise read before the wait, as a decode "
                "step does)");
  cmd->add_option("--seed", a->config.seed)->capture_default_str();
  cmd->add_flag("!--no-check", a->config.check, "Skip the float64 reference");
  return {cmd, [a] {
            if (!parse_dtype(a->kv_dtype, &a->config.kv_dtype)) {
              fmt::print(stderr, "kvserve bench-attention: --kv-dtype {}: unknown dtype\n",
                         a->kv_dtype);
              return 2;
            }
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
            // The kernels' A/B switches (PDL; the defaults of --variant auto / stages auto).
            auto switches = platform::kernel_switches_from_env();
            if (!switches.is_ok()) {
              fmt::print(stderr, "kvserve bench-attention: {}\n", switches.status().message());
              return 2;
            }
            (*p)->set_kernel_switches(*switches);
            for (const int32_t batch : a->batches) {
              for (const int32_t seq : a->seq_lens) {
                for (const int32_t page : a->page_sizes) {
                  for (const int32_t splits : a->splits) {
                    for (const std::string& variant : a->variants) {
                      for (const std::string& kernel : a->kernels) {
                        bench::AttentionBenchConfig c = a->config;
                        c.batch = batch;
                        c.seq_len = seq;
                        c.page_size = page;
                        c.num_splits = splits;
                        c.variant = variant;
                        c.kernel = kernel;
                        const int rc = run_one(**p, c);
                        if (rc != 0) return rc;
                      }
                    }
                  }
                }
              }
            }
            return 0;
          }};
}

}  // namespace kvserve::cli

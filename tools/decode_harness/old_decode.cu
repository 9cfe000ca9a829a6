// main's tensor-core decode kernel and split plan, for the harness's old-vs-new timing. Compiled
// against main's sources (build.sh exports them) with -Dkvserve=kvserve_old, so its symbols do not
// collide with this branch's kernel linked into the same program.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "harness_args.h"
#include "kvserve/platform/cuda/paged_decode_tc.h"
#include "kvserve/platform/ops/paged_decode_params.h"
#include "kvserve/platform/ops/paged_prefill_params.h"

namespace kvserve::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* expr,
                               const std::string& values, const std::string& context) {
  std::fprintf(stderr, "old kernel: %s:%d: CHECK failed: %s (%s): %s\n", file, line, expr,
               values.c_str(), context.c_str());
  std::abort();
}
}  // namespace kvserve::detail

namespace decode_harness {

// main's plan_paged_decode_tc (platform/ops/paged_prefill.cpp at main), 3 stages.
OldPlan old_plan(const DecodeArgs& a, int32_t num_sms) {
  using namespace kvserve::ops;
  const int32_t max_seq_len = a.max_seq_len;
  constexpr int32_t kMinTokensPerSplit = 2 * kDecodeTcTileTokens;
  constexpr int32_t kMaxSplits = 64;
  constexpr double kGoodFill = 0.9;
  const int64_t slots =
      std::max<int64_t>(1, int64_t{num_sms} * decode_tc_ctas_per_sm(a.head_dim, 3));
  const int64_t base = std::max<int64_t>(1, int64_t{a.batch} * a.num_kv_heads);
  int32_t want = 1;
  if (base < slots) {
    double best = 0;
    for (int32_t s = 1; s <= kMaxSplits; ++s) {
      const int64_t blocks = base * s;
      const int64_t waves = (blocks + slots - 1) / slots;
      const double fill = static_cast<double>(blocks) / static_cast<double>(waves * slots);
      if (fill > best + 1e-12) {
        best = fill;
        want = s;
      }
      if (fill >= kGoodFill) {
        want = s;
        break;
      }
    }
  }
  const int64_t most =
      std::max<int64_t>(1, (int64_t{max_seq_len} + kMinTokensPerSplit - 1) / kMinTokensPerSplit);
  OldPlan plan;
  plan.num_splits = static_cast<int32_t>(std::min<int64_t>(want, most));
  const int64_t per = (std::max<int64_t>(max_seq_len, 1) + plan.num_splits - 1) / plan.num_splits;
  plan.tokens_per_split = static_cast<int32_t>((per + kDecodeTcTileTokens - 1) /
                                               kDecodeTcTileTokens * kDecodeTcTileTokens);
  plan.min_tokens_per_split = kMinTokensPerSplit;
  if (plan.num_splits > 1) {
    plan.workspace_floats = static_cast<size_t>(a.batch) * a.num_q_heads * plan.num_splits *
                            (static_cast<size_t>(a.head_dim) + 1);
  }
  return plan;
}

void old_decode(const DecodeArgs& a, const OldPlan& plan, float* workspace, void* stream) {
  kvserve::ops::PagedDecodeParams p;
  p.q = a.q;
  p.k_cache = a.k_cache;
  p.v_cache = a.v_cache;
  p.page_indptr = a.page_indptr;
  p.page_ids = a.page_ids;
  p.seq_lens = a.seq_lens;
  p.out = a.out;
  if (plan.num_splits > 1) {
    p.partial_out = workspace;
    p.partial_lse =
        workspace + static_cast<size_t>(a.batch) * a.num_q_heads * plan.num_splits * a.head_dim;
  }
  p.batch = a.batch;
  p.num_q_heads = a.num_q_heads;
  p.num_kv_heads = a.num_kv_heads;
  p.head_dim = a.head_dim;
  p.page_size = a.page_size;
  p.num_splits = plan.num_splits;
  p.tokens_per_split = plan.tokens_per_split;
  p.min_tokens_per_split = plan.min_tokens_per_split;
  p.sm_scale = a.sm_scale;
  kvserve::platform::cuda::paged_decode_tc(p, 3, kvserve::platform::StreamHandle{stream});
}

}  // namespace decode_harness

// The decode harness's neutral view of one paged decode launch: plain pointers and sizes, no
// kvserve types, so that main's kernel (old_decode.cu, compiled in a namespace of its own) and
// this branch's (decode_harness.cpp) can be driven from one program.
#pragma once

#include <cstdint>

namespace decode_harness {

struct DecodeArgs {
  const void* q = nullptr;  // [batch, num_q_heads, head_dim] bf16
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  const int32_t* page_indptr = nullptr;
  const int32_t* page_ids = nullptr;
  const int32_t* seq_lens = nullptr;
  void* out = nullptr;
  int32_t batch = 0;
  int32_t num_q_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t page_size = 1;
  int32_t max_seq_len = 0;
  float sm_scale = 0;
};

// main's kernel with main's split plan (3 stages for head_dim 128): the splits it chose, and the
// floats of workspace it needs (0 without splitting). `workspace` must hold that many.
struct OldPlan {
  int32_t num_splits = 1;
  int32_t tokens_per_split = 0;
  int32_t min_tokens_per_split = 0;
  size_t workspace_floats = 0;
};
OldPlan old_plan(const DecodeArgs& a, int32_t num_sms);
void old_decode(const DecodeArgs& a, const OldPlan& plan, float* workspace, void* stream);

}  // namespace decode_harness

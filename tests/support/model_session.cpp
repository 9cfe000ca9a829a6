#include "support/model_session.h"

#include "kvserve/core/check.h"
#include "kvserve/mem/allocation.h"

namespace kvserve::test_support {

ModelSession::ModelSession(model::ModelRunner& runner, size_t num_requests)
    : runner_(runner),
      cache_(runner.req_to_token(), runner.allocator()),
      kv_(num_requests),
      tokens_(num_requests) {}

ModelSession::~ModelSession() {
  const mem::KvMemory memory{runner_.req_to_token(), runner_.allocator(), cache_};
  for (size_t b = 0; b < kv_.size(); ++b) {
    if (kv_[b].row != mem::kNoRow) mem::release_kv_cache(memory, kv_[b], tokens_[b], false);
  }
}

mem::ForwardBatch ModelSession::batch(const std::vector<std::vector<int32_t>>& add, bool decode) {
  const mem::KvMemory memory{runner_.req_to_token(), runner_.allocator(), cache_};
  std::vector<mem::KvReqState*> states;
  std::vector<int32_t> seq_lens;
  std::vector<mem::ForwardRequest> fwd;
  for (size_t b = 0; b < kv_.size(); ++b) {
    states.push_back(&kv_[b]);
    const int32_t prefix = kv_[b].kv_allocated_len;
    if (kv_[b].row != mem::kNoRow) {
      const auto row = runner_.req_to_token().row(kv_[b].row, 0, prefix);
      kv_[b].prefix_indices.assign(row.begin(), row.end());
    }
    seq_lens.push_back(prefix + static_cast<int32_t>(add[b].size()));
    tokens_[b].insert(tokens_[b].end(), add[b].begin(), add[b].end());
  }
  std::vector<int32_t> loc;
  Status s = decode ? mem::alloc_for_decode(memory, states, loc)
                    : mem::alloc_for_extend(memory, states, seq_lens, loc);
  KV_CHECK(s.is_ok(), "{}", s.to_string());
  for (size_t b = 0; b < kv_.size(); ++b) {
    fwd.push_back({kv_[b].row, seq_lens[b] - static_cast<int32_t>(add[b].size()), add[b]});
  }
  return mem::make_forward_batch(decode ? mem::ForwardMode::kDecode : mem::ForwardMode::kExtend,
                                 fwd, std::move(loc), runner_.req_to_token(), runner_.kv_pool());
}

std::vector<float> ModelSession::logits(const std::vector<std::vector<int32_t>>& add, bool decode) {
  mem::ForwardBatch b = batch(add, decode);
  std::vector<float> out;
  const Status s = runner_.forward(b, out);
  KV_CHECK(s.is_ok(), "{}", s.to_string());
  return out;
}

}  // namespace kvserve::test_support

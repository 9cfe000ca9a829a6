#include "support/model_session.h"

#include "kvserve/core/check.h"
#include "kvserve/mem/batch_lifecycle.h"

namespace kvserve::test_support {

ModelSession::ModelSession(model::ModelRunner& runner, size_t num_requests)
    : runner_(runner),
      memory_(runner.kv_shape(), mem::PrefixCacheKind::kChunk),
      kv_(num_requests),
      tokens_(num_requests) {}

ModelSession::~ModelSession() {
  for (size_t b = 0; b < kv_.size(); ++b) {
    if (kv_[b].row != mem::kNoRow) mem::release_kv_cache(memory_.view(), kv_[b], tokens_[b], false);
  }
}

mem::ForwardBatch ModelSession::batch(const std::vector<std::vector<int32_t>>& add, bool decode) {
  std::vector<mem::BatchEntry> entries;
  for (size_t b = 0; b < kv_.size(); ++b) {
    // An extend over what a request has reuses its whole row as the prefix.
    if (!decode && kv_[b].row != mem::kNoRow) {
      const auto row = memory_.req_to_token().row(kv_[b].row, 0, kv_[b].kv_allocated_len);
      kv_[b].prefix_indices.assign(row.begin(), row.end());
    }
    tokens_[b].insert(tokens_[b].end(), add[b].begin(), add[b].end());
    entries.push_back({&kv_[b], add[b]});
  }
  auto prepared = decode ? mem::prepare_decode(memory_.view(), entries)
                         : mem::prepare_extend(memory_.view(), entries);
  KV_CHECK(prepared.is_ok(), "{}", prepared.status().to_string());
  return std::move(prepared).value();
}

std::vector<float> ModelSession::logits(const std::vector<std::vector<int32_t>>& add, bool decode) {
  mem::ForwardBatch b = batch(add, decode);
  std::vector<float> out;
  const Status s = runner_.forward(b, out);
  KV_CHECK(s.is_ok(), "{}", s.to_string());
  return out;
}

}  // namespace kvserve::test_support

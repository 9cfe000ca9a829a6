#include "kvserve/server/output_collector.h"

namespace kvserve::server {

OutputCollector::OutputCollector(const tokenizer::Tokenizer* tokenizer,
                                 std::vector<std::string> stop_strings, bool skip_special_tokens)
    : tokenizer_(tokenizer), stop_strings_(std::move(stop_strings)) {
  if (tokenizer_ != nullptr) {
    detok_ = std::make_unique<tokenizer::IncrementalDetokenizer>(*tokenizer_, skip_special_tokens);
  }
}

std::string OutputCollector::consume(const engine::StreamEvent& e) {
  for (size_t i = 0; i < e.token_ids.size(); ++i) {
    output_ids_.push_back(e.token_ids[i]);
    if (detok_) pending_ += detok_->push(e.token_ids[i]);
  }
  logprobs_.insert(logprobs_.end(), e.logprobs.begin(), e.logprobs.end());
  top_.insert(top_.end(), e.top_logprobs.begin(), e.top_logprobs.end());
  if (!e.input_logprobs.empty()) input_logprobs_ = e.input_logprobs;
  prompt_tokens_ = e.prompt_tokens;
  completion_tokens_ = e.completion_tokens;
  cached_tokens_ = e.cached_tokens;
  if (e.finished) {
    finished_ = true;
    finish_ = e.finish;
    if (detok_) pending_ += detok_->finish();
  }
  // A stop string that appeared: cut there (it and everything after never reach the client).
  // It lies within pending_: emitted text never ends with a proper prefix of a stop string.
  std::string out;
  size_t cut = std::string::npos;
  for (const std::string& s : stop_strings_) {
    if (!s.empty()) cut = std::min(cut, pending_.find(s));
  }
  if (stop_hit_) {
    pending_.clear();
    return out;
  }
  if (cut != std::string::npos) {
    stop_hit_ = true;
    out = pending_.substr(0, cut);
    pending_.clear();
    text_ += out;
    return out;
  }
  size_t keep = 0;  // longest tail of pending_ that is a proper prefix of a stop string
  if (!finished_) {
    for (const std::string& s : stop_strings_) {
      for (size_t n = std::min(s.size() - 1, pending_.size()); n > keep; --n) {
        if (pending_.compare(pending_.size() - n, n, s, 0, n) == 0) {
          keep = n;
          break;
        }
      }
    }
  }
  out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  text_ += out;
  return out;
}

}  // namespace kvserve::server

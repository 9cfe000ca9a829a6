// Turns one engine request's events into text for a client: incremental, UTF-8-safe
// detokenization (never half a character), stop strings trimmed (text that could be the start
// of a stop string is held back until it cannot be), logprobs and usage accumulated.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvserve/engine/request_stream.h"
#include "kvserve/tokenizer/tokenizer.h"

namespace kvserve::server {

class OutputCollector {
 public:
  OutputCollector(const tokenizer::Tokenizer* tokenizer, std::vector<std::string> stop_strings,
                  bool skip_special_tokens);

  // Consumes one event; returns the new text it makes final (possibly empty).
  std::string consume(const engine::StreamEvent& e);

  bool finished() const { return finished_; }
  // A stop string appeared in the text (the engine normally finishes the request on the same
  // token; if it has not, the caller aborts it).
  bool stop_string_hit() const { return stop_hit_; }
  const engine::FinishReason& finish() const { return finish_; }
  const std::string& text() const { return text_; }  // everything emitted so far
  const std::vector<int32_t>& output_ids() const { return output_ids_; }
  const std::vector<float>& logprobs() const { return logprobs_; }
  const std::vector<std::vector<std::pair<int32_t, float>>>& top_logprobs() const { return top_; }
  const std::vector<float>& input_logprobs() const { return input_logprobs_; }
  int32_t prompt_tokens() const { return prompt_tokens_; }
  int32_t completion_tokens() const { return completion_tokens_; }
  int32_t cached_tokens() const { return cached_tokens_; }

 private:
  const tokenizer::Tokenizer* tokenizer_;
  std::vector<std::string> stop_strings_;
  std::unique_ptr<tokenizer::IncrementalDetokenizer> detok_;
  std::string pending_;  // decoded but held back (a possible stop-string prefix)
  std::string text_;
  bool finished_ = false;
  bool stop_hit_ = false;
  engine::FinishReason finish_;
  std::vector<int32_t> output_ids_;
  std::vector<float> logprobs_;
  std::vector<std::vector<std::pair<int32_t, float>>> top_;
  std::vector<float> input_logprobs_;
  int32_t prompt_tokens_ = 0;
  int32_t completion_tokens_ = 0;
  int32_t cached_tokens_ = 0;
};

}  // namespace kvserve::server

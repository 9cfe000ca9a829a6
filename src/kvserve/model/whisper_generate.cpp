#include "kvserve/model/whisper_generate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/platform/ops/sampling.h"

namespace kvserve::model {
namespace {

// The first index of the maximum, as torch.argmax.
int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Frees every request's row and slots on every exit path.
class KvRelease {
 public:
  KvRelease(const mem::KvMemory& memory, std::vector<mem::KvReqState>& states)
      : memory_(memory), states_(states) {}
  ~KvRelease() {
    for (mem::KvReqState& s : states_)
      release(s);
  }
  void release(mem::KvReqState& s) {
    if (s.row != mem::kNoRow) mem::release_kv_cache(memory_, s, {}, /*insert=*/false);
  }

 private:
  mem::KvMemory memory_;
  std::vector<mem::KvReqState>& states_;
};

}  // namespace

int32_t whisper_pick_token(std::span<const float> suppressed_row, float temperature, uint64_t seed,
                           int64_t step) {
  if (temperature <= 0.0f) return argmax(suppressed_row);
  return ops::cpu::sample_row(suppressed_row,
                              {.temperature = temperature, .seed = seed, .step = step});
}

void apply_whisper_suppression(const checkpoint::WhisperGenerationConfig& g, bool first_step,
                               std::span<float> logits) {
  const auto suppress = [&](const std::vector<int32_t>& ids) {
    for (const int32_t id : ids) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) {
        logits[id] = -std::numeric_limits<float>::infinity();
      }
    }
  };
  suppress(g.suppress_tokens);
  if (first_step) suppress(g.begin_suppress_tokens);
}

Result<std::vector<WhisperGenerateResult>> whisper_generate(
    WhisperRunner& runner, std::span<const WhisperRequest> requests,
    const WhisperGenerateOptions& o) {
  const checkpoint::WhisperConfig& c = runner.config();
  const checkpoint::WhisperGenerationConfig& g = runner.generation_config();
  const auto bs = static_cast<int32_t>(requests.size());
  std::vector<WhisperGenerateResult> results(bs);
  if (bs == 0) return results;
  const int32_t vocab = c.vocab_size;
  const std::vector<int32_t>& eos = g.eos_token_ids.empty() ? c.eos_token_ids : g.eos_token_ids;

  // Prompts and the encoder outputs (request-major, for the requests with features), on the
  // device in the model's dtype.
  int64_t with_audio = 0;
  for (const WhisperRequest& r : requests)
    with_audio += r.features.empty() ? 0 : 1;
  Tensor encoder_hidden;
  const size_t encoder_bytes =
      static_cast<size_t>(c.max_source_positions) * c.d_model * dtype_size(runner.model().dtype());
  if (with_audio > 0) {
    KV_ASSIGN_OR_RETURN(encoder_hidden,
                        runner.platform().empty(runner.model().dtype(),
                                                {with_audio * c.max_source_positions, c.d_model}));
  }
  int64_t encoded = 0;
  std::vector<int32_t> encoder_lens(bs);
  std::vector<int32_t> limits(bs);  // decoder length at which each request stops
  for (int32_t b = 0; b < bs; ++b) {
    const WhisperRequest& r = requests[b];
    if (!std::isfinite(r.temperature) || r.temperature < 0.0f) {
      return invalid_argument("Whisper request {}: temperature {} (0 for greedy, or > 0)", b,
                              r.temperature);
    }
    if (r.prompt.empty()) {
      KV_ASSIGN_OR_RETURN(results[b].prompt, whisper_prompt(c, g, o.language, o.task));
    } else {
      results[b].prompt = r.prompt;
    }
    for (const int32_t id : results[b].prompt) {
      if (id < 0 || id >= vocab) {
        return invalid_argument("Whisper request {}: prompt token {} outside the vocabulary", b,
                                id);
      }
    }
    const auto prompt_len = static_cast<int32_t>(results[b].prompt.size());
    int32_t limit = std::min(g.max_length.value_or(c.max_target_positions), c.max_target_positions);
    if (o.max_new_tokens > 0) limit = std::min(limit, prompt_len + o.max_new_tokens);
    if (prompt_len >= limit) {
      return invalid_argument("Whisper request {}: a prompt of {} tokens leaves no room (max {})",
                              b, prompt_len, limit);
    }
    limits[b] = limit;
    if (!r.features.empty()) {
      KV_RETURN_IF_ERROR(runner.model().encode(
          r.features, encoder_hidden.data_as<uint8_t>() + encoded++ * encoder_bytes));
      encoder_lens[b] = c.max_source_positions;
    }
  }
  if (o.on_progress) o.on_progress(WhisperGeneratePoint::kEncoded);

  // Prefill: each row gets [encoder region | prompt].
  const mem::KvMemory memory = runner.memory();
  std::vector<mem::KvReqState> states(bs);
  KvRelease release(memory, states);
  const mem::EncoderSplit split = runner.encoder_split();
  std::vector<mem::BatchEntry> entries;
  for (int32_t b = 0; b < bs; ++b)
    entries.push_back({&states[b], results[b].prompt, encoder_lens[b]});
  KV_ASSIGN_OR_RETURN(mem::ForwardBatch batch, mem::prepare_extend(memory, entries, split));
  std::vector<float> logits;
  KV_RETURN_IF_ERROR(
      runner.forward(batch, logits, encoder_hidden.empty() ? nullptr : encoder_hidden.data()));

  // Greedy steps; `active` lists the requests whose logits rows `logits` holds, in order.
  std::vector<int32_t> active(bs);
  for (int32_t b = 0; b < bs; ++b)
    active[b] = b;
  while (!active.empty()) {
    std::vector<int32_t> next;
    for (size_t i = 0; i < active.size(); ++i) {
      const int32_t b = active[i];
      WhisperGenerateResult& res = results[b];
      const std::span<float> row(logits.data() + i * vocab, vocab);
      if (o.keep_logits) res.step_logits.emplace_back(row.begin(), row.end());
      apply_whisper_suppression(g, res.tokens.empty(), row);
      const int32_t token = whisper_pick_token(row, requests[b].temperature, requests[b].seed,
                                               static_cast<int64_t>(res.tokens.size()));
      res.tokens.push_back(token);
      const auto len = static_cast<int32_t>(res.prompt.size() + res.tokens.size());
      const bool is_eos = std::find(eos.begin(), eos.end(), token) != eos.end();
      const bool stop = (is_eos && !o.ignore_eos) || len >= limits[b];
      if (stop) {
        release.release(states[b]);
      } else {
        next.push_back(b);
      }
    }
    active = std::move(next);
    if (o.on_progress) o.on_progress(WhisperGeneratePoint::kPicked);
    if (active.empty()) break;
    // Decode: the last token of each active request at decoder position len - 1.
    entries.clear();
    for (const int32_t b : active)
      entries.push_back({&states[b], {results[b].tokens.back()}, encoder_lens[b]});
    KV_ASSIGN_OR_RETURN(batch, mem::prepare_decode(memory, entries, split));
    KV_RETURN_IF_ERROR(runner.forward(batch, logits));
  }
  return results;
}

}  // namespace kvserve::model

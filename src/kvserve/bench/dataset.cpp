#include "kvserve/bench/dataset.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "kvserve/core/json_fields.h"

namespace kvserve::bench {
namespace {

using nlohmann::json;

// Ids a random prompt may use: every id with a token that is not special.
std::vector<int32_t> ordinary_ids(const tokenizer::Tokenizer& tok) {
  std::vector<int32_t> ids;
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    if (!tok.is_special(id) && tok.id_to_token(id).has_value()) ids.push_back(id);
  }
  return ids;
}

// The first two turns of a ShareGPT entry, or nothing when it has fewer.
Result<std::optional<std::pair<std::string, std::string>>> first_two_turns(
    const json& entry, const std::string& where) {
  if (!entry.is_object()) return invalid_argument("{}: expected an object", where);
  const json* turns = nullptr;
  for (const char* key : {"conversations", "conversation"}) {
    if (auto it = entry.find(key); it != entry.end()) {
      turns = &*it;
      break;
    }
  }
  if (turns == nullptr) return std::optional<std::pair<std::string, std::string>>();
  if (!turns->is_array()) return invalid_argument("{}: conversations: expected a list", where);
  if (turns->size() < 2) return std::optional<std::pair<std::string, std::string>>();
  std::string values[2];
  for (size_t t = 0; t < 2; ++t) {
    const json& turn = (*turns)[t];
    if (!turn.is_object() || !turn.contains("value") || !turn["value"].is_string()) {
      return invalid_argument("{}: conversations[{}]: expected an object with a string 'value'",
                              where, t);
    }
    values[t] = turn["value"].get<std::string>();
  }
  return std::optional<std::pair<std::string, std::string>>(
      std::pair(std::move(values[0]), std::move(values[1])));
}

}  // namespace

LengthRange random_length_range(int32_t len, double range_ratio) {
  const auto lo = static_cast<int32_t>(static_cast<double>(len) * range_ratio);
  return {std::max(lo, 1), len};
}

Result<std::vector<DatasetRow>> sample_random_requests(const RandomDatasetOptions& o,
                                                       const tokenizer::Tokenizer* tok,
                                                       std::mt19937_64& rng,
                                                       int32_t fallback_vocab_size) {
  if (o.num_prompts < 1)
    return invalid_argument("--num-prompts must be >= 1, got {}", o.num_prompts);
  if (o.input_len < 1) {
    return invalid_argument("--random-input-len must be >= 1, got {}", o.input_len);
  }
  if (o.output_len < 1) {
    return invalid_argument("--random-output-len must be >= 1, got {}", o.output_len);
  }
  if (!(o.range_ratio >= 0.0 && o.range_ratio <= 1.0)) {
    return invalid_argument("--random-range-ratio must be in [0, 1], got {}", o.range_ratio);
  }
  if (o.return_text && tok == nullptr) {
    return invalid_argument("random text prompts need a tokenizer (--tokenizer DIR)");
  }
  std::vector<int32_t> vocab;
  if (tok != nullptr) {
    vocab = ordinary_ids(*tok);
    if (vocab.empty())
      return invalid_argument("the tokenizer has no ordinary (non-special) tokens");
  } else {
    KV_CHECK_GT(fallback_vocab_size, 0);
  }
  const LengthRange in = random_length_range(o.input_len, o.range_ratio);
  const LengthRange out = random_length_range(o.output_len, o.range_ratio);
  std::uniform_int_distribution<int32_t> input_len(in.lo, in.hi);
  std::uniform_int_distribution<int32_t> output_len(out.lo, out.hi);
  std::uniform_int_distribution<size_t> pick(
      0, tok != nullptr ? vocab.size() - 1 : static_cast<size_t>(fallback_vocab_size - 1));

  std::vector<DatasetRow> rows(static_cast<size_t>(o.num_prompts));
  for (DatasetRow& row : rows) {
    row.prompt_len = input_len(rng);
    row.output_len = output_len(rng);
  }
  for (DatasetRow& row : rows) {
    std::vector<int32_t> ids(static_cast<size_t>(row.prompt_len));
    for (int32_t& id : ids) {
      const size_t k = pick(rng);
      id = tok != nullptr ? vocab[k] : static_cast<int32_t>(k);
    }
    if (o.return_text) {
      row.prompt = tok->decode(ids);
    } else {
      row.input_ids = std::move(ids);
    }
  }
  return rows;
}

Result<std::vector<DatasetRow>> sample_sharegpt_requests(const ShareGptOptions& o,
                                                         const tokenizer::Tokenizer& tok,
                                                         std::mt19937_64& rng) {
  if (o.num_prompts < 1)
    return invalid_argument("--num-prompts must be >= 1, got {}", o.num_prompts);
  if (o.fixed_output_len.has_value() && *o.fixed_output_len < 4) {
    return invalid_argument(
        "--sharegpt-output-len must be >= 4 (SGLang: output_len too small), "
        "got {}",
        *o.fixed_output_len);
  }
  if (o.context_len.has_value() && *o.context_len < 1) {
    return invalid_argument("--sharegpt-context-len must be >= 1, got {}", *o.context_len);
  }
  const std::string source = o.path.string();
  KV_ASSIGN_OR_RETURN(const std::string text, core::read_text_file(o.path));
  KV_ASSIGN_OR_RETURN(const json data, core::parse_json(text, source));
  if (!data.is_array()) {
    return invalid_argument("{}: expected a JSON list of conversations, got {}", source,
                            data.type_name());
  }
  std::vector<std::pair<std::string, std::string>> pairs;
  for (size_t i = 0; i < data.size(); ++i) {
    KV_ASSIGN_OR_RETURN(auto turns, first_two_turns(data[i], fmt::format("{}: [{}]", source, i)));
    if (turns.has_value()) pairs.push_back(std::move(*turns));
  }
  std::shuffle(pairs.begin(), pairs.end(), rng);

  std::vector<DatasetRow> rows;
  for (const auto& [prompt, completion] : pairs) {
    if (static_cast<int32_t>(rows.size()) == o.num_prompts) break;
    const auto prompt_len = static_cast<int32_t>(tok.encode(prompt).size());
    const int32_t output_len = o.fixed_output_len.has_value()
                                   ? *o.fixed_output_len
                                   : static_cast<int32_t>(tok.encode(completion).size());
    if (prompt_len < 2 || output_len < 2) continue;
    if (o.context_len.has_value() && prompt_len + output_len > *o.context_len) continue;
    rows.push_back({prompt, {}, prompt_len, output_len});
  }
  return rows;
}

std::vector<double> poisson_arrival_times(int32_t n, double request_rate, std::mt19937_64& rng) {
  KV_CHECK(request_rate > 0, "request rate {} must be > 0 (inf: all at once)", request_rate);
  std::vector<double> times(static_cast<size_t>(std::max(n, 0)), 0.0);
  if (std::isinf(request_rate)) return times;
  std::exponential_distribution<double> gap(request_rate);
  for (size_t i = 1; i < times.size(); ++i)
    times[i] = times[i - 1] + gap(rng);
  return times;
}

}  // namespace kvserve::bench

#include "kvserve/bench/whisper_one_batch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>
#include <random>

#include "kvserve/bench/one_batch_sweep.h"
#include "kvserve/engine/logit_rules.h"
#include "kvserve/engine/scheduler.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/host_kv_memory.h"

namespace kvserve::bench {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int32_t kPromptIdLimit = 10000;  // random text ids, as bench_one_batch's prompts

double seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The decoder's length limit, prompt included, as whisper_generate computes it.
int32_t decoder_limit(const model::WhisperRunner& runner) {
  const int32_t target = runner.config().max_target_positions;
  return std::min(runner.generation_config().max_length.value_or(target), target);
}

Result<int32_t> prompt_len(const model::WhisperRunner& runner, int32_t decoder_input_len) {
  if (decoder_input_len > 0) return decoder_input_len;
  KV_ASSIGN_OR_RETURN(const std::vector<int32_t> prompt,
                      model::whisper_prompt(runner.config(), runner.generation_config()));
  return static_cast<int32_t>(prompt.size());
}

}  // namespace

nlohmann::json WhisperOneBatchResult::to_json() const {
  nlohmann::json j;
  j["run_name"] = run_name;
  j["model_type"] = "whisper";
  j["device"] = device;
  j["batch_size"] = batch_size;
  j["input_len"] = decoder_input_len;
  j["output_len"] = output_len;
  j["encoder_kv_layout"] = layout.layout;
  j["page_size"] = layout.page_size;
  j["attention_backend"] = layout.attention_backend;
  j["encoder_len"] = layout.encoder_len;
  j["encoder_reserved_len"] = layout.encoder_reserved_len;
  j["padding_slots"] = layout.padding_slots;
  j["padding_bytes"] = layout.padding_bytes;
  j["gathers"] = layout.gathers;
  j["gathered_bytes_per_step"] = layout.gathered_bytes_per_step;
  j["encoder_latency"] = encoder_latency;
  j["encoder_throughput"] = encoder_throughput;
  j["prefill_latency"] = prefill_latency;
  j["prefill_throughput"] = prefill_throughput;
  add_json(j);
  return j;
}

WhisperLayoutAccounting whisper_layout_accounting(model::WhisperRunner& runner,
                                                  int32_t batch_size) {
  const checkpoint::WhisperConfig& c = runner.config();
  const model::WhisperRunnerOptions& o = runner.options();
  const mem::KvPoolConfig& pool = runner.kv_pool().config();
  WhisperLayoutAccounting a;
  a.layout = std::string(mem::encoder_kv_layout_name(o.layout));
  a.page_size = o.page_size;
  a.attention_backend = std::string(runner.backend().name());
  a.encoder_len = c.max_source_positions;
  a.encoder_reserved_len = runner.encoder_reserved_len(a.encoder_len);
  a.padding_slots = a.encoder_reserved_len - a.encoder_len;
  // K and V of one position over every decoder layer.
  const int64_t slot_bytes = int64_t{pool.num_layers} * 2 * pool.num_kv_heads * pool.head_dim *
                             static_cast<int64_t>(dtype_size(pool.dtype));
  a.padding_bytes = a.padding_slots * slot_bytes;
  // cuda-ragged gathers every request's slots into contiguous K/V per layer and forward; native
  // copies each request's row out of the pool. cpu and cuda-paged read the pool in place.
  a.gathers = a.attention_backend == "cuda-ragged" || a.attention_backend == "native";
  a.gathered_bytes_per_step = a.gathers ? int64_t{batch_size} * a.encoder_len * slot_bytes : 0;
  return a;
}

Result<std::vector<model::WhisperRequest>> whisper_one_batch_requests(
    const model::WhisperRunner& runner, int32_t batch_size, int32_t decoder_input_len,
    uint64_t seed) {
  const checkpoint::WhisperConfig& c = runner.config();
  KV_ASSIGN_OR_RETURN(const std::vector<int32_t> sot,
                      model::whisper_prompt(c, runner.generation_config()));
  std::vector<int32_t> prompt;  // empty: whisper_generate uses the transcriber's prompt
  if (decoder_input_len > 0) {
    prompt.assign(sot.begin(), sot.begin() + std::min<size_t>(sot.size(), decoder_input_len));
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mel(-1.0f, 1.0f);
  std::uniform_int_distribution<int32_t> text(0, std::min(c.vocab_size, kPromptIdLimit) - 1);
  const size_t features = static_cast<size_t>(c.num_mel_bins) * c.input_frames();
  std::vector<model::WhisperRequest> requests(static_cast<size_t>(batch_size));
  for (model::WhisperRequest& r : requests) {
    r.features.resize(features);
    for (float& x : r.features)
      x = mel(rng);
    r.prompt = prompt;
    while (static_cast<int32_t>(r.prompt.size()) < decoder_input_len)
      r.prompt.push_back(text(rng));
  }
  return requests;
}

std::optional<std::string> whisper_one_batch_misfit(model::WhisperRunner& runner,
                                                    int32_t batch_size, int32_t decoder_input_len,
                                                    int32_t output_len) {
  const auto prompt = prompt_len(runner, decoder_input_len);
  if (!prompt.is_ok()) return prompt.status().message();
  const int32_t limit = decoder_limit(runner);
  const int64_t seq = int64_t{*prompt} + output_len;
  if (seq > limit) {
    return fmt::format("decoder input + output ({}) exceeds the decoder's length limit {}", seq,
                       limit);
  }
  const model::WhisperRunnerOptions& o = runner.options();
  if (batch_size > o.max_running_requests) {
    return fmt::format("max_running_requests limit ({})", o.max_running_requests);
  }
  // The scheduler's admission (PrefillAdder) in one prefill: each request takes its extend
  // (encoder region + prompt) in whole pages plus its output budget, and the last one is admitted
  // only while its extend and output stay below what is left.
  const int64_t reserved = runner.encoder_reserved_len(runner.config().max_source_positions);
  const int64_t extend = reserved + *prompt;
  const int64_t taken = mem::ceil_align(extend, int64_t{o.page_size}) + output_len;
  const int64_t slots = runner.allocator().size();
  const int64_t max_batch =
      slots > extend + output_len ? (slots - 1 - extend - output_len) / taken + 1 : 0;
  if (batch_size > max_batch) {
    return fmt::format("max batch size limit ({} for {} KV tokens)", max_batch, slots);
  }
  return std::nullopt;
}

Result<WhisperOneBatchResult> run_whisper_one_batch_once(
    model::WhisperRunner& runner, const std::string& run_name, int32_t batch_size,
    int32_t decoder_input_len, int32_t output_len, uint64_t seed,
    const std::function<void(std::string_view)>& log) {
  KV_CHECK(batch_size >= 1 && decoder_input_len >= 0 && output_len >= 1, "({}, {}, {})", batch_size,
           decoder_input_len, output_len);
  platform::Platform& platform = runner.platform();
  KV_ASSIGN_OR_RETURN(const std::vector<model::WhisperRequest> requests,
                      whisper_one_batch_requests(runner, batch_size, decoder_input_len, seed));

  WhisperOneBatchResult r;
  r.run_name = run_name;
  r.device = runner.options().device;
  r.batch_size = batch_size;
  r.output_len = output_len;
  r.layout = whisper_layout_accounting(runner, batch_size);

  // The batch through the engine's scheduler on the runner's ModelRunner (as a server runs it,
  // without the engine thread): one prefill step for the whole batch (the encoder, timed on its
  // own by the runner, then the decoder's prefill with the cross K/V write and the first pick),
  // then output_len - 1 decode steps; a device synchronization after each.
  model::ModelRunner& runner_core = runner.runner();
  engine::SchedulerOptions so;
  so.max_prefill_tokens = std::numeric_limits<int32_t>::max();  // one prefill takes the batch
  so.eos_token_ids = runner_core.config().eos_token_ids;
  so.encoder = runner.encoder_split();
  // The scheduler's own host KV memory of the runner's shape, with a chunk cache (as the engine
  // gives an encoder-decoder model).
  engine::Scheduler scheduler(
      runner_core, mem::HostKvMemory(runner_core.kv_shape(), mem::PrefixCacheKind::kChunk), nullptr,
      so, nullptr);
  const mem::ReqToTokenPool& rows = scheduler.memory().req_to_token();
  const mem::BaseTokenToKVPoolAllocator& allocator = scheduler.memory().allocator();
  const auto rules = std::make_shared<const engine::LogitRules>(
      engine::whisper_logit_rules(runner.generation_config()));
  KV_ASSIGN_OR_RETURN(const std::vector<int32_t> sot,
                      model::whisper_prompt(runner.config(), runner.generation_config()));
  const int32_t encoder_len = runner.config().max_source_positions;
  std::vector<std::shared_ptr<engine::RequestStream>> streams;
  for (int32_t i = 0; i < batch_size; ++i) {
    const model::WhisperRequest& w = requests[static_cast<size_t>(i)];
    auto req = std::make_unique<engine::Req>();
    req->id = static_cast<uint64_t>(i) + 1;
    req->rid = std::to_string(i);
    req->origin_input_ids = w.prompt.empty() ? sot : w.prompt;
    req->sampling.temperature = 0.0f;
    req->sampling.max_new_tokens = output_len;
    req->sampling.ignore_eos = true;
    req->logit_rules = rules;
    req->encoder_input = std::make_shared<const std::vector<float>>(w.features);
    req->encoder_len = encoder_len;
    req->arrival = engine::Clock::now();
    req->stream = std::make_shared<engine::RequestStream>();
    streams.push_back(req->stream);
    scheduler.add_request(std::move(req));
  }
  const auto deliver = [&] {
    for (auto& [stream, event] : scheduler.take_outputs())
      stream->push(std::move(event));
  };
  std::vector<Clock::time_point> marks;
  runner_core.set_encoder_timing(true);
  platform.synchronize();
  marks.push_back(Clock::now());
  const bool prefilled = scheduler.step();
  platform.synchronize();
  marks.push_back(Clock::now());
  const int32_t prefilled_requests = scheduler.stats().running;
  const double encoder_seconds = runner_core.last_encoder_seconds();
  deliver();
  while (scheduler.step()) {
    platform.synchronize();
    marks.push_back(Clock::now());
    deliver();
  }
  runner_core.set_encoder_timing(false);
  KV_CHECK(scheduler.idle(), "a one-batch run ends with every request finished");
  KV_CHECK(rows.available_size() == rows.size() && allocator.available_size() == allocator.size(),
           "a one-batch run leaves every row and slot free");
  if (!prefilled || (prefilled_requests != batch_size && output_len > 1)) {
    return make_status(StatusCode::kOutOfMemory,
                       "({}, {}, {}): the batch did not fit one prefill ({} of {} requests)",
                       batch_size, decoder_input_len, output_len, prefilled_requests, batch_size);
  }
  std::vector<std::vector<int32_t>> tokens(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    engine::StreamEvent e;
    while (streams[i]->pop(e, std::chrono::milliseconds(0)))
      tokens[i].insert(tokens[i].end(), e.token_ids.begin(), e.token_ids.end());
    KV_CHECK_EQ(static_cast<int32_t>(tokens[i].size()), output_len,
                "with eos ignored every request generates output_len tokens");
  }
  // marks: start, prefilled, then one per decode step (output_len - 1).
  KV_CHECK_EQ(marks.size(), static_cast<size_t>(output_len) + 1);
  r.decoder_input_len =
      static_cast<int32_t>(requests[0].prompt.empty() ? sot.size() : requests[0].prompt.size());
  r.first_request_tokens = tokens[0];

  r.encoder_latency = encoder_seconds;
  r.encoder_throughput = static_cast<double>(r.layout.encoder_len) * batch_size / r.encoder_latency;
  log(fmt::format("Encoder. latency: {:6.5f} s, throughput: {:9.2f} token/s", r.encoder_latency,
                  r.encoder_throughput));
  r.prefill_latency = seconds(marks[0], marks[1]) - encoder_seconds;
  r.prefill_throughput = static_cast<double>(r.decoder_input_len) * batch_size / r.prefill_latency;
  log(fmt::format("Prefill. latency: {:6.5f} s, throughput: {:9.2f} token/s", r.prefill_latency,
                  r.prefill_throughput));
  r.total_latency = r.encoder_latency + r.prefill_latency;
  for (size_t i = 2; i < marks.size(); ++i)
    r.add_step(seconds(marks[i - 1], marks[i]), batch_size, log);
  r.finish(batch_size, (static_cast<double>(r.decoder_input_len) + output_len) * batch_size, log);
  const WhisperLayoutAccounting& a = r.layout;
  log(fmt::format(
      "Layout. {} encoder KV, page size {}, {}: encoder_len {}, reserved {}, padding {} slots "
      "({} bytes) per request; gathered {} bytes per decode step{}",
      a.layout, a.page_size, a.attention_backend, a.encoder_len, a.encoder_reserved_len,
      a.padding_slots, a.padding_bytes, a.gathered_bytes_per_step,
      a.gathers ? "" : " (the backend reads the pool in place)"));
  return r;
}

Result<std::vector<WhisperOneBatchResult>> run_whisper_one_batch_sweep(
    model::WhisperRunner& runner, const WhisperOneBatchOptions& o,
    const std::function<void(std::string_view)>& log) {
  return run_sweep<WhisperOneBatchResult>(
      {o.batch_sizes, o.decoder_input_lens, 0, o.output_lens}, o.warmup, o.seed,
      [&](int32_t b, int32_t i, int32_t out) {
        return whisper_one_batch_misfit(runner, b, i, out);
      },
      [&](int32_t b, int32_t i, int32_t out, uint64_t seed) {
        return run_whisper_one_batch_once(runner, o.run_name, b, i, out, seed, log);
      },
      log);
}

}  // namespace kvserve::bench

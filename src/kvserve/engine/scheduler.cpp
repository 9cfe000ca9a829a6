#include "kvserve/engine/scheduler.h"

#include <ctime>

#include <algorithm>
#include <cmath>

#include "kvserve/core/logging.h"
#include "kvserve/engine/disagg_decode.h"
#include "kvserve/engine/disagg_prefill.h"
#include "kvserve/engine/prefill_adder.h"
#include "kvserve/engine/sampler.h"
#include "kvserve/mem/batch_lifecycle.h"
#include "kvserve/mem/common.h"
#include "kvserve/mem/encoder_layout.h"
#include "kvserve/mem/invariants.h"

namespace kvserve::engine {
namespace {

// SGLang's constants (SGLANG_INIT_NEW_TOKEN_RATIO, ..._MIN_NEW_TOKEN_RATIO_FACTOR,
// ..._NEW_TOKEN_RATIO_DECAY_STEPS, ..._RETRACT_DECODE_STEPS).
constexpr double kInitNewTokenRatio = 0.7;
constexpr double kMinNewTokenRatioFactor = 0.14;
constexpr double kNewTokenRatioDecaySteps = 600;
constexpr int64_t kRetractDecodeSteps = 20;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// CPU time of the calling thread: what the engine thread itself spent, not time it waited.
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

Scheduler::Scheduler(model::BatchRunner& runner, mem::HostKvMemory memory,
                     const tokenizer::Tokenizer* tokenizer, const SchedulerOptions& options,
                     Metrics* metrics)
    : runner_(runner),
      kv_(std::move(memory)),
      cache_(kv_.cache()),
      memory_(kv_.view()),
      encoder_decoder_(options.encoder.has_value()),
      tokenizer_(tokenizer),
      options_(options),
      metrics_(metrics),
      rng_(options.seed) {
  init_new_token_ratio_ = std::min(kInitNewTokenRatio * options.schedule_conservativeness, 1.0);
  min_new_token_ratio_ = init_new_token_ratio_ * kMinNewTokenRatioFactor;
  new_token_ratio_decay_ =
      (init_new_token_ratio_ - min_new_token_ratio_) / kNewTokenRatioDecaySteps;
  new_token_ratio_ = init_new_token_ratio_;
}

Scheduler::~Scheduler() = default;

void Scheduler::add_request(std::unique_ptr<Req> req) {
  Req* r = req.get();
  KV_CHECK(encoder_decoder_ || (r->encoder_len == 0 && r->encoder_input == nullptr),
           "an encoder input for a scheduler without an EncoderSplit");
  r->encoder_reserved = encoder_decoder_
                            ? mem::encoder_reserved_len(r->encoder_len, options_.encoder->page_size,
                                                        options_.encoder->layout)
                            : 0;
  reqs_[r->id] = std::move(req);
  if (r->disagg && pd_prefill_) return pd_prefill_->add(r);
  if (r->disagg && pd_decode_) return pd_decode_->add(r);
  r->disagg.reset();  // not a disaggregated server: served here alone
  waiting_.push_back(r);
}

bool Scheduler::idle() const {
  return waiting_.empty() && running_.empty() && chunked_ == nullptr &&
         (pd_prefill_ == nullptr || pd_prefill_->idle()) &&
         (pd_decode_ == nullptr || pd_decode_->idle());
}

void Scheduler::enable_disaggregation(DisaggContext context) {
  KV_CHECK(!encoder_decoder_, "disaggregation of an encoder-decoder model");
  if (context.options.mode == DisaggMode::kPrefill) {
    pd_prefill_ = std::make_unique<PrefillDisagg>(*this, std::move(context));
  } else if (context.options.mode == DisaggMode::kDecode) {
    pd_decode_ = std::make_unique<DecodeDisagg>(*this, std::move(context));
  }
}

DisaggStats Scheduler::disagg_stats() const {
  if (pd_prefill_) return pd_prefill_->stats();
  if (pd_decode_) return pd_decode_->stats();
  return {};
}

// --- prefill -------------------------------------------------------------------------------

void Scheduler::init_next_round_input(Req& r) {
  r.fill_ids = r.all_ids();
  if (encoder_decoder_) {
    // The whole row, encoder region first; nothing is matched (a ChunkCache).
    r.kv.prefix_indices.clear();
    r.kv.last_node = cache_.match_prefix({}).last_node;
    r.kv.cache_protected_len = 0;
    r.extend_input_len = r.encoder_reserved + static_cast<int32_t>(r.fill_ids.size());
    return;
  }
  // At least one token is computed (for its logits); with input logprobs, the positions from
  // logprob_start_len on must be computed too.
  int64_t limit = static_cast<int64_t>(r.fill_ids.size()) - 1;
  if (r.logprob_start_len >= 0) limit = std::min<int64_t>(limit, r.logprob_start_len);
  mem::MatchResult m =
      cache_.match_prefix(std::span(r.fill_ids).first(std::max<int64_t>(limit, 0)));
  r.kv.prefix_indices = std::move(m.indices);
  r.kv.last_node = m.last_node;
  r.kv.cache_protected_len = static_cast<int32_t>(r.kv.prefix_indices.size());
  r.extend_input_len = static_cast<int32_t>(r.fill_ids.size() - r.kv.prefix_indices.size());
}

std::vector<Req*> Scheduler::get_new_batch_prefill() {
  const int32_t max_running = kv_.req_to_token().size();
  if (chunked_ == nullptr &&
      (waiting_.empty() || static_cast<int32_t>(running_.size()) >= max_running)) {
    return {};
  }
  double reservation = 0;
  for (const Req* r : running_)
    reservation += remaining_output_budget(*r) * new_token_ratio_;
  if (pd_decode_) reservation += pd_decode_->reserved_tokens(new_token_ratio_);
  // An encoder-decoder prefill (encoder region and prompt) is never chunked.
  const std::optional<int64_t> chunk = options_.chunked_prefill_size > 0 && !encoder_decoder_
                                           ? std::optional(options_.chunked_prefill_size)
                                           : std::nullopt;
  PrefillAdder adder(kv_.shape().page_size, cache_, kv_.allocator(), reservation,
                     options_.max_prefill_tokens, chunk);
  Req* const previous_chunk = chunked_;
  if (previous_chunk != nullptr) adder.add_chunked_req(*previous_chunk);
  apply_schedule_policy(options_.policy, waiting_, cache_, rng_);
  std::vector<Req*> admitted;
  for (Req* r : waiting_) {
    // At most one chunked request at a time; the batch stops at max_running_requests.
    const auto in_flight = static_cast<int32_t>(running_.size() + adder.can_run().size());
    if (in_flight >= max_running || adder.new_chunked_req() != nullptr) break;
    init_next_round_input(*r);
    const size_t before = adder.can_run().size();
    const AddResult res = adder.add_one_req(*r);
    if (adder.can_run().size() > before) admitted.push_back(r);
    if (res != AddResult::kContinue) break;
  }
  for (Req* r : admitted) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    if (r->retractions == 0 && r->output_ids.empty()) {
      r->cached_tokens = r->kv.cache_protected_len;
      if (metrics_) metrics_->on_admitted(r->input_len(), r->cached_tokens);
    }
  }
  // The request still chunked after this batch: a new one, or the previous one when it got no
  // room this round (its last chunk, if it runs now, is not chunked any more).
  const auto& taken = adder.can_run();
  chunked_ = adder.new_chunked_req();
  if (previous_chunk != nullptr &&
      std::find(taken.begin(), taken.end(), previous_chunk) == taken.end()) {
    chunked_ = previous_chunk;
  }
  return adder.can_run();
}

void Scheduler::run_extend(const std::vector<Req*>& batch) {
  std::vector<mem::BatchEntry> entries;
  std::vector<int32_t> seq_lens;
  std::vector<std::span<const float>> encoder_inputs;
  for (Req* r : batch) {
    const auto prefix = static_cast<int32_t>(r->kv.prefix_indices.size());
    // In the decoder's coordinates: an encoder-decoder row's extend also covers its encoder
    // region (encoder_reserved positions ahead of the prompt; prepare_extend lays it out).
    const int32_t seq = prefix + r->extend_input_len - r->encoder_reserved;
    seq_lens.push_back(seq);
    entries.push_back(
        {&r->kv, std::vector<int32_t>(r->fill_ids.begin() + prefix, r->fill_ids.begin() + seq),
         r->encoder_len});
    // The encoder runs again on every prefill of the request (after a retraction too).
    if (r->encoder_len > 0) encoder_inputs.emplace_back(*r->encoder_input);
  }
  Result<mem::ForwardBatch> prepared = mem::prepare_extend(memory_, entries, options_.encoder);
  if (!prepared.is_ok()) {
    // The budgets should make this unreachable; put the batch back rather than crash.
    KV_LOG_WARN("prefill of {} requests did not fit after budgeting: {}", batch.size(),
                prepared.status().message());
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      Req* r = *it;
      if (r->kv.row == mem::kNoRow) {
        cache_.dec_lock_ref(r->kv.last_node);
        r->kv = mem::KvReqState{};
        if (r != chunked_) waiting_.push_front(r);
      }
    }
    return;
  }
  mem::ForwardBatch fb = std::move(prepared).value();
  ++prefill_batches_;
  // The encoder's inputs, one per request whose encoder region this forward stores (in the order
  // of fb.encoder_out_cache_loc): the runner runs the encoder first.
  fb.encoder_inputs = std::move(encoder_inputs);
  // Which rows need logits: input logprobs (positions whose next token is still input) and the
  // last position of a complete prompt (its first sampled token).
  std::vector<std::vector<int32_t>> rows_of(batch.size());
  std::vector<int32_t> logits_rows;
  int32_t start = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    Req& r = *batch[i];
    const int32_t prefix = fb.prefix_lens[i];
    const int32_t seq = seq_lens[i];  // decoder positions (fb.seq_lens[i])
    for (int32_t p = prefix; p < seq; ++p) {
      const bool input_logprob = r.logprob_start_len >= 0 && p >= r.logprob_start_len &&
                                 p + 1 < r.input_len() && r.output_ids.empty();
      const bool sample = !r.chunked && p == seq - 1;
      if (input_logprob || sample) {
        rows_of[i].push_back(static_cast<int32_t>(logits_rows.size()));
        logits_rows.push_back(start + (p - prefix));
      }
    }
    start += seq - prefix;
  }
  fb.logits_indices = logits_rows;
  // On a device, when every logits row is a sampled one (no input logprobs), the rows are sampled
  // there and only the tokens come back. sampled_of[i]: request i's row in sampled_ (or -1).
  std::vector<Req*> sampled_reqs;
  std::vector<int32_t> sampled_of(batch.size(), -1);
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i]->chunked) {
      sampled_of[i] = static_cast<int32_t>(sampled_reqs.size());
      sampled_reqs.push_back(batch[i]);
    }
  }
  const bool on_device =
      sampled_reqs.size() == logits_rows.size() && device_sampling() && !host_sampling(batch);
  const Status forwarded = on_device ? timed_forward_sample(fb, sampled_reqs) : timed_forward(fb);
  if (!forwarded.is_ok()) return fail_batch(batch, forwarded);
  const int32_t vocab = runner_.vocab_size();
  auto row = [&](int32_t k) {
    return std::span<const float>(logits_).subspan(size_t(k) * vocab, vocab);
  };

  for (size_t i = 0; i < batch.size(); ++i) {
    Req& r = *batch[i];
    const auto prefix = static_cast<int32_t>(r.kv.prefix_indices.size());
    size_t k = 0;
    for (int32_t p = prefix; p < seq_lens[i]; ++p) {
      if (k < rows_of[i].size() && r.logprob_start_len >= 0 && p >= r.logprob_start_len &&
          p + 1 < r.input_len() && r.output_ids.empty()) {
        r.input_logprobs.push_back(token_logprob(row(rows_of[i][k++]), r.origin_input_ids[p + 1]));
      }
    }
    if (r.chunked) {
      cache_.cache_unfinished_req(r.kv, r.fill_ids);
      if (pd_prefill_ && pd_prefill_->owns(r)) pd_prefill_->after_chunk(r);
      continue;
    }
    if (on_device) {
      accept_sampled(r, sampled_[static_cast<size_t>(sampled_of[i])]);
    } else {
      accept_token(r, row(rows_of[i].back()));
    }
    if (pd_prefill_ && pd_prefill_->owns(r)) {
      pd_prefill_->after_prefill(r);  // its KV goes to the decode side; it waits for that here
      continue;
    }
    if (r.finished()) {
      finish_and_release(r);
    } else {
      // An encoder-decoder row shares nothing, and its positions are not fill_ids'.
      if (!encoder_decoder_) cache_.cache_unfinished_req(r.kv, r.fill_ids);
      running_.push_back(&r);
    }
  }
}

// --- decode --------------------------------------------------------------------------------

void Scheduler::retract(Req* r) {
  mem::release_kv_cache(memory_, r->kv, r->all_ids(), /*insert=*/false);
  r->kv = mem::KvReqState{};
  r->fill_ids.clear();
  ++r->retractions;
  ++retractions_;
  if (metrics_) metrics_->on_retracted();
  running_.erase(std::find(running_.begin(), running_.end(), r));
  waiting_.push_back(r);
}

bool Scheduler::ensure_decode_memory() {
  auto needed = [&] {
    std::vector<int32_t> lens;
    for (const Req* r : running_)
      lens.push_back(r->kv.kv_allocated_len + 1);
    return kv_.allocator().decode_slots_needed(lens);
  };
  mem::evict_from_tree_cache(memory_, needed());
  if (kv_.allocator().available_size() >= needed()) return true;
  // Retract until the step fits: fewest generated tokens first, then the longest prompt.
  while (running_.size() > 1 && kv_.allocator().available_size() < needed()) {
    Req* victim =
        *std::min_element(running_.begin(), running_.end(), [](const Req* a, const Req* b) {
          return std::pair(a->output_len(), -a->input_len()) <
                 std::pair(b->output_len(), -b->input_len());
        });
    retract(victim);
    mem::evict_from_tree_cache(memory_, needed());
  }
  int64_t decoded = 0;
  int64_t max_new = 0;
  for (const Req* r : running_) {
    decoded += r->output_len();
    max_new += r->sampling.max_new_tokens;
  }
  new_token_ratio_ = std::min(
      1.0,
      static_cast<double>(decoded + kRetractDecodeSteps * static_cast<int64_t>(running_.size())) /
          static_cast<double>(max_new + 1));
  KV_LOG_INFO("KV cache full: retracted requests; {} still running, new_token_ratio {:.3f}",
              running_.size(), new_token_ratio_);
  return kv_.allocator().available_size() >= needed();
}

void Scheduler::run_decode() {
  const bool had_room = [&] {
    std::vector<int32_t> lens;
    for (const Req* r : running_)
      lens.push_back(r->kv.kv_allocated_len + 1);
    const int64_t need = kv_.allocator().decode_slots_needed(lens);
    return kv_.allocator().available_size() + cache_.evictable_size() >= need;
  }();
  if (!ensure_decode_memory()) {
    // One request that cannot grow even alone: it was admitted, so this is a bug; fail it.
    Req* r = running_.front();
    r->finish = {FinishKind::kAbort, -1, "", "out of KV cache memory"};
    finish_and_release(*r);
    return;
  }
  if (had_room)
    new_token_ratio_ = std::max(new_token_ratio_ - new_token_ratio_decay_, min_new_token_ratio_);
  std::vector<mem::BatchEntry> entries;
  for (Req* r : running_)
    entries.push_back({&r->kv, {r->output_ids.back()}, r->encoder_len});
  Result<mem::ForwardBatch> prepared = mem::prepare_decode(memory_, entries, options_.encoder);
  KV_CHECK(prepared.is_ok(), "decode allocation after the memory check: {}",
           prepared.status().to_string());
  mem::ForwardBatch fb = std::move(prepared).value();
  ++decode_steps_;
  // When every request decodes greedily and reads nothing else from its logits, the argmax is
  // taken on the device and only the ids come back (a 64 x 128k logits copy and host scan cost
  // more than the forward on a GPU).
  // Otherwise, on a device, the batch is sampled there by one launch (greedy rows are argmax rows
  // of it), and again only the ids (and chosen-token logprobs) come back, plus the raw logits rows
  // of the requests whose logprobs need them (top-N; a penalized row's chosen-token logprob).
  const bool host = host_sampling(running_);
  const bool device_greedy =
      !host && std::all_of(running_.begin(), running_.end(),
                           [](const Req* r) { return r->sampling.device_greedy(); });
  const bool device_sample = !host && !device_greedy && device_sampling();
  const Status forwarded = device_greedy   ? timed_forward_greedy(fb)
                           : device_sample ? timed_forward_sample(fb, running_)
                                           : timed_forward(fb);
  const std::vector<Req*> batch = running_;
  if (!forwarded.is_ok()) return fail_batch(batch, forwarded);
  const int32_t vocab = runner_.vocab_size();
  const mem::FreeGroup group(kv_.allocator());  // finished requests' slots freed as one group
  for (size_t i = 0; i < batch.size(); ++i) {
    Req& r = *batch[i];
    if (device_greedy) {
      SampledToken t;
      t.token = greedy_tokens_[i];
      accept_sampled(r, t);
    } else if (device_sample) {
      accept_sampled(r, sampled_[i]);
    } else {
      accept_token(r, std::span<const float>(logits_).subspan(i * vocab, vocab));
    }
    if (r.finished()) finish_and_release(r);
  }
}

void Scheduler::fail_batch(const std::vector<Req*>& batch, const Status& why) {
  KV_LOG_WARN("the forward of a batch of {} requests failed ({}); failing them, serving on",
              batch.size(), why.to_string());
  ++failed_batches_;
  const mem::FreeGroup group(kv_.allocator());
  for (Req* r : batch) {
    if (pd_prefill_ && pd_prefill_->owns(*r)) {
      pd_prefill_->abort(*r, fmt::format("the request's batch could not run: {}", why.message()),
                         FinishKind::kError);
      continue;
    }
    r->finish = {FinishKind::kError, -1, "",
                 fmt::format("the request's batch could not run: {}", why.message())};
    emit(*r, StreamEvent{});
    finish_and_release(*r);  // its KV slots hold nothing usable: freed, not cached
  }
}

// --- results -------------------------------------------------------------------------------

Status Scheduler::timed_forward(mem::ForwardBatch& batch) {
  const Clock::time_point start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const Status s = runner_.forward(batch, logits_);
  time_.forward_seconds += seconds(Clock::now() - start);
  time_.forward_cpu_seconds += thread_cpu_seconds() - cpu_start;
  return s;
}

Status Scheduler::timed_forward_greedy(mem::ForwardBatch& batch) {
  const Clock::time_point start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const Status s = runner_.forward_greedy(batch, greedy_tokens_);
  time_.forward_seconds += seconds(Clock::now() - start);
  time_.forward_cpu_seconds += thread_cpu_seconds() - cpu_start;
  return s;
}

bool Scheduler::device_sampling() const {
  return runner_.samples_on_device();
}

bool Scheduler::host_sampling(const std::vector<Req*>& reqs) const {
  return encoder_decoder_ ||
         std::any_of(reqs.begin(), reqs.end(), [](const Req* r) { return r->logit_rules; });
}

std::span<const ops::PenaltyEntry> Scheduler::penalty_entries(Req& r) {
  if (!r.sampling.has_penalties()) return {};
  if (!r.penalties) r.penalties.emplace(r.origin_input_ids, r.output_ids);
  return r.penalties->entries();
}

Status Scheduler::timed_forward_sample(mem::ForwardBatch& batch, const std::vector<Req*>& reqs) {
  const Clock::time_point start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  sample_rows_.clear();
  penalty_csr_.clear();
  raw_rows_.clear();
  bool penalties = false;
  bool logprobs = false;
  for (size_t i = 0; i < reqs.size(); ++i) {
    Req* r = reqs[i];
    sample_rows_.push_back(sample_row_params(r->sampling, r->seed, r->output_len()));
    const auto entries = penalty_entries(*r);
    penalty_csr_.add_row(entries);
    penalties = penalties || !entries.empty();
    logprobs = logprobs || r->sampling.return_logprob;
    if (needs_raw_logits(r->sampling)) raw_rows_.push_back(static_cast<int32_t>(i));
  }
  model::SamplingInputs in;
  in.rows = sample_rows_;
  if (penalties) {
    in.penalty_offsets = penalty_csr_.offsets;
    in.penalty_entries = penalty_csr_.entries;
  }
  in.raw_rows = raw_rows_;
  const Status s = runner_.forward_sample(batch, in, greedy_tokens_,
                                          logprobs ? &sampled_logprobs_ : nullptr, &raw_logits_);
  if (!s.is_ok()) {
    time_.forward_seconds += seconds(Clock::now() - start);
    time_.forward_cpu_seconds += thread_cpu_seconds() - cpu_start;
    return s;
  }
  sampled_.assign(reqs.size(), SampledToken{});
  for (size_t i = 0; i < reqs.size(); ++i) {
    sampled_[i].token = greedy_tokens_[i];
    if (logprobs) sampled_[i].logprob = sampled_logprobs_[i];
  }
  const auto vocab = static_cast<size_t>(runner_.vocab_size());
  for (size_t j = 0; j < raw_rows_.size(); ++j) {
    const int32_t i = raw_rows_[j];
    fill_logprobs(sampled_[i], std::span<const float>(raw_logits_).subspan(j * vocab, vocab),
                  reqs[i]->sampling);
  }
  time_.forward_seconds += seconds(Clock::now() - start);
  time_.forward_cpu_seconds += thread_cpu_seconds() - cpu_start;
  return Status::ok();
}

void Scheduler::accept_token(Req& r, std::span<const float> logits) {
  const Clock::time_point start = Clock::now();
  if (r.logit_rules) {
    ruled_logits_.assign(logits.begin(), logits.end());
    r.logit_rules->apply(ruled_logits_, r.output_len());
    logits = ruled_logits_;
  }
  const SampledToken t = sample(logits, r.sampling, penalty_entries(r), r.seed, r.output_len());
  time_.sample_seconds += seconds(Clock::now() - start);
  accept_sampled(r, t);
}

void Scheduler::accept_sampled(Req& r, const SampledToken& t) {
  if (r.sampling.max_new_tokens == 0) {
    // SGLang's prompt scoring: the prefill ran (for the prompt's logprobs); no token is kept.
    r.finish = {FinishKind::kLength, -1, "", ""};
    StreamEvent e;
    e.input_logprobs = r.input_logprobs;
    emit(r, std::move(e));
    return;
  }
  r.output_ids.push_back(t.token);
  if (r.penalties) r.penalties->add_output(t.token);
  const Clock::time_point now = Clock::now();
  if (metrics_) {
    metrics_->on_generated(1);
    if (!r.first_token_time) {
      metrics_->on_first_token(seconds(now - r.arrival));
    } else {
      metrics_->on_inter_token(seconds(now - r.last_token_time));
    }
  }
  if (!r.first_token_time) r.first_token_time = now;
  r.last_token_time = now;
  check_finished(r);
  StreamEvent e;
  e.token_ids = {t.token};
  if (r.sampling.return_logprob) e.logprobs = {t.logprob};
  if (r.sampling.top_logprobs_num > 0) e.top_logprobs = {t.top_logprobs};
  if (r.output_len() == 1) e.input_logprobs = r.input_logprobs;
  emit(r, std::move(e));
}

void Scheduler::check_finished(Req& r) {
  const int32_t last = r.output_ids.back();
  const SamplingParams& p = r.sampling;
  const bool allowed_to_stop = r.output_len() >= p.min_new_tokens;
  if (allowed_to_stop) {
    const bool stop_id =
        std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), last) != p.stop_token_ids.end();
    const bool eos =
        !p.ignore_eos && std::find(options_.eos_token_ids.begin(), options_.eos_token_ids.end(),
                                   last) != options_.eos_token_ids.end();
    if (stop_id || eos) {
      r.finish = {FinishKind::kStopToken, last, "", ""};
      return;
    }
    if (!r.stop_strings.empty() && tokenizer_ != nullptr) {
      size_t longest = 0;
      for (const auto& s : r.stop_strings)
        longest = std::max(longest, s.size());
      const size_t tail = std::min<size_t>(r.output_ids.size(), longest + 2);
      const std::string text =
          tokenizer_->decode(std::span(r.output_ids).subspan(r.output_ids.size() - tail),
                             /*skip_special_tokens=*/true);
      for (const auto& s : r.stop_strings) {
        if (!s.empty() && text.find(s) != std::string::npos) {
          r.finish = {FinishKind::kStopString, -1, s, ""};
          return;
        }
      }
    }
  }
  if (r.output_len() >= p.max_new_tokens ||
      r.input_len() + r.output_len() >= runner_.context_len()) {
    r.finish = {FinishKind::kLength, -1, "", ""};
  }
}

void Scheduler::emit(Req& r, StreamEvent e) {
  e.prompt_tokens = r.input_len();
  e.completion_tokens = r.output_len();
  e.cached_tokens = r.cached_tokens;
  e.finished = r.finished();
  e.finish = r.finish;
  if (pd_prefill_ && pd_prefill_->owns(r)) {
    // A prefill server's request answers once its KV reached the decode side.
    r.held_events.push_back(std::move(e));
    return;
  }
  if (r.stream) outbox_.emplace_back(r.stream, std::move(e));
}

StreamOutputs Scheduler::take_outputs() {
  StreamOutputs out;
  out.swap(outbox_);
  return out;
}

void Scheduler::finish_and_release(Req& r) {
  // Between steps only a request with a row holds a prefix lock: a waiting request's match
  // (init_next_round_input) is locked only once PrefillAdder admits it, in the step that
  // allocates its row.
  if (r.kv.row != mem::kNoRow) {
    mem::release_kv_cache(memory_, r.kv, r.all_ids(), !r.finish.cut_short());
  }
  if (metrics_) metrics_->on_finished(seconds(Clock::now() - r.arrival), r.finish.cut_short());
  forget(&r);
}

void Scheduler::forget(Req* r) {
  std::erase(running_, r);
  std::erase(waiting_, r);
  if (chunked_ == r) chunked_ = nullptr;
  reqs_.erase(r->id);  // destroys r
}

bool Scheduler::abort(const std::string& rid, const std::string& why) {
  for (auto& [id, req] : reqs_) {
    if (req->rid != rid) continue;
    Req& r = *req;
    if (pd_prefill_ && pd_prefill_->owns(r)) {
      pd_prefill_->abort(r, why);
      return true;
    }
    if (pd_decode_ && pd_decode_->owns(r)) {
      pd_decode_->abort(r, why);
      return true;
    }
    r.finish = {FinishKind::kAbort, -1, "", why};
    StreamEvent e;
    emit(r, std::move(e));
    finish_and_release(r);
    return true;
  }
  return false;
}

void Scheduler::abort_all(const std::string& why) {
  std::vector<std::string> rids;
  for (const auto& [id, r] : reqs_)
    rids.push_back(r->rid);
  for (const auto& rid : rids)
    abort(rid, why);
}

bool Scheduler::step() {
  const Clock::time_point start = Clock::now();
  const double cpu_start = thread_cpu_seconds();
  const double forward0 = time_.forward_seconds, sample0 = time_.sample_seconds;
  const double forward_cpu0 = time_.forward_cpu_seconds;
  bool handed_off = false;
  if (pd_prefill_) handed_off = pd_prefill_->poll();
  if (pd_decode_) handed_off = pd_decode_->poll();
  if (handed_off && early_outputs_ && !outbox_.empty()) early_outputs_(take_outputs());
  const std::vector<Req*> batch = get_new_batch_prefill();
  bool decode = false;
  if (!batch.empty()) {
    run_extend(batch);
  } else if (!running_.empty()) {
    run_decode();
    decode = true;
  } else {
    return handed_off;
  }
  const double took = seconds(Clock::now() - start);
  const double cpu = thread_cpu_seconds() - cpu_start;
  time_.step_seconds += took;
  time_.step_cpu_seconds += cpu;
  if (decode) {
    time_.decode_step_seconds += took;
    time_.decode_forward_seconds += time_.forward_seconds - forward0;
    time_.decode_sample_seconds += time_.sample_seconds - sample0;
    time_.decode_scheduler_cpu_seconds +=
        cpu - (time_.forward_cpu_seconds - forward_cpu0) - (time_.sample_seconds - sample0);
  }
  if (metrics_) {
    const SchedulerStats s = stats();
    metrics_->set_load(s.running, s.waiting,
                       s.total_tokens == 0 ? 0.0 : double(s.used_tokens) / double(s.total_tokens));
  }
  return true;
}

Status Scheduler::check_memory_invariants() const {
  std::vector<const mem::KvReqState*> live;
  for (const auto& [id, r] : reqs_)
    live.push_back(&r->kv);
  return mem::check_memory_invariants(memory_, live);
}

Status Scheduler::check_idle_invariants() const {
  mem::MemoryReport report;
  KV_RETURN_IF_ERROR(mem::check_memory_invariants(memory_, {}, &report));
  if (report.protected_ != 0) {
    return make_status(StatusCode::kInternal, "idle with {} protected tokens", report.protected_);
  }
  return Status::ok();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats s;
  s.running = static_cast<int32_t>(running_.size()) + (chunked_ != nullptr);
  s.waiting = static_cast<int32_t>(waiting_.size());
  s.total_tokens = kv_.allocator().size();
  s.available_tokens = kv_.allocator().available_size();
  s.evictable_tokens = cache_.evictable_size();
  s.used_tokens = s.total_tokens - s.available_tokens - s.evictable_tokens;
  s.new_token_ratio = new_token_ratio_;
  s.retractions = retractions_;
  s.prefill_batches = prefill_batches_;
  s.decode_steps = decode_steps_;
  s.failed_batches = failed_batches_;
  s.step_seconds = time_.step_seconds;
  s.forward_seconds = time_.forward_seconds;
  s.sample_seconds = time_.sample_seconds;
  s.decode_step_seconds = time_.decode_step_seconds;
  s.decode_forward_seconds = time_.decode_forward_seconds;
  s.decode_sample_seconds = time_.decode_sample_seconds;
  s.step_cpu_seconds = time_.step_cpu_seconds;
  s.forward_cpu_seconds = time_.forward_cpu_seconds;
  s.decode_scheduler_cpu_seconds = time_.decode_scheduler_cpu_seconds;
  return s;
}

}  // namespace kvserve::engine

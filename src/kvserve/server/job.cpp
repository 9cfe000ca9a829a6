#include "kvserve/server/job.h"

#include <fmt/format.h>

#include <deque>
#include <iterator>
#include <thread>

namespace kvserve::server {

std::variant<std::unique_ptr<Job>, ApiError> Job::start(engine::Engine& engine,
                                                        const std::vector<GenerationSpec>& specs,
                                                        int32_t n,
                                                        const std::vector<std::string>& rids) {
  std::unique_ptr<Job> job(new Job(engine));
  job->specs_ = specs;
  job->created_ = std::chrono::duration_cast<std::chrono::seconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  for (size_t s = 0; s < specs.size(); ++s) {
    for (int32_t j = 0; j < n; ++j) {
      engine::SubmitRequest sub;
      sub.input_ids = specs[s].input_ids;
      sub.sampling = specs[s].sampling;
      if (sub.sampling.seed && j > 0) *sub.sampling.seed += static_cast<uint64_t>(j);
      sub.stop = specs[s].stop;
      sub.logprob_start_len = specs[s].logprob_start_len;
      sub.disagg = specs[s].disagg;
      if (!rids.empty()) sub.rid = n == 1 ? rids[s] : fmt::format("{}-{}", rids[s], j);
      auto stream = engine.submit(sub);
      if (!stream.is_ok()) {
        job->abort();
        return from_status(stream.status());
      }
      Choice c;
      c.spec = s;
      c.rid = sub.rid;
      c.stream = std::move(stream).value();
      c.output = std::make_unique<OutputCollector>(engine.tokenizer(), specs[s].stop,
                                                   specs[s].skip_special_tokens);
      job->choices_.push_back(std::move(c));
    }
  }
  return job;
}

Job::~Job() {
  abort();
}

bool Job::all_done() const {
  for (const Choice& c : choices_) {
    if (!c.done) return false;
  }
  return true;
}

void Job::abort() {
  for (Choice& c : choices_) {
    if (!c.done) {
      engine_.abort(c.rid);
      c.done = true;
    }
  }
}

double Job::seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

namespace {

// Appends `next` (a later event of the same request) to `merged`: tokens and logprobs
// concatenate; counters and the finish state are the latest.
void merge_event(engine::StreamEvent& merged, engine::StreamEvent&& next) {
  merged.token_ids.insert(merged.token_ids.end(), next.token_ids.begin(), next.token_ids.end());
  merged.logprobs.insert(merged.logprobs.end(), next.logprobs.begin(), next.logprobs.end());
  merged.top_logprobs.insert(merged.top_logprobs.end(),
                             std::make_move_iterator(next.top_logprobs.begin()),
                             std::make_move_iterator(next.top_logprobs.end()));
  if (!next.input_logprobs.empty()) merged.input_logprobs = std::move(next.input_logprobs);
  merged.finished = next.finished;
  merged.finish = std::move(next.finish);
  merged.prompt_tokens = next.prompt_tokens;
  merged.completion_tokens = next.completion_tokens;
  merged.cached_tokens = next.cached_tokens;
}

}  // namespace

void Job::poll(
    std::chrono::milliseconds timeout,
    const std::function<void(size_t, const std::string&, const engine::StreamEvent&)>& on_event) {
  const auto deadline = Clock::now() + timeout;
  std::deque<engine::StreamEvent> events;
  while (true) {
    bool any = false;
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.done) continue;
      // With a single choice, block on it; with several, look at each without blocking.
      auto wait = std::chrono::milliseconds(0);
      if (choices_.size() == 1) {
        wait = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::max(deadline - Clock::now(), Clock::duration::zero()));
      }
      if (!c.stream->pop_all(events, wait)) continue;
      // Everything queued becomes one event: a reader that fell behind catches up with one
      // render and one write instead of one per token.
      any = true;
      engine::StreamEvent merged;
      std::string delta;
      for (engine::StreamEvent& e : events) {
        delta += c.output->consume(e);
        const bool stop_hit = c.output->stop_string_hit() && !e.finished;
        merge_event(merged, std::move(e));
        if (stop_hit) {
          engine_.abort(c.rid);  // the engine missed the stop string: end it here
          merged.finished = true;
          merged.finish = {engine::FinishKind::kStopString, -1, "", ""};
        }
        if (merged.finished) break;  // nothing after a finish counts
      }
      c.done = merged.finished;
      on_event(i, delta, merged);
    }
    if (any || Clock::now() >= deadline || all_done()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace kvserve::server

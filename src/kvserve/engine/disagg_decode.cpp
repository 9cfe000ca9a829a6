#include "kvserve/engine/disagg_decode.h"

#include <algorithm>

#include "kvserve/core/logging.h"
#include "kvserve/engine/prefill_adder.h"
#include "kvserve/engine/scheduler.h"
#include "kvserve/mem/common.h"

namespace kvserve::engine {
namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// How often an unanswered handshake is sent again.
constexpr auto kRegisterRetry = std::chrono::milliseconds(500);

}  // namespace

DecodeDisagg::DecodeDisagg(Scheduler& scheduler, DisaggContext context)
    : s_(scheduler), ctx_(std::move(context)) {
  stats_.mode = DisaggMode::kDecode;
  if (ctx_.layout.staging_bytes > 0) {
    // The prefill stages in this pool's format (it converts): this side only copies.
    const mem::KvPoolConfig& c = ctx_.pool->config();
    const disagg::StagingFormat format{c.num_layers, c.num_kv_heads, c.head_dim, c.dtype};
    const auto capacity = static_cast<int64_t>(ctx_.staging.bytes / format.token_bytes());
    extents_ = std::make_unique<disagg::StagingExtents>(capacity);
    Result<std::unique_ptr<disagg::KvStager>> stager =
        disagg::KvStager::create(*ctx_.pool, format, 0, capacity, ctx_.staging);
    // Engine::init_staging sized the region for at least one token of this format.
    KV_CHECK(stager.is_ok(), "decode staging: {}", stager.status().message());
    stager_ = std::move(stager).value();
    // Several rooms share the buffer; a longer prompt passes through its extent in rounds.
    max_extent_ = static_cast<int32_t>(std::clamp<int64_t>(capacity / 4, 1, 1 << 30));
  }
}

DecodeDisagg::~DecodeDisagg() = default;

bool DecodeDisagg::owns(const Req& r) const {
  if (!r.disagg) return false;
  const auto it = rooms_.find(r.disagg->room);
  return it != rooms_.end() && it->second.req == &r;
}

void DecodeDisagg::add(Req* r) {
  const uint64_t id = r->disagg->room;
  if (rooms_.contains(id)) {
    r->disagg.reset();
    r->finish = {FinishKind::kError, -1, "",
                 fmt::format("bootstrap_room {} is already in use on this decode server", id)};
    s_.emit(*r, StreamEvent{});
    s_.forget(r);
    return;
  }
  Room& room = rooms_[id];
  room.req = r;
  room.peer = fmt::format("{}:{}", r->disagg->bootstrap_host, r->disagg->bootstrap_port);
  room.poll = pd::KvPollState(r->arrival);
  prealloc_.push_back(id);
}

DecodeDisagg::Peer* DecodeDisagg::peer_for(const std::string& key, const DisaggTarget& t) {
  auto it = peers_.find(key);
  if (it != peers_.end()) return &it->second;
  Result<std::unique_ptr<pd::ControlClient>> client =
      pd::ControlClient::connect(t.bootstrap_host, t.bootstrap_port, ctx_.id);
  if (!client.is_ok()) return nullptr;
  Peer& p = peers_[key];
  p.host = t.bootstrap_host;
  p.port = t.bootstrap_port;
  p.client = std::move(client).value();
  p.created = p.last_heard = Clock::now();
  send_register(p);
  return &p;
}

void DecodeDisagg::send_register(Peer& p) {
  pd::Message m;
  m.type = pd::MsgType::kRegister;
  m.sender = ctx_.id;
  m.layout = ctx_.layout;
  m.region.backend = ctx_.region.backend;
  m.region.blob.assign(ctx_.region.blob.begin(), ctx_.region.blob.end());
  m.region.bytes = ctx_.region.bytes;
  p.client->send(m);
  p.register_sent = Clock::now();
}

double DecodeDisagg::reserved_tokens(double new_token_ratio) const {
  double reserved = 0;
  for (const auto& [id, room] : rooms_) {
    if (room.allocated && !room.draining) {
      reserved += static_cast<double>(remaining_output_budget(*room.req)) * new_token_ratio;
    }
  }
  return reserved;
}

bool DecodeDisagg::try_preallocate(uint64_t id, Room& room) {
  Req& r = *room.req;
  const int32_t page = s_.kv_.shape().page_size;
  int32_t allocated_rooms = 0;
  for (const auto& [other, rm] : rooms_)
    allocated_rooms += rm.allocated ? 1 : 0;
  if (static_cast<int32_t>(s_.running_.size()) + allocated_rooms >= s_.kv_.req_to_token().size()) {
    return false;
  }
  // The admission budget: this prompt's pages plus the output reservations of everything running
  // or pre-allocated (and this request's own) must fit in what is free or evictable.
  double reserved = reserved_tokens(s_.new_token_ratio_) +
                    static_cast<double>(remaining_output_budget(r)) * s_.new_token_ratio_;
  for (const Req* running : s_.running_)
    reserved += static_cast<double>(remaining_output_budget(*running)) * s_.new_token_ratio_;
  const double need = static_cast<double>(mem::ceil_align(r.input_len(), page)) + reserved;
  const auto have =
      static_cast<double>(s_.kv_.allocator().available_size() + s_.cache_.evictable_size());
  if (have < need) return false;
  if (extents_) {
    room.staging_len = std::min(r.input_len(), max_extent_);
    room.staging_begin = extents_->allocate(room.staging_len);
    if (room.staging_begin < 0) return false;  // the staging buffer is full for now
  }
  r.fill_ids = r.origin_input_ids;
  r.kv = mem::KvReqState{};
  r.kv.last_node = s_.cache_.match_prefix({}).last_node;
  s_.cache_.inc_lock_ref(r.kv.last_node);
  std::vector<int32_t> slots;
  mem::KvReqState* kv = &r.kv;
  const int32_t len = r.input_len();
  if (!mem::alloc_for_extend(s_.memory_, std::span(&kv, 1), std::span(&len, 1), slots).is_ok()) {
    s_.cache_.dec_lock_ref(r.kv.last_node);
    r.kv = mem::KvReqState{};
    if (room.staging_begin >= 0) extents_->free(room.staging_begin);
    room.staging_begin = -1;
    return false;
  }
  pd::Message meta;
  meta.type = pd::MsgType::kMeta;
  meta.room = id;
  meta.num_tokens = len;
  if (room.staging_begin >= 0) {
    meta.staging_offset = static_cast<int64_t>(stager_->format().bytes(room.staging_begin));
    meta.staging_tokens = room.staging_len;
  }
  for (int32_t p = 0; p < mem::ceil_div(len, page); ++p)
    meta.pages.push_back(s_.kv_.req_to_token().at(r.kv.row, p * page) / page);
  room.allocated = true;
  room.meta_at = Clock::now();
  room.poll.advance(pd::KvPoll::kWaitingForInput, room.meta_at);
  if (!peers_.at(room.peer).client->send(meta)) {
    end(id, room, {FinishKind::kError, -1, "", "could not send to the prefill server"}, false);
  }
  return true;
}

void DecodeDisagg::prebuilt(uint64_t id, Room& room, const pd::Message& done) {
  Req& r = *room.req;
  if (done.token < 0 || done.token >= s_.runner_.vocab_size()) {
    return end(id, room,
               {FinishKind::kError, -1, "",
                fmt::format("the prefill server sent token {} outside the vocabulary", done.token)},
               false);
  }
  if (room.staging_begin >= 0) {
    if (room.scattered != r.input_len()) {
      return end(id, room,
                 {FinishKind::kError, -1, "",
                  fmt::format("the prefill server sent done after {} of the prompt's {} tokens "
                              "were staged",
                              room.scattered, r.input_len())},
                 false);
    }
    extents_->free(room.staging_begin);
    room.staging_begin = -1;
  }
  room.poll.advance(pd::KvPoll::kSuccess);
  ++stats_.succeeded;
  const Clock::time_point now = Clock::now();
  stats_.handoff_seconds += seconds(now - room.poll.created());
  stats_.bootstrap_seconds += seconds(room.meta_at - room.poll.created());
  stats_.wait_seconds += seconds(now - room.meta_at);
  rooms_.erase(id);
  // The prompt's KV is in its slots: no forward. The first token is taken as if sampled here.
  if (s_.metrics_) s_.metrics_->on_admitted(r.input_len(), 0);
  SampledToken t;
  t.token = done.token;
  t.logprob = done.logprob;
  s_.accept_sampled(r, t);
  if (r.finished()) {
    s_.finish_and_release(r);
  } else {
    s_.running_.push_back(&r);
  }
}

Status DecodeDisagg::scatter_piece(uint64_t id, Room& room, int32_t begin, int32_t end) {
  const Req& r = *room.req;
  const int32_t at = room.staging_len > 0 ? begin % room.staging_len : 0;
  if (begin != room.scattered || end <= begin || end > r.input_len() ||
      at + (end - begin) > room.staging_len) {
    return invalid_argument(
        "staged tokens [{}, {}) do not follow the {} scattered of a {}-token prompt through a "
        "{}-token extent",
        begin, end, room.scattered, r.input_len(), room.staging_len);
  }
  const std::span<const int32_t> slots = s_.kv_.req_to_token().row(r.kv.row, begin, end - begin);
  KV_ASSIGN_OR_RETURN(
      const platform::EventHandle written,
      stager_->scatter(slots, {}, stager_->format().bytes(room.staging_begin + at)));
  // The runner's stream does not wait on the stager's: a later forward reads these slots, and
  // the prefill may overwrite the extent once it has the credit.
  ctx_.pool->platform().synchronize_event(written);
  room.scattered = end;
  pd::Message credit;
  credit.type = pd::MsgType::kCredit;
  credit.room = id;
  credit.end = end;
  if (auto peer = peers_.find(room.peer); peer != peers_.end()) peer->second.client->send(credit);
  return Status::ok();
}

void DecodeDisagg::free_pages(Room& room) {
  if (room.staging_begin >= 0) extents_->free(room.staging_begin);
  room.staging_begin = -1;
  Req& r = *room.req;
  if (r.kv.row != mem::kNoRow) {
    mem::release_kv_cache(s_.memory_, r.kv, r.all_ids(), /*insert=*/false);
  }
  if (s_.metrics_) s_.metrics_->on_finished(seconds(Clock::now() - r.arrival), true);
  s_.forget(&r);
}

void DecodeDisagg::end(uint64_t id, Room& room, FinishReason finish, bool tell_prefill) {
  Req& r = *room.req;
  room.poll.fail(finish.message);
  if (finish.kind == FinishKind::kAbort) {
    ++stats_.aborted;
  }
  ++stats_.failed;
  r.finish = std::move(finish);
  s_.emit(r, StreamEvent{});
  auto peer = peers_.find(room.peer);
  if (tell_prefill && peer != peers_.end()) {
    pd::Message abort;
    abort.type = pd::MsgType::kAbort;
    abort.room = id;
    abort.reason = r.finish.message;
    peer->second.client->send(abort);
  }
  if (room.allocated && tell_prefill && peer != peers_.end()) {
    // The prefill may be writing into these pages: they wait for its answer.
    room.draining = true;
    room.drain_since = Clock::now();
    return;
  }
  free_pages(room);
  rooms_.erase(id);
}

void DecodeDisagg::abort(Req& r, const std::string& why) {
  const uint64_t id = r.disagg->room;
  Room& room = rooms_.at(id);
  if (room.draining) return;  // already ended for its client
  end(id, room, {FinishKind::kAbort, -1, "", why}, /*tell_prefill=*/true);
}

void DecodeDisagg::on_message(const std::string& key, const pd::Message& m) {
  Peer& p = peers_.at(key);
  p.last_heard = Clock::now();
  switch (m.type) {
    case pd::MsgType::kRegistered:
      if (m.ok) {
        p.registered = true;
        KV_LOG_INFO("disaggregation: registered with the prefill server at {}", key);
      } else {
        p.refused = m.reason;
      }
      return;
    case pd::MsgType::kPong:
      if (!m.ok && p.registered) {
        // The prefill server does not know us (it restarted): handshake again.
        p.registered = false;
        send_register(p);
      }
      return;
    default:
      break;
  }
  auto it = rooms_.find(m.room);
  if (it == rooms_.end() || it->second.peer != key) return;  // a room that ended here
  Room& room = it->second;
  switch (m.type) {
    case pd::MsgType::kStaged:
      if (room.allocated && !room.draining && room.staging_begin >= 0) {
        if (const Status st = scatter_piece(m.room, room, m.begin, m.end); !st.is_ok()) {
          end(m.room, room,
              {FinishKind::kError, -1, "",
               fmt::format("the staged KV could not be scattered: {}", st.message())},
              /*tell_prefill=*/true);
        }
      }
      return;
    case pd::MsgType::kDone:
      if (room.draining) {
        free_pages(room);  // complete: nothing more can land
        rooms_.erase(it);
      } else if (room.allocated) {
        prebuilt(m.room, room, m);
      }
      return;
    case pd::MsgType::kFailed:
    case pd::MsgType::kAbortAck:
      if (room.draining) {
        free_pages(room);
        rooms_.erase(it);
      } else {
        end(m.room, room,
            {FinishKind::kError, -1, "",
             fmt::format("the prefill server failed the request: {}", m.reason)},
            /*tell_prefill=*/false);
      }
      return;
    default:
      KV_LOG_WARN("disaggregation: unexpected {} from the prefill server at {}",
                  pd::msg_type_name(m.type), key);
  }
}

void DecodeDisagg::peer_dead(const std::string& key, const std::string& why) {
  KV_LOG_WARN("disaggregation: prefill server at {}: {}; its requests fail", key, why);
  std::vector<uint64_t> ids;
  for (const auto& [id, room] : rooms_) {
    if (room.peer == key) ids.push_back(id);
  }
  for (const uint64_t id : ids) {
    Room& room = rooms_.at(id);
    if (room.draining) {
      free_pages(room);  // a dead sender writes nothing more
      rooms_.erase(id);
    } else {
      end(id, room, {FinishKind::kError, -1, "", fmt::format("prefill server {}: {}", key, why)},
          /*tell_prefill=*/false);
    }
  }
  peers_.erase(key);
}

bool DecodeDisagg::poll() {
  bool worked = false;
  const Clock::time_point now = Clock::now();
  const auto interval = std::chrono::duration<double>(ctx_.options.heartbeat_interval_s);
  const auto heartbeat_timeout = std::chrono::duration<double>(ctx_.options.heartbeat_timeout_s);
  const auto bootstrap_timeout = std::chrono::duration<double>(ctx_.options.bootstrap_timeout_s);
  const auto transfer_timeout = std::chrono::duration<double>(ctx_.options.transfer_timeout_s);
  // Messages, handshakes, heartbeats.
  std::vector<std::string> keys;
  for (const auto& [key, p] : peers_)
    keys.push_back(key);
  for (const std::string& key : keys) {
    for (const pd::Message& m : peers_.at(key).client->receive()) {
      on_message(key, m);
      worked = true;
    }
    Peer& p = peers_.at(key);
    const bool busy = std::any_of(rooms_.begin(), rooms_.end(),
                                  [&](const auto& e) { return e.second.peer == key; });
    if (!p.refused.empty()) {
      // Refused: its requests fail with the reason; the entry goes (the next request asks again).
      const std::string why = fmt::format("refused this decode server: {}", p.refused);
      ++stats_.refused_peers;
      peer_dead(key, why);
      worked = true;
      continue;
    }
    if (now - p.last_heard > heartbeat_timeout) {
      if (busy) {
        peer_dead(key, fmt::format("no answer for {:.1f} s", seconds(now - p.last_heard)));
      } else {
        peers_.erase(key);
      }
      worked = true;
      continue;
    }
    if (!p.registered && now - p.register_sent > kRegisterRetry) send_register(p);
    if (now - p.ping_sent > interval) {
      pd::Message ping;
      ping.type = pd::MsgType::kPing;
      ping.seq = ++p.seq;
      p.client->send(ping);
      p.ping_sent = now;
    }
  }
  // Prealloc queue, in arrival order: a handshake first, then memory.
  std::erase_if(prealloc_, [&](uint64_t id) {
    const auto it = rooms_.find(id);
    return it == rooms_.end() || it->second.allocated;
  });
  for (size_t i = 0; i < prealloc_.size(); ++i) {
    const uint64_t id = prealloc_[i];
    Room& room = rooms_.at(id);
    Peer* p = peer_for(room.peer, *room.req->disagg);
    if (p == nullptr) {
      end(id, room,
          {FinishKind::kError, -1, "",
           fmt::format("cannot reach the prefill server's bootstrap address {}", room.peer)},
          false);
      worked = true;
      continue;
    }
    if (!p->registered) continue;
    if (!try_preallocate(id, room)) break;  // no memory: the rest wait too (first come first)
    worked = true;
  }
  // Timeouts: Bootstrapping; WaitingForInput and Transferring (one span: the decode side cannot
  // tell them apart); drains the prefill never answers (bounded, logged).
  std::vector<uint64_t> ids;
  for (const auto& [id, room] : rooms_)
    ids.push_back(id);
  for (const uint64_t id : ids) {
    auto it = rooms_.find(id);
    if (it == rooms_.end()) continue;
    Room& room = it->second;
    if (room.draining) {
      if (now - room.drain_since > 2 * transfer_timeout + heartbeat_timeout) {
        KV_LOG_ERROR(
            "disaggregation: room {}: the prefill server at {} never acknowledged the abort; "
            "freeing its pages",
            id, room.peer);
        free_pages(room);
        rooms_.erase(it);
        worked = true;
      }
      continue;
    }
    if (!room.allocated && now - room.poll.created() > bootstrap_timeout) {
      ++stats_.timeouts;
      end(id, room,
          {FinishKind::kError, -1, "",
           fmt::format("bootstrap timeout: not started within {} s ({})",
                       ctx_.options.bootstrap_timeout_s,
                       peers_.contains(room.peer) && peers_.at(room.peer).registered
                           ? "no KV memory for it here"
                           : "no handshake with the prefill server " + room.peer)},
          true);
      worked = true;
    } else if (room.allocated && now - room.meta_at > transfer_timeout) {
      ++stats_.timeouts;
      end(id, room,
          {FinishKind::kError, -1, "",
           fmt::format("transfer timeout: the prompt's KV did not arrive within {} s",
                       ctx_.options.transfer_timeout_s)},
          true);
      worked = true;
    }
  }
  return worked;
}

DisaggStats DecodeDisagg::stats() const {
  DisaggStats s = stats_;
  for (const auto& [id, room] : rooms_) {
    if (room.draining) {
      ++s.draining;
    } else if (!room.allocated) {
      ++s.bootstrapping;
    } else {
      ++s.waiting_for_input;
    }
  }
  s.peers = static_cast<int32_t>(peers_.size());
  if (extents_) {
    s.staging_tokens = extents_->capacity();
    s.staging_used_tokens = extents_->used();
  }
  return s;
}

}  // namespace kvserve::engine

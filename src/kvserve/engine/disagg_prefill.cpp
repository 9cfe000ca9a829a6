#include "kvserve/engine/disagg_prefill.h"

#include <algorithm>

#include "kvserve/core/logging.h"
#include "kvserve/engine/scheduler.h"
#include "kvserve/mem/common.h"

namespace kvserve::engine {
namespace {

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

disagg::KvRegionLayout region_of(const pd::KvLayout& l) {
  return {l.buffer_offsets, l.page_bytes, l.buffer_bytes};
}

}  // namespace

PrefillDisagg::PrefillDisagg(Scheduler& scheduler, DisaggContext context)
    : s_(scheduler), ctx_(std::move(context)), local_region_(region_of(ctx_.layout)) {
  stats_.mode = DisaggMode::kPrefill;
  stats_.bootstrap_port = ctx_.server->port();
}

PrefillDisagg::~PrefillDisagg() {
  for (auto& [id, room] : rooms_) {
    for (const Transfer& t : room.transfers)
      ctx_.transport->release(t.id);
  }
}

bool PrefillDisagg::owns(const Req& r) const {
  if (!r.disagg) return false;
  const auto it = rooms_.find(r.disagg->room);
  return it != rooms_.end() && it->second.req == &r;
}

void PrefillDisagg::add(Req* r) {
  const uint64_t id = r->disagg->room;
  if (ended_.contains(id) || (rooms_.contains(id) && rooms_.at(id).req != nullptr) ||
      (rooms_.contains(id) && rooms_.at(id).ending)) {
    // A room is used once: a second request with it cannot be told apart at the decode side.
    r->disagg.reset();
    r->finish = {FinishKind::kError, -1, "",
                 fmt::format("bootstrap_room {} is already in use or ended", id)};
    s_.emit(*r, StreamEvent{});
    s_.forget(r);
    return;
  }
  Room& room = rooms_[id];
  room.req = r;
  room.poll = pd::KvPollState(r->arrival);
  room.in_bootstrap = true;
}

void PrefillDisagg::send(const std::string& peer, pd::Message m) {
  if (!ctx_.server->send(peer, m)) {
    KV_LOG_WARN("disaggregation: could not send {} for room {} to decode server {}",
                pd::msg_type_name(m.type), m.room, peer);
  }
}

void PrefillDisagg::on_message(const std::string& from, const pd::Message& m) {
  if (auto it = peers_.find(from); it != peers_.end()) it->second.last_heard = Clock::now();
  switch (m.type) {
    case pd::MsgType::kRegister:
      return on_register(from, m);
    case pd::MsgType::kMeta:
      return on_meta(from, m);
    case pd::MsgType::kAbort:
      return on_abort(from, m);
    case pd::MsgType::kCredit: {
      const auto it = rooms_.find(m.room);
      if (it != rooms_.end() && it->second.peer == from) {
        it->second.credited = std::max(it->second.credited, m.end);
      }
      return;
    }
    case pd::MsgType::kPing: {
      pd::Message pong;
      pong.type = pd::MsgType::kPong;
      pong.seq = m.seq;
      pong.ok = peers_.contains(from);  // false: register again
      send(from, pong);
      return;
    }
    default:
      KV_LOG_WARN("disaggregation: unexpected {} from decode server {}", pd::msg_type_name(m.type),
                  from);
  }
}

void PrefillDisagg::on_register(const std::string& from, const pd::Message& m) {
  pd::Message reply;
  reply.type = pd::MsgType::kRegistered;
  reply.layout = ctx_.layout;
  Status ok = pd::check_compatible(ctx_.layout, m.layout);
  Result<disagg::PeerId> peer = disagg::PeerId{};
  if (ok.is_ok()) {
    disagg::RegionDescriptor region;
    region.backend = m.region.backend;
    region.blob.assign(m.region.blob.begin(), m.region.blob.end());
    region.bytes = m.region.bytes;
    if (auto old = peers_.find(from); old != peers_.end()) {
      // The decode server registers again (it restarted, or lost us): a fresh connection.
      ctx_.transport->disconnect(old->second.transport_peer);
      peers_.erase(old);
    }
    peer = ctx_.transport->connect(region);
    if (!peer.is_ok()) ok = peer.status();
  }
  if (ok.is_ok() && m.layout.staging_bytes > 0) {
    Result<disagg::KvStager*> stager = stager_for(m.layout);
    if (!stager.is_ok()) ok = stager.status();
  }
  reply.ok = ok.is_ok();
  if (!ok.is_ok()) {
    reply.reason = ok.message();
    ++stats_.refused_peers;
    KV_LOG_WARN("disaggregation: refused decode server {}: {}", from, ok.message());
  } else {
    peers_[from] = Peer{peer.value(), m.layout, Clock::now()};
    KV_LOG_INFO("disaggregation: decode server {} registered", from);
  }
  send(from, reply);
}

void PrefillDisagg::on_meta(const std::string& from, const pd::Message& m) {
  auto fail_now = [&](const std::string& why) {
    pd::Message f;
    f.type = pd::MsgType::kFailed;
    f.room = m.room;
    f.reason = why;
    send(from, f);
  };
  if (!peers_.contains(from)) return fail_now("the decode server is not registered here");
  if (ended_.contains(m.room)) return fail_now("the prefill half of this room already ended");
  Room& room = rooms_[m.room];
  if (room.have_meta || room.ending) return fail_now("duplicate metadata for this room");
  if (room.req == nullptr) room.poll = pd::KvPollState();  // the metadata came first
  room.peer = from;
  room.have_meta = true;
  room.dst_pages = m.pages;
  room.num_tokens = m.num_tokens;
  room.staging_offset = m.staging_offset;
  room.staging_tokens = m.staging_tokens;
}

Result<disagg::KvStager*> PrefillDisagg::stager_for(const pd::KvLayout& decode) {
  if (auto it = stagers_.find(decode.kv_dtype); it != stagers_.end()) return it->second.get();
  DType dtype{};
  if (!parse_dtype(decode.kv_dtype, &dtype)) {
    return invalid_argument("the decode server's KV dtype '{}' is unknown here", decode.kv_dtype);
  }
  const disagg::StagingFormat format{decode.num_layers, decode.num_kv_heads, decode.head_dim,
                                     dtype};
  const auto tokens = static_cast<int64_t>(ctx_.staging.bytes / format.token_bytes());
  KV_ASSIGN_OR_RETURN(std::unique_ptr<disagg::KvStager> stager,
                      disagg::KvStager::create(*ctx_.pool, format, 0, tokens, ctx_.staging));
  return (stagers_[decode.kv_dtype] = std::move(stager)).get();
}

void PrefillDisagg::pump_staging() {
  for (size_t i = 0; !staging_busy_ && i < staged_.size();) {
    Piece& piece = staged_[i];
    const auto it = rooms_.find(piece.room);
    if (it == rooms_.end() || it->second.ending || it->second.req == nullptr) {
      staged_.erase(staged_.begin() + static_cast<std::ptrdiff_t>(i));  // never sent
      continue;
    }
    Room& room = it->second;
    Req& r = *room.req;
    const Peer& peer = peers_.at(room.peer);
    Result<disagg::KvStager*> stager = stager_for(peer.layout);
    if (!stager.is_ok()) {
      staged_.erase(staged_.begin() + static_cast<std::ptrdiff_t>(i));
      fail(piece.room, room, fmt::format("KV staging: {}", stager.status().message()));
      continue;
    }
    disagg::KvStager& st = *stager.value();
    // What the room's extent can take now: up to its credit, and not past the extent's end.
    const int32_t at = piece.begin % room.staging_tokens;
    const int64_t n = std::min<int64_t>({piece.end - piece.begin, st.max_tokens(),
                                         room.credited + room.staging_tokens - piece.begin,
                                         room.staging_tokens - at});
    if (n <= 0) {
      ++i;  // waits for the decode's credit; other rooms' pieces may go
      continue;
    }
    const std::span<const int32_t> slots =
        s_.kv_.req_to_token().row(r.kv.row, piece.begin, static_cast<int32_t>(n));
    const disagg::WriteOp op{0, static_cast<uint64_t>(room.staging_offset) + st.format().bytes(at),
                             st.format().bytes(n)};
    Result<platform::EventHandle> staged = st.gather(slots);
    Result<disagg::TransferId> posted =
        staged.is_ok()
            ? ctx_.transport->post(peer.transport_peer, std::span(&op, 1), staged.value())
            : Result<disagg::TransferId>(staged.status());
    if (!posted.is_ok()) {
      ++stats_.transfer_failures;
      staged_.erase(staged_.begin() + static_cast<std::ptrdiff_t>(i));
      fail(piece.room, room,
           fmt::format("KV transfer could not start: {}", posted.status().message()));
      continue;
    }
    room.transfers.push_back({posted.value(), Clock::now(), op.length, /*staged=*/true, piece.begin,
                              piece.begin + static_cast<int32_t>(n)});
    room.queued_tokens -= static_cast<int32_t>(n);
    piece.begin += static_cast<int32_t>(n);
    if (piece.begin == piece.end) staged_.erase(staged_.begin() + static_cast<std::ptrdiff_t>(i));
    ++stats_.staged_chunks;
    staging_busy_ = true;
  }
}

void PrefillDisagg::on_abort(const std::string& from, const pd::Message& m) {
  auto it = rooms_.find(m.room);
  if (it == rooms_.end()) {
    // Nothing of this room here (yet): acknowledge, and refuse the request if it comes later.
    ended_[m.room] = Clock::now();
    pd::Message ack;
    ack.type = pd::MsgType::kAbortAck;
    ack.room = m.room;
    send(from, ack);
    return;
  }
  if (it->second.peer.empty()) it->second.peer = from;
  ++stats_.aborted;
  fail(m.room, it->second, fmt::format("aborted by the decode server: {}", m.reason),
       /*ack=*/true);
}

void PrefillDisagg::end_request(Room& room, Req& r, FinishReason finish) {
  room.req = nullptr;
  if (room.in_bootstrap) room.in_bootstrap = false;
  StreamEvent e;
  if (finish.kind == FinishKind::kLength || finish.kind == FinishKind::kStopToken ||
      finish.kind == FinishKind::kStopString) {
    for (StreamEvent& h : r.held_events) {
      e.token_ids.insert(e.token_ids.end(), h.token_ids.begin(), h.token_ids.end());
      e.logprobs.insert(e.logprobs.end(), h.logprobs.begin(), h.logprobs.end());
      e.top_logprobs.insert(e.top_logprobs.end(), h.top_logprobs.begin(), h.top_logprobs.end());
      if (!h.input_logprobs.empty()) e.input_logprobs = h.input_logprobs;
    }
  }
  r.held_events.clear();
  r.finish = std::move(finish);
  s_.emit(r, std::move(e));  // no longer owned: goes out
  s_.finish_and_release(r);
}

void PrefillDisagg::fail(uint64_t room_id, Room& room, const std::string& why, bool ack) {
  if (!room.poll.terminal()) room.poll.fail(why);
  if (!room.counted) {
    room.counted = true;
    ++stats_.failed;
  }
  room.ending = true;
  room.ack = room.ack || ack;
  if (room.req != nullptr) {
    Req& r = *room.req;
    const bool in_bootstrap = room.in_bootstrap;
    room.in_bootstrap = false;
    if (in_bootstrap) {
      room.req = nullptr;
      r.held_events.clear();
      r.finish = {FinishKind::kError, -1, "", why};
      s_.emit(r, StreamEvent{});
      s_.forget(&r);
    } else {
      end_request(room, r, {FinishKind::kError, -1, "", why});
    }
  }
  ended_[room_id] = Clock::now();
}

void PrefillDisagg::abort(Req& r, const std::string& why, FinishKind kind) {
  const uint64_t id = r.disagg->room;
  Room& room = rooms_.at(id);
  ++(kind == FinishKind::kAbort ? stats_.aborted : stats_.failed);
  if (!room.poll.terminal()) room.poll.fail(why);
  room.counted = true;
  room.ending = true;
  room.req = nullptr;
  const bool in_bootstrap = room.in_bootstrap;
  room.in_bootstrap = false;
  r.held_events.clear();
  r.finish = {kind, -1, "", why};
  s_.emit(r, StreamEvent{});
  if (in_bootstrap) {
    s_.forget(&r);
  } else {
    s_.finish_and_release(r);
  }
  ended_[id] = Clock::now();
}

void PrefillDisagg::push_kv(Room& room, Req& r, int32_t end_token, bool last) {
  const int32_t page = s_.kv_.shape().page_size;
  const Peer& peer = peers_.at(room.peer);
  if (peer.layout.staging_bytes > 0) {
    // Through the staging buffers: token-granular pieces, gathered one at a time.
    if (end_token <= room.sent_tokens) return;
    if (ctx_.kv_written) ctx_.kv_written();
    staged_.push_back({r.disagg->room, room.sent_tokens, end_token});
    room.queued_tokens += end_token - room.sent_tokens;
    room.sent_tokens = end_token;
    room.poll.advance(pd::KvPoll::kTransferring);
    return;  // gathered from the next poll on (a failure there may end other rooms' requests)
  }
  const int32_t dst_page = peer.layout.page_size;
  // Whole pages: a partial last page waits for the rest of the prompt. Slots: every position.
  if (page == dst_page && !last) end_token = end_token / page * page;
  if (end_token <= room.sent_tokens) return;
  std::vector<int32_t> src;
  std::vector<int32_t> dst;
  disagg::KvRegionLayout src_region = local_region_;
  disagg::KvRegionLayout dst_region = region_of(peer.layout);
  if (page == dst_page) {
    for (int32_t p = room.sent_tokens / page; p < mem::ceil_div(end_token, page); ++p) {
      src.push_back(s_.kv_.req_to_token().at(r.kv.row, p * page) / page);
      dst.push_back(room.dst_pages.at(static_cast<size_t>(p)));
    }
  } else {
    // Both pools keep one row per slot (slot = page x page size + offset) in every layer buffer:
    // with other page sizes on the two sides the writes address slots.
    for (int32_t t = room.sent_tokens; t < end_token; ++t) {
      src.push_back(s_.kv_.req_to_token().at(r.kv.row, t));
      dst.push_back(room.dst_pages.at(static_cast<size_t>(t / dst_page)) * dst_page + t % dst_page);
    }
    src_region.page_bytes /= static_cast<uint64_t>(page);
    dst_region.page_bytes /= static_cast<uint64_t>(dst_page);
  }
  Result<std::vector<disagg::WriteOp>> ops = disagg::merge_runs(src, dst, src_region, dst_region);
  if (ops.is_ok() && ctx_.kv_written) ctx_.kv_written();
  Result<disagg::TransferId> posted =
      ops.is_ok() ? ctx_.transport->post(peer.transport_peer, ops.value()) : ops.status();
  if (!posted.is_ok()) {
    ++stats_.transfer_failures;
    return fail(r.disagg->room, room,
                fmt::format("KV transfer could not start: {}", posted.status().message()));
  }
  uint64_t bytes = 0;
  for (const disagg::WriteOp& op : ops.value())
    bytes += op.length;
  room.transfers.push_back({posted.value(), Clock::now(), bytes});
  room.sent_tokens = end_token;
  room.poll.advance(pd::KvPoll::kTransferring);
}

void PrefillDisagg::after_chunk(Req& r) {
  Room& room = rooms_.at(r.disagg->room);
  push_kv(room, r, r.kv.kv_committed_len, /*last=*/false);
}

void PrefillDisagg::after_prefill(Req& r) {
  const uint64_t id = r.disagg->room;
  Room& room = rooms_.at(id);
  push_kv(room, r, static_cast<int32_t>(r.input_len()), /*last=*/true);
  if (room.ending) return;  // the push failed; the request ended
  room.all_sent = true;
  room.sent_at = Clock::now();
  if (!r.finished()) r.finish = {FinishKind::kLength, -1, "", ""};  // the decode side goes on
}

void PrefillDisagg::succeed(Room& room) {
  room.poll.advance(pd::KvPoll::kSuccess);
  Req& r = *room.req;
  pd::Message done;
  done.type = pd::MsgType::kDone;
  done.room = r.disagg->room;
  done.token = r.output_ids.empty() ? -1 : r.output_ids.front();
  for (const StreamEvent& e : r.held_events) {
    if (!e.logprobs.empty()) done.logprob = e.logprobs.front();
  }
  send(room.peer, done);
  ++stats_.succeeded;
  room.counted = true;
  const Clock::time_point now = Clock::now();
  stats_.handoff_seconds += seconds(now - room.poll.created());
  stats_.bootstrap_seconds += seconds(room.input_at - room.poll.created());
  stats_.forward_seconds += seconds(room.sent_at - room.input_at);
  stats_.last_transfer_seconds += seconds(now - room.sent_at);
  end_request(room, r, r.finish);
}

bool PrefillDisagg::poll() {
  bool worked = false;
  const Clock::time_point now = Clock::now();
  for (const auto& [from, m] : ctx_.server->receive()) {
    on_message(from, m);
    worked = true;
  }
  const auto bootstrap_timeout = std::chrono::duration<double>(ctx_.options.bootstrap_timeout_s);
  const auto transfer_timeout = std::chrono::duration<double>(ctx_.options.transfer_timeout_s);
  const auto heartbeat_timeout = std::chrono::duration<double>(ctx_.options.heartbeat_timeout_s);
  // Decode servers silent too long: their rooms fail, their connection goes (a new handshake
  // brings them back).
  for (auto it = peers_.begin(); it != peers_.end();) {
    if (now - it->second.last_heard <= heartbeat_timeout) {
      ++it;
      continue;
    }
    KV_LOG_WARN("disaggregation: decode server {} silent for {:.1f} s: its rooms fail", it->first,
                seconds(now - it->second.last_heard));
    for (auto& [id, room] : rooms_) {
      if (room.peer == it->first && !room.ending) {
        fail(id, room, "the decode server stopped answering");
      }
    }
    ctx_.transport->disconnect(it->second.transport_peer);
    it = peers_.erase(it);
    worked = true;
  }
  for (auto it = rooms_.begin(); it != rooms_.end();) {
    const uint64_t id = it->first;
    Room& room = it->second;
    // Bootstrap queue: the destination pages arrived.
    if (room.in_bootstrap && room.have_meta) {
      Req& r = *room.req;
      const auto peer = peers_.find(room.peer);
      const int32_t dst_page =
          peer != peers_.end() ? peer->second.layout.page_size : s_.kv_.shape().page_size;
      const bool staged = peer != peers_.end() && peer->second.layout.staging_bytes > 0;
      if (staged && (room.staging_offset < 0 || room.staging_tokens <= 0)) {
        fail(id, room, "the decode server sent no staging extent for a staging pair");
      } else if (room.num_tokens != r.input_len() || static_cast<int64_t>(room.dst_pages.size()) !=
                                                         mem::ceil_div(r.input_len(), dst_page)) {
        fail(id, room,
             fmt::format("the decode server pre-allocated {} tokens ({} pages) for a prompt of {} "
                         "tokens",
                         room.num_tokens, room.dst_pages.size(), r.input_len()));
      } else {
        room.in_bootstrap = false;
        room.poll.advance(pd::KvPoll::kWaitingForInput, now);
        room.input_at = now;
        s_.waiting_.push_back(&r);
      }
      worked = true;
    }
    // Transfers in progress.
    for (auto t = room.transfers.begin(); t != room.transfers.end();) {
      const disagg::TransferStatus st = ctx_.transport->poll(t->id);
      if (st == disagg::TransferStatus::kInProgress) {
        ++t;
        continue;
      }
      const double device = ctx_.transport->device_seconds(t->id);
      ctx_.transport->release(t->id);
      if (t->staged) {
        staging_busy_ = false;
        if (st == disagg::TransferStatus::kDone && !room.ending) {
          pd::Message staged;  // the decode scatters these tokens and credits their space
          staged.type = pd::MsgType::kStaged;
          staged.room = id;
          staged.begin = t->begin;
          staged.end = t->end;
          send(room.peer, staged);
        }
      }
      if (st == disagg::TransferStatus::kDone) {
        const double took = seconds(now - t->posted);
        if (device > 0) {
          stats_.transfer_device_bytes += static_cast<int64_t>(t->bytes);
          stats_.transfer_device_seconds += device;
        }
        ++stats_.transfers;
        stats_.transfer_bytes += static_cast<int64_t>(t->bytes);
        stats_.transfer_seconds += took;
        stats_.transfer_max_seconds = std::max(stats_.transfer_max_seconds, took);
      } else {
        ++stats_.transfer_failures;
        if (!room.ending) fail(id, room, "the KV transfer to the decode server failed");
      }
      t = room.transfers.erase(t);
      worked = true;
    }
    // Timeouts: Bootstrapping, then WaitingForInput and Transferring together.
    if (!room.ending) {
      const auto age = now - room.poll.created();
      if (room.req == nullptr || room.in_bootstrap) {
        if (age > bootstrap_timeout) {
          ++stats_.timeouts;
          fail(id, room,
               fmt::format("{} within {} s (bootstrap timeout)",
                           room.have_meta ? "the request did not reach this prefill server"
                                          : "no decode server asked for this room",
                           ctx_.options.bootstrap_timeout_s));
        }
      } else if (now - room.input_at > transfer_timeout) {
        ++stats_.timeouts;
        fail(id, room,
             fmt::format("the KV hand-off did not finish within {} s (transfer timeout)",
                         ctx_.options.transfer_timeout_s));
      }
    }
    if (!room.ending && room.all_sent && room.transfers.empty() && room.queued_tokens == 0 &&
        room.req != nullptr) {
      succeed(room);
      it = rooms_.erase(it);
      worked = true;
      continue;
    }
    // An ended room tells its decode half once none of its writes can still land.
    if (room.ending && room.transfers.empty()) {
      if (room.have_meta || room.ack) {
        pd::Message m;
        m.type = room.ack ? pd::MsgType::kAbortAck : pd::MsgType::kFailed;
        m.room = id;
        m.reason = room.poll.reason();
        if (!room.peer.empty()) send(room.peer, m);
      }
      it = rooms_.erase(it);
      worked = true;
      continue;
    }
    ++it;
  }
  // Ended rooms are remembered a while, so late metadata for them is refused at once.
  std::erase_if(ended_, [&](const auto& e) { return now - e.second > 2 * bootstrap_timeout; });
  if (!staging_busy_ && !staged_.empty()) {
    const size_t before = staged_.size();
    const int64_t chunks = stats_.staged_chunks;
    pump_staging();
    worked = worked || staged_.size() != before || stats_.staged_chunks != chunks;
  }
  return worked;
}

DisaggStats PrefillDisagg::stats() const {
  DisaggStats s = stats_;
  for (const auto& [id, room] : rooms_) {
    if (room.ending) {
      ++s.draining;
    } else if (room.poll.state() == pd::KvPoll::kBootstrapping) {
      ++s.bootstrapping;
    } else if (room.poll.state() == pd::KvPoll::kWaitingForInput) {
      ++s.waiting_for_input;
    } else if (room.poll.state() == pd::KvPoll::kTransferring) {
      ++s.transferring;
    }
  }
  s.peers = static_cast<int32_t>(peers_.size());
  return s;
}

}  // namespace kvserve::engine

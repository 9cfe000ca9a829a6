// PrefillDisagg: the prefill server's side of a KV hand-off, run by the Scheduler on its thread
// (docs/disaggregation.md).
//
//   bootstrap queue  a request waits here until the decode server's destination pages for its
//                    room arrived (they may arrive first: kept until the request comes)
//   waiting / the forward (the Scheduler's own queue and batches, chunked as usual): after each
//                    intermediate chunk its whole pages are pushed (a partial last page is held
//                    back), after the last one the rest, then
//   inflight queue   the request keeps its KV and row until every write is done, then sends
//                    kDone with the first token and its logprob and finishes (its KV goes into the
//                    prefix cache as for any finished request)
//
// A room that fails (timeout, transport failure, abort either way, decode silent) tells the
// decode side (kFailed / kAbortAck) only once none of its writes is in progress, so the decode
// side may free the pages then. The request's client gets its events only at the end: the
// sampled token on success, the error otherwise.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvserve/disagg/kv_runs.h"
#include "kvserve/disagg/kv_staging.h"
#include "kvserve/engine/disagg_options.h"
#include "kvserve/engine/req.h"
#include "kvserve/pd/kv_poll.h"

namespace kvserve::engine {

class Scheduler;

class PrefillDisagg {
 public:
  PrefillDisagg(Scheduler& scheduler, DisaggContext context);
  ~PrefillDisagg();

  // A disaggregated request arrives (r->disagg set): into the bootstrap queue.
  void add(Req* r);
  // Control messages, transfer polls, timeouts, heartbeats; requests whose pages arrived move to
  // the Scheduler's waiting queue. True when something happened.
  bool poll();
  // After a forward: an intermediate chunk of `r` (its row holds the chunk's KV).
  void after_chunk(Req& r);
  // After the last chunk's forward and the first token's sampling: the rest of the pages go out
  // and `r` waits in the inflight queue.
  void after_prefill(Req& r);
  // Whether `r` is one of this side's hand-offs (its events are held, aborts come here).
  bool owns(const Req& r) const;
  // `r` ends here now (the client gave up: kAbort; its forward failed: kError); the decode side
  // hears once nothing of it is in flight.
  void abort(Req& r, const std::string& why, FinishKind kind = FinishKind::kAbort);
  // Nothing in any queue (held KV or rooms waiting to tell the decode side).
  bool idle() const { return rooms_.empty(); }
  DisaggStats stats() const;

 private:
  struct Transfer {
    disagg::TransferId id;
    Clock::time_point posted;
    uint64_t bytes = 0;
    bool staged = false;  // reads the staging region (which is free again when it ends)
    int32_t begin = 0;    // staged: the prompt's tokens it carries
    int32_t end = 0;
  };
  struct Room {
    Req* req = nullptr;  // null once the request ended (or before it arrived)
    bool in_bootstrap = false;
    std::string peer;  // the decode server's identity
    bool have_meta = false;
    std::vector<int32_t> dst_pages;
    int32_t num_tokens = 0;
    // Staging pairs: the room's extent of the decode's staging region (byte offset, tokens), a
    // ring the prompt passes through: tokens [credited, credited + staging_tokens) may be
    // written, at their position modulo staging_tokens.
    int64_t staging_offset = -1;
    int32_t staging_tokens = 0;
    int32_t credited = 0;
    int32_t queued_tokens = 0;  // pushed, not yet gathered
    pd::KvPollState poll;
    Clock::time_point input_at;       // both the request and its pages are here (WaitingForInput)
    std::vector<Transfer> transfers;  // in progress
    int32_t sent_tokens = 0;          // positions [0, sent_tokens) of the prompt are posted
    bool all_sent = false;
    Clock::time_point sent_at;  // all_sent since
    // The room ended without a result; the decode side is told (kFailed, or kAbortAck when it
    // asked) once no transfer is in progress.
    bool ending = false;
    bool ack = false;
    bool counted = false;
  };
  struct Peer {
    disagg::PeerId transport_peer;
    pd::KvLayout layout;
    Clock::time_point last_heard;
  };

  void on_message(const std::string& from, const pd::Message& m);
  void on_register(const std::string& from, const pd::Message& m);
  void on_meta(const std::string& from, const pd::Message& m);
  void on_abort(const std::string& from, const pd::Message& m);
  // Posts positions [room.sent_tokens, end_token) of its request's row: whole pages when both
  // sides' page sizes are equal (unless `last`, end_token rounded down to a page boundary: a
  // partial page waits), else slot by slot (the decode side's page list times its page size),
  // merged into runs where both sides' slots continue.
  void push_kv(Room& room, Req& r, int32_t end_token, bool last);
  // Staging pairs: when no staged write is in flight, the first queued piece whose room has
  // room in its extent (as many tokens as that, the staging region in the peer's format and the
  // extent's end allow) is gathered and written.
  void pump_staging();
  // Staging pairs: this side's stager for a decode server's layout (one per KV dtype, all in the
  // one staging region); kInvalidArgument when the pool cannot be staged in that format.
  Result<disagg::KvStager*> stager_for(const pd::KvLayout& decode);
  // Ends the room's request (if alive) with an error and starts the room's ending.
  void fail(uint64_t room_id, Room& room, const std::string& why, bool ack = false);
  void succeed(Room& room);
  // Ends `r` now: its final event, its KV released (cached when it succeeded).
  void end_request(Room& room, Req& r, FinishReason finish);
  void send(const std::string& peer, pd::Message m);

  Scheduler& s_;
  DisaggContext ctx_;
  disagg::KvRegionLayout local_region_;
  std::unordered_map<uint64_t, Room> rooms_;
  std::unordered_map<std::string, Peer> peers_;
  // Rooms that ended before their decode half spoke: its metadata is answered with kFailed.
  std::unordered_map<uint64_t, Clock::time_point> ended_;
  // Staging pairs: pieces of prompts (tokens [begin, end) of a room) waiting for the staging
  // region, which holds one piece at a time, in push order.
  struct Piece {
    uint64_t room = 0;
    int32_t begin = 0;
    int32_t end = 0;
  };
  std::deque<Piece> staged_;
  bool staging_busy_ = false;
  std::map<std::string, std::unique_ptr<disagg::KvStager>> stagers_;  // by the decode's KV dtype
  DisaggStats stats_;
};

}  // namespace kvserve::engine

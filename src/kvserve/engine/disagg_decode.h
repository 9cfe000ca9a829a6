// DecodeDisagg: the decode server's side of a KV hand-off, run by the Scheduler on its thread
// (docs/disaggregation.md).
//
//   prealloc queue   a request waits for its prefill server's handshake (layouts checked: a pair
//                    that cannot work fails its requests at once with the reason), then for a
//                    row and KV slots for its prompt under this side's own admission budget (the
//                    running requests' output reservations count); its destination pages go to
//                    the prefill server (kMeta)
//   transfer queue   it waits for kDone (every write visible here, with the first token and its
//                    logprob), then a "prebuilt" extend: no forward, the prompt's KV is already
//                    in its slots; the first token is accepted as if sampled here and the request
//                    joins the running decode batch
//
// KV is freed only when no write can still land in it: after kDone, kFailed or kAbortAck from
// the prefill server, or once that server is declared dead (heartbeats); an aborted or timed-out
// request ends for its client at once and its pages drain until then.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "kvserve/disagg/kv_staging.h"
#include "kvserve/disagg/staging_extents.h"
#include "kvserve/engine/disagg_options.h"
#include "kvserve/engine/req.h"
#include "kvserve/pd/kv_poll.h"

namespace kvserve::engine {

class Scheduler;

class DecodeDisagg {
 public:
  DecodeDisagg(Scheduler& scheduler, DisaggContext context);
  ~DecodeDisagg();

  void add(Req* r);
  bool poll();
  bool owns(const Req& r) const;
  void abort(Req& r, const std::string& why);
  bool idle() const { return rooms_.empty(); }
  DisaggStats stats() const;
  // Rows and output reservations of the pre-allocated requests, for the prefill budget.
  double reserved_tokens(double new_token_ratio) const;

 private:
  struct Room {
    // Stays in the Scheduler's table while its pages drain (its client has had its final event).
    Req* req = nullptr;
    std::string peer;  // host:port
    pd::KvPollState poll;
    bool allocated = false;
    Clock::time_point meta_at;
    bool draining = false;  // ended; the pages wait for the prefill's word (or its death)
    Clock::time_point drain_since;
    // Staging pairs: its extent of the staging region (tokens [staging_begin, + staging_len)),
    // a ring the prompt passes through in rounds, and the prompt's tokens scattered so far.
    int64_t staging_begin = -1;
    int32_t staging_len = 0;
    int32_t scattered = 0;
  };
  struct Peer {
    std::string host;
    int32_t port = 0;
    std::unique_ptr<pd::ControlClient> client;
    bool registered = false;
    std::string refused;  // the handshake's refusal (this peer entry is then dropped)
    Clock::time_point created;
    Clock::time_point last_heard;
    Clock::time_point register_sent;
    Clock::time_point ping_sent;
    uint64_t seq = 0;
  };

  Peer* peer_for(const std::string& key, const DisaggTarget& t);
  void send_register(Peer& p);
  void on_message(const std::string& peer, const pd::Message& m);
  bool try_preallocate(uint64_t id, Room& room);
  void prebuilt(uint64_t id, Room& room, const pd::Message& done);
  // The request ends for its client (error or abort); its pages drain when a write may be in
  // flight, or are freed now.
  void end(uint64_t id, Room& room, FinishReason finish, bool tell_prefill);
  // No write can land any more: the pages (and the staging extent) go back (not cached).
  void free_pages(Room& room);
  // Staging pairs: the prompt's tokens [begin, end), staged at begin modulo the extent's length,
  // into the request's slots (waited for: a later forward reads them), then kCredit frees their
  // space for the prefill. Pieces come in order and never wrap around the extent.
  Status scatter_piece(uint64_t id, Room& room, int32_t begin, int32_t end);
  void peer_dead(const std::string& key, const std::string& why);

  Scheduler& s_;
  DisaggContext ctx_;
  std::unordered_map<uint64_t, Room> rooms_;
  std::deque<uint64_t> prealloc_;  // arrival order
  std::map<std::string, Peer> peers_;
  // Staging (ctx_.layout.staging_bytes nonzero): the region's extents and the stager that
  // scatters them into the pool, in this pool's own format.
  std::unique_ptr<disagg::StagingExtents> extents_;
  std::unique_ptr<disagg::KvStager> stager_;
  int32_t max_extent_ = 0;  // a room's extent: its prompt or a quarter of the buffer, if shorter
  DisaggStats stats_;
};

}  // namespace kvserve::engine

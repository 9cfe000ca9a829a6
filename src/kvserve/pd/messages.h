// The control plane's messages between a decode server and a prefill server (one JSON object per
// ZeroMQ message; docs/disaggregation.md has the protocol):
//
//   decode -> prefill   kRegister   its id, KV layout and transport region descriptor (once per
//                                   peer and again after the peer was lost)
//                       kMeta       a request's room and the destination pages it pre-allocated
//                                   (and, between staging pairs, where in its staging region)
//                       kAbort      give up a room; the prefill answers kAbortAck once none of
//                                   its writes to that room can still land
//                       kPing       heartbeat
//                       kCredit     staging pairs: the room's tokens [0, end) are scattered out of
//                                   its staging extent, whose space the prefill may write again
//   prefill -> decode   kRegistered the handshake's answer: accepted, or refused with a reason
//                       kStaged     staging pairs: tokens [begin, end) of the room's prompt are in
//                                   its staging extent (at begin modulo the extent's length)
//                       kDone       every write of the room is visible at the decode side; carries
//                                   the first sampled token and its logprob (the auxiliary data)
//                       kFailed     the room failed at the prefill; no write of it is in flight
//                       kAbortAck   answer to kAbort (same guarantee as kFailed)
//                       kPong       heartbeat answer
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvserve/core/status.h"
#include "kvserve/pd/layout.h"

namespace kvserve::pd {

enum class MsgType : int8_t {
  kRegister,
  kRegistered,
  kMeta,
  kDone,
  kFailed,
  kAbort,
  kAbortAck,
  kPing,
  kPong,
  kStaged,
  kCredit,
};

std::string_view msg_type_name(MsgType t);

// The transport's descriptor of a registered memory region (disagg/kv_transport.h's
// RegionDescriptor), carried opaquely.
struct RegionInfo {
  std::string backend;
  std::string blob;  // binary
  uint64_t bytes = 0;
};

struct Message {
  MsgType type = MsgType::kPing;
  uint64_t room = 0;
  std::string sender;          // kRegister: the decode server's id
  std::string reason;          // kRegistered (refused), kFailed, kAbort
  bool ok = false;             // kRegistered
  KvLayout layout;             // kRegister, kRegistered
  RegionInfo region;           // kRegister
  std::vector<int32_t> pages;  // kMeta: destination page ids, in row order
  int32_t num_tokens = 0;      // kMeta: the prompt's length the pages hold
  // kMeta, between staging pairs (KvLayout::staging_bytes): the byte offset in the decode side's
  // staging region of the room's extent, token-major (ops/kv_staging_params.h); -1: none.
  int64_t staging_offset = -1;
  int32_t staging_tokens = 0;  // kMeta (staging pairs): the extent's length in tokens
  int32_t begin = 0;           // kStaged
  int32_t end = 0;             // kStaged, kCredit
  int32_t token = -1;          // kDone
  float logprob = 0;           // kDone
  uint64_t seq = 0;            // kPing / kPong
};

std::string encode(const Message& m);
// A layout as the messages carry it (one JSON object; the servers' /disaggregation/bootstrap shows
// the same, which the router checks pairs with); the parse is strict (kInvalidArgument).
std::string layout_to_json(const KvLayout& layout);
Result<KvLayout> layout_from_json(std::string_view json);
// kInvalidArgument naming what is wrong with a malformed message.
Result<Message> decode(std::string_view bytes);

}  // namespace kvserve::pd

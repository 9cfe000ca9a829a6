#include "kvserve/pd/messages.h"

#include <array>

#include <nlohmann/json.hpp>

namespace kvserve::pd {
namespace {

constexpr std::array<std::string_view, 11> kNames = {"register", "registered", "meta",      "done",
                                                     "failed",   "abort",      "abort_ack", "ping",
                                                     "pong",     "staged",     "credit"};

std::string to_hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

Result<std::string> from_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0) return invalid_argument("region blob: odd hex length {}", hex.size());
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = nibble(hex[2 * i]);
    const int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return invalid_argument("region blob: not hex at {}", 2 * i);
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return out;
}

nlohmann::json layout_json(const KvLayout& l) {
  return {{"page_size", l.page_size},
          {"kv_dtype", l.kv_dtype},
          {"num_layers", l.num_layers},
          {"num_kv_heads", l.num_kv_heads},
          {"head_dim", l.head_dim},
          {"tp_size", l.tp_size},
          {"buffer_offsets", l.buffer_offsets},
          {"page_bytes", l.page_bytes},
          {"buffer_bytes", l.buffer_bytes},
          {"staging_bytes", l.staging_bytes},
          {"model", l.model}};
}

KvLayout layout_from(const nlohmann::json& j) {
  KvLayout l;
  l.page_size = j.at("page_size").get<int32_t>();
  l.kv_dtype = j.at("kv_dtype").get<std::string>();
  l.num_layers = j.at("num_layers").get<int32_t>();
  l.num_kv_heads = j.at("num_kv_heads").get<int32_t>();
  l.head_dim = j.at("head_dim").get<int32_t>();
  l.tp_size = j.at("tp_size").get<int32_t>();
  l.buffer_offsets = j.at("buffer_offsets").get<std::vector<uint64_t>>();
  l.page_bytes = j.at("page_bytes").get<uint64_t>();
  l.buffer_bytes = j.at("buffer_bytes").get<uint64_t>();
  l.staging_bytes = j.at("staging_bytes").get<uint64_t>();
  l.model = j.at("model").get<std::string>();
  return l;
}

}  // namespace

std::string layout_to_json(const KvLayout& layout) {
  return layout_json(layout).dump();
}

Result<KvLayout> layout_from_json(std::string_view json) {
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("KV layout: not a JSON object");
  try {
    return layout_from(j);
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("KV layout: {}", e.what());
  }
}

std::string_view msg_type_name(MsgType t) {
  return kNames.at(static_cast<size_t>(t));
}

std::string encode(const Message& m) {
  nlohmann::json j = {{"type", msg_type_name(m.type)}, {"room", m.room}};
  switch (m.type) {
    case MsgType::kRegister:
      j["sender"] = m.sender;
      j["layout"] = layout_json(m.layout);
      j["region"] = {{"backend", m.region.backend},
                     {"blob", to_hex(m.region.blob)},
                     {"bytes", m.region.bytes}};
      break;
    case MsgType::kRegistered:
      j["ok"] = m.ok;
      j["reason"] = m.reason;
      j["layout"] = layout_json(m.layout);
      break;
    case MsgType::kMeta:
      j["pages"] = m.pages;
      j["num_tokens"] = m.num_tokens;
      j["staging_offset"] = m.staging_offset;
      j["staging_tokens"] = m.staging_tokens;
      break;
    case MsgType::kStaged:
      j["begin"] = m.begin;
      j["end"] = m.end;
      break;
    case MsgType::kCredit:
      j["end"] = m.end;
      break;
    case MsgType::kDone:
      j["token"] = m.token;
      j["logprob"] = m.logprob;
      break;
    case MsgType::kFailed:
    case MsgType::kAbort:
      j["reason"] = m.reason;
      break;
    case MsgType::kAbortAck:
      break;
    case MsgType::kPing:
    case MsgType::kPong:
      j["seq"] = m.seq;
      j["ok"] = m.ok;
      break;
  }
  return j.dump();
}

Result<Message> decode(std::string_view bytes) {
  const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return invalid_argument("control message: not JSON");
  try {
    Message m;
    const auto type = j.at("type").get<std::string>();
    const auto it = std::find(kNames.begin(), kNames.end(), type);
    if (it == kNames.end()) return invalid_argument("control message: unknown type '{}'", type);
    m.type = static_cast<MsgType>(it - kNames.begin());
    m.room = j.at("room").get<uint64_t>();
    switch (m.type) {
      case MsgType::kRegister: {
        m.sender = j.at("sender").get<std::string>();
        m.layout = layout_from(j.at("layout"));
        const auto& r = j.at("region");
        m.region.backend = r.at("backend").get<std::string>();
        KV_ASSIGN_OR_RETURN(m.region.blob, from_hex(r.at("blob").get<std::string>()));
        m.region.bytes = r.at("bytes").get<uint64_t>();
        break;
      }
      case MsgType::kRegistered:
        m.ok = j.at("ok").get<bool>();
        m.reason = j.at("reason").get<std::string>();
        m.layout = layout_from(j.at("layout"));
        break;
      case MsgType::kMeta:
        m.pages = j.at("pages").get<std::vector<int32_t>>();
        m.num_tokens = j.at("num_tokens").get<int32_t>();
        m.staging_offset = j.at("staging_offset").get<int64_t>();
        m.staging_tokens = j.at("staging_tokens").get<int32_t>();
        break;
      case MsgType::kStaged:
        m.begin = j.at("begin").get<int32_t>();
        m.end = j.at("end").get<int32_t>();
        break;
      case MsgType::kCredit:
        m.end = j.at("end").get<int32_t>();
        break;
      case MsgType::kDone:
        m.token = j.at("token").get<int32_t>();
        m.logprob = j.at("logprob").get<float>();
        break;
      case MsgType::kFailed:
      case MsgType::kAbort:
        m.reason = j.at("reason").get<std::string>();
        break;
      case MsgType::kAbortAck:
        break;
      case MsgType::kPing:
      case MsgType::kPong:
        m.seq = j.at("seq").get<uint64_t>();
        m.ok = j.at("ok").get<bool>();
        break;
    }
    return m;
  } catch (const nlohmann::json::exception& e) {
    return invalid_argument("control message: {}", e.what());
  }
}

}  // namespace kvserve::pd

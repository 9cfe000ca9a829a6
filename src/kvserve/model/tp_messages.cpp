#include "kvserve/model/tp_messages.h"

#include <cstring>
#include <type_traits>

#include "kvserve/model/model_runner.h"

namespace kvserve::model {

namespace {

class Writer {
 public:
  explicit Writer(std::vector<uint8_t>& out) : out_(out) {}
  template <typename T>
  void pod(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void ints(const std::vector<int32_t>& v) {
    pod(static_cast<uint64_t>(v.size()));
    const auto* p = reinterpret_cast<const uint8_t*>(v.data());
    out_.insert(out_.end(), p, p + v.size() * sizeof(int32_t));
  }
  void str(const std::string& s) {
    pod(static_cast<uint64_t>(s.size()));
    out_.insert(out_.end(), s.begin(), s.end());
  }

 private:
  std::vector<uint8_t>& out_;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  template <typename T>
  bool pod(T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(&v, in_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool ints(std::vector<int32_t>& v) {
    uint64_t n = 0;
    if (!pod(n) || n > (in_.size() - pos_) / sizeof(int32_t)) return false;
    v.resize(n);
    std::memcpy(v.data(), in_.data() + pos_, n * sizeof(int32_t));
    pos_ += n * sizeof(int32_t);
    return true;
  }
  bool str(std::string& s) {
    uint64_t n = 0;
    if (!pod(n) || n > in_.size() - pos_) return false;
    s.assign(reinterpret_cast<const char*>(in_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == in_.size(); }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

// Optional values as a flag and the value.
template <typename T>
void put_optional(Writer& w, const std::optional<T>& v) {
  w.pod(static_cast<uint8_t>(v.has_value()));
  w.pod(v.value_or(T{}));
}

template <typename T>
bool get_optional(Reader& r, std::optional<T>& v) {
  uint8_t has = 0;
  T value{};
  if (!r.pod(has) || !r.pod(value)) return false;
  v = has != 0 ? std::optional<T>(value) : std::nullopt;
  return true;
}

}  // namespace

std::vector<uint8_t> encode_setup(const TpSetup& setup, const ModelRunnerOptions& o) {
  std::vector<uint8_t> out;
  Writer w(out);
  w.str(setup.model_dir.string());
  w.pod(static_cast<uint8_t>(setup.nccl));
  w.pod(setup.nccl_id);
  w.pod(o.device);
  w.pod(o.page_size);
  put_optional(w, o.attention_backend);
  put_optional(w, o.kv_cache_dtype);
  w.pod(o.max_total_tokens);
  w.pod(o.mem_fraction_static);
  w.pod(o.max_running_requests);
  w.pod(o.context_length);
  w.pod(o.cuda_graph_max_bs);
  w.pod(static_cast<uint8_t>(o.disable_cuda_graph));
  w.pod(o.device_pool);
  w.pod(o.kernel_switches);
  w.pod(o.tp_size);
  return out;
}

Status decode_setup(std::span<const uint8_t> bytes, TpSetup& setup, ModelRunnerOptions& o) {
  Reader r(bytes);
  std::string dir;
  uint8_t nccl = 0;
  uint8_t disable_graph = 0;
  const bool ok = r.str(dir) && r.pod(nccl) && r.pod(setup.nccl_id) && r.pod(o.device) &&
                  r.pod(o.page_size) && get_optional(r, o.attention_backend) &&
                  get_optional(r, o.kv_cache_dtype) && r.pod(o.max_total_tokens) &&
                  r.pod(o.mem_fraction_static) && r.pod(o.max_running_requests) &&
                  r.pod(o.context_length) && r.pod(o.cuda_graph_max_bs) && r.pod(disable_graph) &&
                  r.pod(o.device_pool) && r.pod(o.kernel_switches) && r.pod(o.tp_size) && r.done();
  if (!ok) return invalid_argument("a tensor-parallel setup message of {} bytes", bytes.size());
  setup.model_dir = dir;
  setup.nccl = nccl != 0;
  o.disable_cuda_graph = disable_graph != 0;
  return Status::ok();
}

void encode_forward(const mem::ForwardBatch& b, std::vector<uint8_t>& out) {
  KV_CHECK(b.self_kv_start.empty() && b.encoder_lens.empty() && b.encoder_out_cache_loc.empty(),
           "an encoder-decoder batch under tensor parallelism");
  out.clear();
  Writer w(out);
  w.pod(static_cast<uint8_t>(b.mode));
  for (const std::vector<int32_t>* v :
       {&b.req_pool_indices, &b.seq_lens, &b.prefix_lens, &b.extend_lens, &b.extend_start_loc,
        &b.input_ids, &b.positions, &b.out_cache_loc, &b.logits_indices, &b.row_rewrites.start,
        &b.row_rewrites.indptr, &b.row_rewrites.slots}) {
    w.ints(*v);
  }
}

Status decode_forward(std::span<const uint8_t> bytes, mem::ForwardBatch& b) {
  Reader r(bytes);
  uint8_t mode = 0;
  bool ok = r.pod(mode) && mode <= static_cast<uint8_t>(mem::ForwardMode::kDecode);
  for (std::vector<int32_t>* v :
       {&b.req_pool_indices, &b.seq_lens, &b.prefix_lens, &b.extend_lens, &b.extend_start_loc,
        &b.input_ids, &b.positions, &b.out_cache_loc, &b.logits_indices, &b.row_rewrites.start,
        &b.row_rewrites.indptr, &b.row_rewrites.slots}) {
    ok = ok && r.ints(*v);
  }
  if (!ok || !r.done()) {
    return invalid_argument("a tensor-parallel forward message of {} bytes", bytes.size());
  }
  b.mode = static_cast<mem::ForwardMode>(mode);
  return Status::ok();
}

Status send_message(dist::Communicator& control, TpMessageKind kind,
                    std::span<const uint8_t> payload) {
  KV_CHECK_EQ(control.rank(), 0, "only rank 0 sends commands");
  uint64_t header[2] = {static_cast<uint64_t>(kind), payload.size()};
  KV_RETURN_IF_ERROR(control.broadcast(header, sizeof(header), 0, {}));
  if (payload.empty()) return Status::ok();
  return control.broadcast(const_cast<uint8_t*>(payload.data()),
                           static_cast<int64_t>(payload.size()), 0, {});
}

Status receive_message(dist::Communicator& control, TpMessageKind& kind,
                       std::vector<uint8_t>& payload) {
  uint64_t header[2] = {0, 0};
  KV_RETURN_IF_ERROR(control.broadcast(header, sizeof(header), 0, {}));
  kind = static_cast<TpMessageKind>(header[0]);
  payload.resize(header[1]);
  if (payload.empty()) return Status::ok();
  return control.broadcast(payload.data(), static_cast<int64_t>(payload.size()), 0, {});
}

}  // namespace kvserve::model

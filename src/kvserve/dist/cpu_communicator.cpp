#include "kvserve/dist/cpu_communicator.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "kvserve/core/check.h"

namespace kvserve::dist {

namespace {

constexpr uint32_t kMagic = 0x6b767470;  // "kvtp"
constexpr size_t kHeaderBytes = 4096;
constexpr auto kWakeInterval = std::chrono::milliseconds(20);
constexpr int kSpins = 64;

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);

// futex(2) on a 32-bit atomic in shared memory (not FUTEX_PRIVATE: other processes wait on it).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::milliseconds timeout) {
  timespec ts{.tv_sec = static_cast<time_t>(timeout.count() / 1000),
              .tv_nsec = static_cast<long>((timeout.count() % 1000) * 1000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Whether `pid` is a live process: it exists and is not a zombie (a dead child its parent has
// not reaped yet still answers kill(pid, 0)).
bool process_alive(int32_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!stat || !std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

std::string errno_text() {
  return std::strerror(errno);
}

}  // namespace

struct CpuCommunicator::Header {
  std::atomic<uint32_t> magic;  // kMagic once rank 0 has filled in the fields below
  int32_t size;
  int64_t chunk_bytes;
  std::atomic<uint32_t> attached;  // ranks attached, rank 0 included
  // 0: healthy; 1: a rank is writing why the group failed; 2: failed, `reason` written.
  std::atomic<uint32_t> failed;
  char reason[512];
  alignas(64) std::atomic<uint32_t> arrived;
  alignas(64) std::atomic<uint32_t> generation;
  alignas(64) std::atomic<int32_t> pids[kMaxRanks];
};

std::string unique_shm_name() {
  std::random_device rd;
  const uint64_t r = (uint64_t{rd()} << 32) | rd();
  return fmt::format("/kvserve-{}-{:016x}", getpid(), r);
}

Result<std::unique_ptr<CpuCommunicator>> CpuCommunicator::create(const CpuCommunicatorOptions& o) {
  if (o.size < 1 || o.size > kMaxRanks) {
    return invalid_argument("a cpu communicator of {} ranks (1..{})", o.size, kMaxRanks);
  }
  if (o.rank < 0 || o.rank >= o.size) {
    return invalid_argument("rank {} of a group of {}", o.rank, o.size);
  }
  if (o.chunk_bytes < 64 || o.chunk_bytes % 64 != 0) {
    return invalid_argument("chunk_bytes {}: a positive multiple of 64", o.chunk_bytes);
  }
  if (o.name.empty() || o.name[0] != '/' || o.name.find('/', 1) != std::string::npos) {
    return invalid_argument("shared-memory name '{}': one '/' then a name", o.name);
  }
  std::unique_ptr<CpuCommunicator> c(new CpuCommunicator());
  c->rank_ = o.rank;
  c->size_ = o.size;
  c->chunk_bytes_ = o.chunk_bytes;
  c->name_ = o.name;
  c->op_timeout_ = o.op_timeout;
  KV_RETURN_IF_ERROR(c->attach(o));
  return c;
}

Status CpuCommunicator::attach(const CpuCommunicatorOptions& o) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  const size_t total = kHeaderBytes + static_cast<size_t>(size_) * chunk_bytes_;
  const auto deadline = std::chrono::steady_clock::now() + o.attach_timeout;
  int fd = -1;
  if (rank_ == 0) {
    fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return unavailable("shm_open({}): {}", name_, errno_text());
    if (ftruncate(fd, static_cast<off_t>(total)) != 0) {
      const std::string err = errno_text();
      close(fd);
      shm_unlink(name_.c_str());
      return unavailable("ftruncate of shared memory {} to {} bytes: {}", name_, total, err);
    }
  } else {
    while ((fd = shm_open(name_.c_str(), O_RDWR, 0600)) < 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        return unavailable("rank {}: shared memory {} did not appear within {} ms", rank_, name_,
                           o.attach_timeout.count());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    struct stat st {};
    while (fstat(fd, &st) == 0 && static_cast<size_t>(st.st_size) < total) {
      if (std::chrono::steady_clock::now() > deadline) {
        close(fd);
        return unavailable("rank {}: shared memory {} has {} bytes, expected {}", rank_, name_,
                           st.st_size, total);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  void* map = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) {
    if (rank_ == 0) shm_unlink(name_.c_str());
    return unavailable("mmap of shared memory {} ({} bytes): {}", name_, total, errno_text());
  }
  map_ = map;
  map_bytes_ = total;
  data_ = static_cast<uint8_t*>(map) + kHeaderBytes;
  if (rank_ == 0) {
    header_ = new (map) Header();  // the fresh segment is zero-filled
    header_->size = size_;
    header_->chunk_bytes = chunk_bytes_;
    header_->pids[0].store(getpid());
    header_->attached.store(1);
    header_->magic.store(kMagic, std::memory_order_release);
  } else {
    header_ = static_cast<Header*>(map);
    while (header_->magic.load(std::memory_order_acquire) != kMagic) {
      if (std::chrono::steady_clock::now() > deadline) {
        return unavailable("rank {}: shared memory {} was not initialised", rank_, name_);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (header_->size != size_ || header_->chunk_bytes != chunk_bytes_) {
      return invalid_argument(
          "rank {}: shared memory {} is a group of {} ranks with {}-byte "
          "chunks, expected {} and {}",
          rank_, name_, header_->size, header_->chunk_bytes, size_, chunk_bytes_);
    }
    if (header_->pids[rank_].exchange(getpid()) != 0) {
      return invalid_argument("rank {} of shared memory {} is already attached", rank_, name_);
    }
    header_->attached.fetch_add(1);
  }
  if (rank_ == 0) {
    while (header_->attached.load() < static_cast<uint32_t>(size_)) {
      if (o.attach_check) {
        Status s = o.attach_check();
        if (!s.is_ok()) {
          abort(s.message());
          return s;
        }
      }
      if (std::chrono::steady_clock::now() > deadline) {
        const std::string why =
            fmt::format("{} of {} ranks attached to {} within {} ms", header_->attached.load(),
                        size_, name_, o.attach_timeout.count());
        abort(why);
        return unavailable("{}", why);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    shm_unlink(name_.c_str());  // every rank has it mapped: the name is no longer needed
    unlinked_ = true;
  }
  return barrier();
}

CpuCommunicator::~CpuCommunicator() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
  if (rank_ == 0 && !unlinked_ && !name_.empty()) shm_unlink(name_.c_str());
}

uint8_t* CpuCommunicator::slot(int32_t r) const {
  return data_ + static_cast<size_t>(r) * chunk_bytes_;
}

void CpuCommunicator::abort(std::string_view reason) {
  if (header_ == nullptr) return;
  uint32_t expected = 0;
  if (header_->failed.compare_exchange_strong(expected, 1)) {
    const std::string text = fmt::format("rank {}: {}", rank_, reason);
    const size_t n = std::min(text.size(), sizeof(header_->reason) - 1);
    std::memcpy(header_->reason, text.data(), n);
    header_->reason[n] = '\0';
    header_->failed.store(2, std::memory_order_release);
  }
  futex_wake_all(&header_->generation);
}

Status CpuCommunicator::failed_status() const {
  // A rank that is writing the reason finishes within a few instructions.
  for (int i = 0; i < 100000 && header_->failed.load(std::memory_order_acquire) == 1; ++i)
    std::this_thread::yield();
  if (header_->failed.load(std::memory_order_acquire) == 2) {
    return unavailable("tensor-parallel group failed: {}", header_->reason);
  }
  return unavailable("tensor-parallel group failed");
}

Status CpuCommunicator::check_peers() const {
  for (int32_t r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    const int32_t pid = header_->pids[r].load();
    if (pid > 0 && !process_alive(pid)) {
      return unavailable("tensor-parallel rank {} (pid {}) exited", r, pid);
    }
  }
  return Status::ok();
}

Status CpuCommunicator::barrier() {
  if (header_->failed.load(std::memory_order_acquire) != 0) return failed_status();
  if (size_ == 1) return Status::ok();
  const uint32_t gen = header_->generation.load(std::memory_order_acquire);
  if (header_->arrived.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<uint32_t>(size_)) {
    // The last to arrive opens the next round: nobody arrives at it before seeing the new
    // generation, so the reset cannot race with an arrival.
    header_->arrived.store(0, std::memory_order_relaxed);
    header_->generation.fetch_add(1, std::memory_order_acq_rel);
    futex_wake_all(&header_->generation);
    return Status::ok();
  }
  const auto start = std::chrono::steady_clock::now();
  for (int spin = 0;; ++spin) {
    if (header_->generation.load(std::memory_order_acquire) != gen) return Status::ok();
    if (header_->failed.load(std::memory_order_acquire) != 0) return failed_status();
    if (spin < kSpins) {
      std::this_thread::yield();
      continue;
    }
    futex_wait(&header_->generation, gen, kWakeInterval);
    if (header_->generation.load(std::memory_order_acquire) != gen) return Status::ok();
    Status peers = check_peers();
    if (!peers.is_ok()) {
      abort(peers.message());
      return failed_status();
    }
    if (op_timeout_.count() > 0 && std::chrono::steady_clock::now() - start > op_timeout_) {
      abort(fmt::format("a collective waited more than {} ms", op_timeout_.count()));
      return failed_status();
    }
  }
}

Status CpuCommunicator::all_reduce_sum(void* data, int64_t count, DType dtype,
                                       platform::StreamHandle) {
  KV_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "all_reduce_sum of {}",
           dtype_name(dtype));
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  const int64_t per_chunk = chunk_bytes_ / elem;
  auto* bytes = static_cast<uint8_t*>(data);
  std::vector<float> acc;
  for (int64_t off = 0; off < count; off += per_chunk) {
    const int64_t n = std::min(per_chunk, count - off);
    uint8_t* mine = bytes + off * elem;
    std::memcpy(slot(rank_), mine, n * elem);
    KV_RETURN_IF_ERROR(barrier());
    // Every rank adds the slots in the same order: the same bits everywhere.
    if (dtype == DType::kF32) {
      auto* out = reinterpret_cast<float*>(mine);
      std::memcpy(out, slot(0), n * elem);
      for (int32_t r = 1; r < size_; ++r) {
        const auto* in = reinterpret_cast<const float*>(slot(r));
        for (int64_t i = 0; i < n; ++i)
          out[i] += in[i];
      }
    } else {
      acc.assign(static_cast<size_t>(n), 0.0f);
      for (int32_t r = 0; r < size_; ++r) {
        const auto* in = reinterpret_cast<const uint16_t*>(slot(r));
        for (int64_t i = 0; i < n; ++i)
          acc[i] += bf16_to_float(in[i]);
      }
      auto* out = reinterpret_cast<uint16_t*>(mine);
      for (int64_t i = 0; i < n; ++i)
        out[i] = float_to_bf16(acc[i]);
    }
    KV_RETURN_IF_ERROR(barrier());
  }
  return Status::ok();
}

Status CpuCommunicator::all_gather(const void* send, void* recv, int64_t bytes_per_rank,
                                   platform::StreamHandle) {
  const auto* src = static_cast<const uint8_t*>(send);
  auto* dst = static_cast<uint8_t*>(recv);
  for (int64_t off = 0; off < bytes_per_rank; off += chunk_bytes_) {
    const int64_t n = std::min(chunk_bytes_, bytes_per_rank - off);
    std::memcpy(slot(rank_), src + off, n);
    KV_RETURN_IF_ERROR(barrier());
    for (int32_t r = 0; r < size_; ++r)
      std::memcpy(dst + r * bytes_per_rank + off, slot(r), n);
    KV_RETURN_IF_ERROR(barrier());
  }
  return Status::ok();
}

Status CpuCommunicator::broadcast(void* data, int64_t bytes, int32_t root, platform::StreamHandle) {
  KV_CHECK(root >= 0 && root < size_, "broadcast from rank {} of {}", root, size_);
  auto* p = static_cast<uint8_t*>(data);
  for (int64_t off = 0; off < bytes; off += chunk_bytes_) {
    const int64_t n = std::min(chunk_bytes_, bytes - off);
    if (rank_ == root) std::memcpy(slot(root), p + off, n);
    KV_RETURN_IF_ERROR(barrier());
    if (rank_ != root) std::memcpy(p + off, slot(root), n);
    KV_RETURN_IF_ERROR(barrier());
  }
  return Status::ok();
}

}  // namespace kvserve::dist

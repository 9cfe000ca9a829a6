// KV transfer rate per backend and page size (issue 18): one chunk of a Llama-3-8B-shaped pool
// (32 layers, 8 KV heads, head_dim 128, bf16: 128 KiB a token) on fragmented pages, merged into
// runs, posted and polled to Done; GB/s counts each byte once. Backends:
//   loopback            in-process memcpy (the host copy rate, a ceiling for host backends)
//   ucx_tcp             UCX over tcp between two transports of this process
//   ucx_shm             UCX over posix shared memory, peer failure detection off
//   cuda_ipc            the copy_runs kernel on a CUDA device (skipped without one); the same
//                       kernel as between two processes, which tests/gpu/kv_transfer_gpu_test times
//   staging_cuda        gather into device staging + one device write + scatter, 16 -> 64 pages
// Run: build/bench/kv_transfer_bench [--benchmark_filter=...]; results go to docs/perf/.
#include <benchmark/benchmark.h>

#include <chrono>
#include <random>

#include "kvserve/disagg/kv_runs.h"
#include "kvserve/disagg/kv_staging.h"
#include "kvserve/disagg/kv_transport.h"

namespace kvserve::disagg {
namespace {

constexpr int64_t kChunkTokens = 1024;
constexpr int64_t kPoolTokens = 2048;

mem::KvPoolConfig pool_config(int32_t page_size) {
  return mem::KvPoolConfig{.num_layers = 32,
                           .num_kv_heads = 8,
                           .head_dim = 128,
                           .size = kPoolTokens,
                           .page_size = page_size,
                           .dtype = DType::kBF16};
}

// `n` distinct pages of [1, pages], shuffled in blocks of 1-5 (fragmented, some runs).
std::vector<int32_t> fragmented(int64_t pages, size_t n, std::mt19937_64& rng) {
  std::vector<std::vector<int32_t>> blocks;
  for (int32_t p = 1; p <= pages;) {
    const int32_t len =
        std::min<int32_t>(1 + static_cast<int32_t>(rng() % 5), static_cast<int32_t>(pages) - p + 1);
    std::vector<int32_t> b;
    for (int32_t k = 0; k < len; ++k)
      b.push_back(p + k);
    blocks.push_back(b);
    p += len;
  }
  std::shuffle(blocks.begin(), blocks.end(), rng);
  std::vector<int32_t> out;
  for (const auto& b : blocks)
    out.insert(out.end(), b.begin(), b.end());
  out.resize(n);
  return out;
}

struct Region {
  void* base;
  uint64_t bytes;
};
Region region_of(const mem::MHATokenToKVPool& pool) {
  const auto infos = pool.get_contiguous_buf_infos();
  uint64_t bytes = 0;
  for (const auto& b : infos)
    bytes += b.bytes;
  return {infos.front().ptr, bytes};
}

void run_transfer(benchmark::State& state, TransportOptions options, Device device) {
  const auto page_size = static_cast<int32_t>(state.range(0));
  std::unique_ptr<platform::Platform> platform;
  auto made = platform::create_platform(device);
  if (!made.is_ok()) {
    state.SkipWithError(made.status().to_string().c_str());
    return;
  }
  platform = std::move(made).value();
  options.platform = platform.get();
  auto src = mem::MHATokenToKVPool::create(*platform, pool_config(page_size));
  auto dst = mem::MHATokenToKVPool::create(*platform, pool_config(page_size));
  if (!src.is_ok() || !dst.is_ok()) {
    state.SkipWithError("cannot allocate the pools");
    return;
  }
  auto sender = create_kv_transport(options);
  auto receiver = create_kv_transport(options);
  if (!sender.is_ok() || !receiver.is_ok()) {
    state.SkipWithError(sender.status().to_string().c_str());
    return;
  }
  const Region sr = region_of(**src);
  const Region dr = region_of(**dst);
  const Device where = platform->device();
  if (!(*sender)->register_region(sr.base, sr.bytes, where).is_ok()) {
    state.SkipWithError("register");
    return;
  }
  auto remote = (*receiver)->register_region(dr.base, dr.bytes, where);
  auto peer = remote.is_ok() ? (*sender)->connect(*remote) : Result<PeerId>(remote.status());
  if (!peer.is_ok()) {
    state.SkipWithError(peer.status().to_string().c_str());
    return;
  }
  std::mt19937_64 rng(42);
  const int64_t pages = kPoolTokens / page_size;
  const size_t n = static_cast<size_t>(kChunkTokens / page_size);
  const auto ops = merge_runs(fragmented(pages, n, rng), fragmented(pages, n, rng),
                              kv_region_layout(**src, sr.base), kv_region_layout(**dst, dr.base))
                       .value();
  uint64_t bytes = 0;
  for (const WriteOp& op : ops)
    bytes += op.length;
  double device_seconds = 0;  // the backend's own timing of its writes, where it has one
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const TransferId id = (*sender)->post(*peer, ops).value();
    TransferStatus s = (*sender)->poll(id);
    while (s == TransferStatus::kInProgress)
      s = (*sender)->poll(id);
    if (s != TransferStatus::kDone) {
      state.SkipWithError("transfer failed");
      return;
    }
    device_seconds += (*sender)->device_seconds(id);
    (*sender)->release(id);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["writes"] = static_cast<double>(ops.size());
  state.counters["MiB"] = static_cast<double>(bytes) / 1048576.0;
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
  if (device_seconds > 0) {
    state.counters["device GB/s"] = static_cast<double>(bytes) * 1e-9 *
                                    static_cast<double>(state.iterations()) / device_seconds;
  }
}

// The reference for the transfers' GB/s: one device-to-device copy of a chunk's bytes (128 MiB)
// on the same platform, host-timed like them.
void BM_CudaDeviceCopy(benchmark::State& state) {
  auto made = platform::create_platform(Device{DeviceKind::kCuda, 0});
  if (!made.is_ok()) {
    state.SkipWithError(made.status().to_string().c_str());
    return;
  }
  auto p = std::move(made).value();
  const size_t bytes = static_cast<size_t>(kChunkTokens) * 128 * 1024;
  auto a = p->allocate_buffer(bytes);
  auto b = p->allocate_buffer(bytes);
  if (!a.is_ok() || !b.is_ok()) {
    state.SkipWithError("cannot allocate");
    return;
  }
  const platform::StreamHandle stream = p->create_stream();
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    p->copy(b->data(), a->data(), bytes, platform::CopyKind::kDeviceToDevice, stream);
    p->synchronize_stream(stream);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  p->destroy_stream(stream);
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(bytes) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Loopback(benchmark::State& state) {
  TransportOptions o;
  o.kind = TransportKind::kLoopback;
  run_transfer(state, o, Device{});
}

void BM_UcxTcp(benchmark::State& state) {
  TransportOptions o;
  o.kind = TransportKind::kUcx;
  o.ucx_transports = "tcp";
  run_transfer(state, o, Device{});
}

void BM_UcxShm(benchmark::State& state) {
  TransportOptions o;
  o.kind = TransportKind::kUcx;
  o.ucx_transports = "posix";
  o.ucx_peer_failure_detection = false;
  run_transfer(state, o, Device{});
}

void BM_CudaIpc(benchmark::State& state) {
  TransportOptions o;
  o.kind = TransportKind::kCudaIpc;
  run_transfer(state, o, Device{DeviceKind::kCuda, 0});
}

// Prefill page size 16 -> decode page size 64 through device staging on CUDA (or the CPU with
// range(1) == 0): gather, one write, scatter, timed together.
void BM_Staging(benchmark::State& state) {
  const bool cuda = state.range(0) != 0;
  auto made = platform::create_platform(cuda ? Device{DeviceKind::kCuda, 0} : Device{});
  if (!made.is_ok()) {
    state.SkipWithError(made.status().to_string().c_str());
    return;
  }
  auto p = std::move(made).value();
  auto src = mem::MHATokenToKVPool::create(*p, pool_config(16)).value();
  auto dst = mem::MHATokenToKVPool::create(*p, pool_config(64)).value();
  const StagingFormat format{32, 8, 128, DType::kBF16};
  auto gather = KvStager::create(*src, format, 0, kChunkTokens, StagingMemory::kDevice).value();
  auto scatter = KvStager::create(*dst, format, 0, kChunkTokens, StagingMemory::kDevice).value();
  TransportOptions o;
  o.platform = p.get();
  auto sender = create_kv_transport(o).value();
  auto receiver = create_kv_transport(o).value();
  (void)sender->register_region(gather->staging(), gather->staging_bytes(),
                                gather->staging_device());
  const PeerId peer =
      sender
          ->connect(receiver
                        ->register_region(scatter->staging(), scatter->staging_bytes(),
                                          scatter->staging_device())
                        .value())
          .value();
  std::mt19937_64 rng(7);
  std::vector<int32_t> src_slots;
  std::vector<int32_t> dst_slots;
  const auto sp = fragmented(kPoolTokens / 16, kChunkTokens / 16, rng);
  const auto dp = fragmented(kPoolTokens / 64, kChunkTokens / 64, rng);
  for (int64_t t = 0; t < kChunkTokens; ++t) {
    src_slots.push_back(sp[t / 16] * 16 + static_cast<int32_t>(t % 16));
    dst_slots.push_back(dp[t / 64] * 64 + static_cast<int32_t>(t % 64));
  }
  const WriteOp op{0, 0, format.bytes(kChunkTokens)};
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto ready = gather->gather(src_slots).value();
    const TransferId id = sender->post(peer, std::span(&op, 1), ready).value();
    while (sender->poll(id) == TransferStatus::kInProgress) {
    }
    sender->release(id);
    p->synchronize_event(scatter->scatter(dst_slots).value());
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.counters["GB/s"] = benchmark::Counter(static_cast<double>(op.length) * 1e-9,
                                              benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_Loopback)->Arg(1)->Arg(16)->Arg(64)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_UcxTcp)->Arg(1)->Arg(16)->Arg(64)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_UcxShm)->Arg(1)->Arg(16)->Arg(64)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaIpc)->Arg(1)->Arg(16)->Arg(64)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_CudaDeviceCopy)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Staging)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace kvserve::disagg

BENCHMARK_MAIN();

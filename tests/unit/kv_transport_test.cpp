// disagg/: the KvTransport interface on the loopback backend, region descriptors, merged page runs
// (checked against a naive page-by-page copy), injected faults and timeouts.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "kvserve/disagg/kv_runs.h"
#include "kvserve/disagg/kv_transport.h"
#include "unit/kv_transfer_scenario.h"

namespace kvserve::disagg {
namespace {

using namespace std::chrono_literals;
using testing::cpu_platform;
using testing::fill_random;
using testing::fragmented_pages;
using testing::naive_page_copy;
using testing::pool_region;
using testing::scenario_pool_config;

std::unique_ptr<KvTransport> loopback(TransportFaults faults = {}, int timeout_ms = 30000) {
  TransportOptions o;
  o.kind = TransportKind::kLoopback;
  o.faults = faults;
  o.transfer_timeout_ms = timeout_ms;
  auto t = create_kv_transport(o);
  EXPECT_TRUE(t.is_ok()) << t.status().to_string();
  return std::move(t).value();
}

TransferStatus wait(KvTransport& t, TransferId id, std::chrono::milliseconds limit = 5000ms) {
  return testing::wait_transfer(t, id, limit, 1ms);
}

TEST(KvTransport, KindNames) {
  for (const TransportKind k :
       {TransportKind::kLoopback, TransportKind::kUcx, TransportKind::kCudaIpc}) {
    auto parsed = parse_transport_kind(transport_kind_name(k));
    ASSERT_TRUE(parsed.is_ok());
    EXPECT_EQ(*parsed, k);
  }
  const auto bad = parse_transport_kind("rdma");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cuda-ipc"), std::string::npos);
}

TEST(KvTransport, DescriptorRoundTrips) {
  RegionDescriptor d{"ucx", {0, 1, 2, 0xfe, 0xff, 0x7f}, 123456789012345ull};
  const auto from_json = region_descriptor_from_json(region_descriptor_to_json(d));
  ASSERT_TRUE(from_json.is_ok()) << from_json.status().to_string();
  EXPECT_EQ(*from_json, d);
  const auto from_bytes = region_descriptor_from_bytes(region_descriptor_to_bytes(d));
  ASSERT_TRUE(from_bytes.is_ok()) << from_bytes.status().to_string();
  EXPECT_EQ(*from_bytes, d);

  for (const char* bad :
       {"", "[]", R"({"backend":1,"bytes":1,"blob":""})",
        R"({"backend":"ucx","bytes":-1,"blob":""})", R"({"backend":"ucx","bytes":1,"blob":"abc"})",
        R"({"backend":"ucx","bytes":1,"blob":"zz"})"}) {
    const auto r = region_descriptor_from_json(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    }
  }
  std::vector<uint8_t> bytes = region_descriptor_to_bytes(d);
  for (size_t cut = 0; cut < bytes.size(); ++cut) {  // every truncation is refused
    EXPECT_FALSE(region_descriptor_from_bytes(std::span(bytes).first(cut)).is_ok()) << cut;
  }
  bytes.push_back(0);
  EXPECT_FALSE(region_descriptor_from_bytes(bytes).is_ok());
}

TEST(KvRuns, MergesOnlyWhereBothSidesContinue) {
  const std::vector<int32_t> src = {4, 5, 6, 9, 10, 11, 2};
  const std::vector<int32_t> dst = {7, 8, 1, 2, 3, 5, 6};
  const auto runs = merge_page_runs(src, dst);
  const std::vector<PageRun> expected = {{4, 7, 2}, {6, 1, 1}, {9, 2, 2}, {11, 5, 1}, {2, 6, 1}};
  EXPECT_EQ(runs, expected);
  // Expanding the runs gives back the pairs.
  std::vector<int32_t> s2;
  std::vector<int32_t> d2;
  for (const auto& r : runs) {
    for (int64_t k = 0; k < r.count; ++k) {
      s2.push_back(static_cast<int32_t>(r.src_page + k));
      d2.push_back(static_cast<int32_t>(r.dst_page + k));
    }
  }
  EXPECT_EQ(s2, src);
  EXPECT_EQ(d2, dst);
  EXPECT_TRUE(merge_page_runs({}, {}).empty());
}

TEST(KvRuns, RefusesWhatItCannotCopy) {
  auto p = cpu_platform();
  auto a = mem::MHATokenToKVPool::create(*p, scenario_pool_config(16, 8)).value();
  auto b = mem::MHATokenToKVPool::create(*p, scenario_pool_config(1, 128)).value();
  const KvRegionLayout la = kv_region_layout(*a, pool_region(*a).base);
  const KvRegionLayout lb = kv_region_layout(*b, pool_region(*b).base);
  EXPECT_EQ(la.buffer_offsets.size(), 6u);
  EXPECT_EQ(la.page_bytes, a->slot_bytes() * 16);
  const std::vector<int32_t> one = {1};
  const std::vector<int32_t> two = {1, 2};
  EXPECT_EQ(merge_runs(one, two, la, la).status().code(), StatusCode::kInvalidArgument);
  const auto mismatch = merge_runs(one, one, la, lb);
  EXPECT_EQ(mismatch.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mismatch.status().message().find("staging"), std::string::npos);
  const std::vector<int32_t> outside = {9};  // 8 + 1 pages (page 0 is padding)
  const std::vector<int32_t> negative = {-1};
  EXPECT_EQ(merge_runs(outside, one, la, la).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(merge_runs(one, negative, la, la).status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(merge_runs(std::vector<int32_t>{8}, one, la, la).is_ok());
}

// Every page size: random fragmented pages both sides, moved by merged runs through the loopback
// transport, equal byte for byte to the naive page-by-page copy (every byte of the destination
// pool, not only the written pages).
TEST(KvTransport, LoopbackEqualsNaivePageCopyOnFragmentedPages) {
  auto p = cpu_platform();
  for (const int32_t page_size : {1, 16, 64}) {
    const uint64_t seed = 1000 + page_size;
    SCOPED_TRACE(::testing::Message() << "page size " << page_size << ", seed " << seed);
    std::printf("loopback page size %d seed %llu\n", page_size,
                static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    const int64_t pages = 2048 / page_size + 8;
    auto src = mem::MHATokenToKVPool::create(*p, scenario_pool_config(page_size, pages)).value();
    auto dst = mem::MHATokenToKVPool::create(*p, scenario_pool_config(page_size, pages)).value();
    const auto sr = pool_region(*src);
    const auto dr = pool_region(*dst);
    fill_random(sr.base, sr.bytes, seed);
    fill_random(dr.base, dr.bytes, seed + 1);
    const size_t n = static_cast<size_t>(pages / 2);
    const auto src_pages = fragmented_pages(pages + 1, n, rng);
    const auto dst_pages = fragmented_pages(pages + 1, n, rng);
    std::vector<uint8_t> expected(dr.base, dr.base + dr.bytes);
    naive_page_copy(*src, *dst, src_pages, dst_pages, expected);

    auto sender = loopback();
    auto receiver = loopback();
    ASSERT_TRUE(sender->register_region(sr.base, sr.bytes, Device{}).is_ok());
    const auto remote = receiver->register_region(dr.base, dr.bytes, Device{});
    ASSERT_TRUE(remote.is_ok());
    const auto peer = sender->connect(*remote);
    ASSERT_TRUE(peer.is_ok()) << peer.status().to_string();
    const auto ops = merge_runs(src_pages, dst_pages, kv_region_layout(*src, sr.base),
                                kv_region_layout(*dst, dr.base));
    ASSERT_TRUE(ops.is_ok()) << ops.status().to_string();
    const size_t runs = merge_page_runs(src_pages, dst_pages).size();
    EXPECT_EQ(ops->size(), runs * 6);
    if (page_size < 64) {
      EXPECT_LT(runs, n) << "no run merged: the scenario is not fragmented";
    }
    const auto id = sender->post(*peer, *ops);
    ASSERT_TRUE(id.is_ok()) << id.status().to_string();
    EXPECT_EQ(wait(*sender, *id), TransferStatus::kDone);
    sender->release(*id);
    EXPECT_EQ(sender->poll(*id), TransferStatus::kFailed);  // released: unknown
    EXPECT_EQ(0, std::memcmp(expected.data(), dr.base, dr.bytes));
  }
}

TEST(KvTransport, LoopbackRefusesBadRegionsPeersAndOps) {
  std::vector<uint8_t> a(4096);
  std::vector<uint8_t> b(1024);
  auto sender = loopback();
  auto receiver = loopback();
  EXPECT_EQ(sender->register_region(nullptr, 10, Device{}).status().code(),
            StatusCode::kInvalidArgument);
  ASSERT_TRUE(sender->register_region(a.data(), a.size(), Device{}).is_ok());
  EXPECT_EQ(sender->register_region(a.data(), a.size(), Device{}).status().code(),
            StatusCode::kInvalidArgument);
  auto remote = receiver->register_region(b.data(), b.size(), Device{});
  ASSERT_TRUE(remote.is_ok());
  EXPECT_EQ(sender->connect(RegionDescriptor{"ucx", remote->blob, 1024}).status().code(),
            StatusCode::kInvalidArgument);
  const auto peer = sender->connect(*remote);
  ASSERT_TRUE(peer.is_ok());
  const WriteOp past_dst{0, 1000, 100};
  const WriteOp past_src{4000, 0, 100};
  const WriteOp empty_op{0, 0, 0};
  const WriteOp overflow{0, ~0ull, 2};
  for (const WriteOp& op : {past_dst, past_src, empty_op, overflow}) {
    EXPECT_EQ(sender->post(*peer, std::span(&op, 1)).status().code(), StatusCode::kInvalidArgument);
  }
  EXPECT_EQ(sender->post(*peer, {}).status().code(), StatusCode::kInvalidArgument);
  const WriteOp ok{0, 0, 1024};
  EXPECT_EQ(sender->post(PeerId{999}, std::span(&ok, 1)).status().code(), StatusCode::kUnavailable);
  receiver.reset();  // the peer's region is gone
  EXPECT_EQ(sender->post(*peer, std::span(&ok, 1)).status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(sender->poll(TransferId{12345}), TransferStatus::kFailed);
}

TEST(KvTransport, BadFaultsAreRefused) {
  TransportOptions o;
  o.faults.fail_probability = 0.7;
  o.faults.drop_probability = 0.7;
  EXPECT_EQ(create_kv_transport(o).status().code(), StatusCode::kInvalidArgument);
  o.faults = {};
  o.faults.delay_ms = -1;
  EXPECT_EQ(create_kv_transport(o).status().code(), StatusCode::kInvalidArgument);
}

struct Pair {
  std::vector<uint8_t> src = std::vector<uint8_t>(256, 7);
  std::vector<uint8_t> dst = std::vector<uint8_t>(256, 0);
  std::unique_ptr<KvTransport> sender;
  std::unique_ptr<KvTransport> receiver;
  PeerId peer;
  WriteOp op{0, 0, 256};

  Pair(TransportFaults faults, int timeout_ms) {
    sender = loopback(faults, timeout_ms);
    receiver = loopback();
    EXPECT_TRUE(sender->register_region(src.data(), src.size(), Device{}).is_ok());
    peer = sender->connect(receiver->register_region(dst.data(), dst.size(), Device{}).value())
               .value();
  }
  TransferId post() { return sender->post(peer, std::span(&op, 1)).value(); }
};

TEST(KvTransportFaults, FailEndsFailedAndWritesNothing) {
  Pair pair({.fail_probability = 1.0}, 30000);
  const TransferId id = pair.post();
  EXPECT_EQ(pair.sender->poll(id), TransferStatus::kFailed);
  EXPECT_EQ(std::count(pair.dst.begin(), pair.dst.end(), 0), 256);
}

TEST(KvTransportFaults, DropStaysInProgressUntilTheTimeoutFailsIt) {
  Pair pair({.drop_probability = 1.0}, 100);
  const auto start = std::chrono::steady_clock::now();
  const TransferId id = pair.post();
  EXPECT_EQ(pair.sender->poll(id), TransferStatus::kInProgress);
  EXPECT_EQ(wait(*pair.sender, id), TransferStatus::kFailed);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, 100ms);
  EXPECT_LT(took, 2000ms);
  EXPECT_EQ(std::count(pair.dst.begin(), pair.dst.end(), 0), 256);
}

TEST(KvTransportFaults, DisconnectFailsTransfersInProgress) {
  Pair pair({.drop_probability = 1.0}, 0);  // no timeout: only the disconnect ends it
  const TransferId id = pair.post();
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(pair.sender->poll(id), TransferStatus::kInProgress);
  pair.sender->disconnect(pair.peer);
  EXPECT_EQ(pair.sender->poll(id), TransferStatus::kFailed);
  const WriteOp op{0, 0, 1};
  EXPECT_EQ(pair.sender->post(pair.peer, std::span(&op, 1)).status().code(),
            StatusCode::kUnavailable);
}

TEST(KvTransportFaults, DelayHoldsDoneBack) {
  Pair pair({.delay_ms = 150}, 30000);
  const auto start = std::chrono::steady_clock::now();
  const TransferId id = pair.post();
  EXPECT_EQ(pair.sender->poll(id), TransferStatus::kInProgress);
  EXPECT_EQ(wait(*pair.sender, id), TransferStatus::kDone);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 150ms);
  EXPECT_EQ(std::count(pair.dst.begin(), pair.dst.end(), 7), 256);
}

// Mixed probabilities: each fate occurs about as often as asked (seeded, so reproducible), and a
// second transport with the same seed draws the same fates.
TEST(KvTransportFaults, MixedProbabilitiesFollowTheSeed) {
  const TransportFaults faults{.fail_probability = 0.25, .drop_probability = 0.25, .seed = 77};
  std::printf("fault seed %llu\n", static_cast<unsigned long long>(faults.seed));
  std::vector<TransferStatus> fates[2];
  for (auto& f : fates) {
    Pair pair(faults, 0);
    for (int i = 0; i < 400; ++i)
      f.push_back(pair.sender->poll(pair.post()));
  }
  EXPECT_EQ(fates[0], fates[1]);
  const auto count = [&](TransferStatus s) {
    return std::count(fates[0].begin(), fates[0].end(), s);
  };
  EXPECT_GT(count(TransferStatus::kFailed), 60);
  EXPECT_LT(count(TransferStatus::kFailed), 140);
  EXPECT_GT(count(TransferStatus::kInProgress), 60);  // dropped
  EXPECT_LT(count(TransferStatus::kInProgress), 140);
  EXPECT_GT(count(TransferStatus::kDone), 140);
  EXPECT_LT(count(TransferStatus::kDone), 260);
}

}  // namespace
}  // namespace kvserve::disagg

// The host side of decode graphs (model/decode_graph_runner.h), which needs no device: the
// captured batch sizes and the bucket of a batch, padding a decode batch (row 0, seq_len 1, token
// 0, slot 0), the packed integers of a batch, cuda-paged's graph plan (fixed offsets per batch
// size, pad entries on page 0) built on the CPU platform, and the CPU runner running without
// graphs (the CPU platform cannot capture).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "kvserve/attention/cuda_backends.h"
#include "kvserve/makemodel/make_model.h"
#include "kvserve/mem/device_req_to_token.h"
#include "kvserve/mem/forward_batch.h"
#include "kvserve/mem/kv_pool.h"
#include "kvserve/mem/req_to_token_pool.h"
#include "kvserve/model/decode_graph_runner.h"
#include "kvserve/model/model_runner.h"
#include "model_test_util.h"

namespace kvserve::model {
namespace {

TEST(DecodeGraphBatchSizes, FollowTheIssuesBucketList) {
  const std::vector<int32_t> sizes = decode_graph_batch_sizes(160);
  std::vector<int32_t> want = {1, 2, 4, 8};
  for (int32_t bs = 16; bs <= 160; bs += 8)
    want.push_back(bs);
  EXPECT_EQ(sizes, want);
  EXPECT_EQ(decode_graph_batch_sizes(1), (std::vector<int32_t>{1}));
  EXPECT_EQ(decode_graph_batch_sizes(3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(decode_graph_batch_sizes(20), (std::vector<int32_t>{1, 2, 4, 8, 16, 20}));
  EXPECT_TRUE(decode_graph_batch_sizes(0).empty());
  // Beyond 256: every 16 up to 496, then every 32 (SGLang's spacing), max_bs last.
  const std::vector<int32_t> big = decode_graph_batch_sizes(600);
  EXPECT_TRUE(std::is_sorted(big.begin(), big.end()));
  for (const int32_t bs : {256, 272, 288, 496, 512, 544, 576, 600}) {
    EXPECT_NE(std::find(big.begin(), big.end(), bs), big.end()) << bs;
  }
  EXPECT_EQ(std::find(big.begin(), big.end(), 264), big.end());
  EXPECT_EQ(big.back(), 600);
}

TEST(DecodeGraphBatchSizes, BucketIsTheSmallestThatFits) {
  const std::vector<int32_t> sizes = decode_graph_batch_sizes(32);
  EXPECT_EQ(decode_graph_bucket(sizes, 1), 1);
  EXPECT_EQ(decode_graph_bucket(sizes, 2), 2);
  EXPECT_EQ(decode_graph_bucket(sizes, 3), 4);
  EXPECT_EQ(decode_graph_bucket(sizes, 8), 8);
  EXPECT_EQ(decode_graph_bucket(sizes, 9), 16);
  EXPECT_EQ(decode_graph_bucket(sizes, 17), 24);
  EXPECT_EQ(decode_graph_bucket(sizes, 32), 32);
  EXPECT_EQ(decode_graph_bucket(sizes, 33), 0);  // larger than max bs: eager
}

// A req_to_token table and KV pool on the CPU with `lens` requests written as the allocator would
// (each request on its own pages, in order).
struct Pools {
  Pools(int32_t page_size, const std::vector<int32_t>& lens)
      : platform(std::move(platform::create_platform(Device{}).value())),
        rows(16, 4096),
        pool(std::move(mem::MHATokenToKVPool::create(*platform, {.num_layers = 1,
                                                                 .num_kv_heads = 2,
                                                                 .head_dim = 64,
                                                                 .size = 65536,
                                                                 .page_size = page_size,
                                                                 .dtype = DType::kBF16})
                           .value())),
        mirror(std::move(mem::DeviceReqToToken::create(*platform, rows).value())) {
    int32_t next_page = 1;  // page 0 is the padding page
    for (const int32_t len : lens) {
      const int32_t row = rows.alloc_one().value();
      std::vector<int32_t> slots(len);
      for (int32_t i = 0; i < len; ++i) {
        if (i % page_size == 0) ++next_page;
        slots[i] = (next_page - 1) * page_size + i % page_size;
      }
      rows.write(row, 0, slots);
      req.push_back(row);
    }
  }
  // A decode batch: request b computes its last position.
  mem::ForwardBatch decode(const std::vector<int32_t>& lens) {
    std::vector<mem::ForwardRequest> fwd;
    std::vector<int32_t> loc;
    for (size_t b = 0; b < lens.size(); ++b) {
      fwd.push_back({req[b], lens[b] - 1, {static_cast<int32_t>(100 + b)}});
      loc.push_back(rows.at(req[b], lens[b] - 1));
    }
    mem::ForwardBatch batch = mem::make_forward_batch(mem::ForwardMode::kDecode, fwd, loc, rows);
    batch.kv_pool = pool.get();
    batch.req_to_token_device = mirror.get();
    return batch;
  }

  std::unique_ptr<platform::Platform> platform;
  mem::ReqToTokenPool rows;
  std::unique_ptr<mem::MHATokenToKVPool> pool;
  std::unique_ptr<mem::DeviceReqToToken> mirror;
  std::vector<int32_t> req;
};

TEST(PadDecodeBatch, PadEntriesReadRowZeroAndWriteSlotZero) {
  Pools p(16, {5, 40, 17});
  const mem::ForwardBatch batch = p.decode({5, 40, 17});
  const mem::ForwardBatch padded = pad_decode_batch(batch, 8);
  ASSERT_EQ(padded.batch_size(), 8);
  ASSERT_EQ(padded.num_tokens(), 8);
  EXPECT_TRUE(padded.is_decode());
  EXPECT_EQ(padded.req_to_token, batch.req_to_token);
  EXPECT_EQ(padded.kv_pool, batch.kv_pool);
  for (int32_t b = 0; b < 3; ++b) {
    EXPECT_EQ(padded.req_pool_indices[b], batch.req_pool_indices[b]);
    EXPECT_EQ(padded.seq_lens[b], batch.seq_lens[b]);
    EXPECT_EQ(padded.input_ids[b], batch.input_ids[b]);
    EXPECT_EQ(padded.positions[b], batch.positions[b]);
    EXPECT_EQ(padded.out_cache_loc[b], batch.out_cache_loc[b]);
  }
  for (int32_t b = 3; b < 8; ++b) {
    EXPECT_EQ(padded.req_pool_indices[b], 0);
    EXPECT_EQ(padded.seq_lens[b], 1);
    EXPECT_EQ(padded.prefix_lens[b], 0);
    EXPECT_EQ(padded.extend_lens[b], 1);
    EXPECT_EQ(padded.input_ids[b], 0);
    EXPECT_EQ(padded.positions[b], 0);
    EXPECT_EQ(padded.out_cache_loc[b], 0);
  }
  std::vector<int32_t> iota(8);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(padded.extend_start_loc, iota);
  EXPECT_EQ(padded.logits_indices, iota);
  // Exactly full: unchanged.
  const mem::ForwardBatch same = pad_decode_batch(batch, 3);
  EXPECT_EQ(same.req_pool_indices, batch.req_pool_indices);
  EXPECT_EQ(same.logits_indices, batch.logits_indices);
  // An all-pad batch (what a capture records).
  mem::ForwardBatch empty;
  empty.mode = mem::ForwardMode::kDecode;
  const mem::ForwardBatch pads = pad_decode_batch(empty, 4);
  EXPECT_EQ(pads.req_pool_indices, (std::vector<int32_t>{0, 0, 0, 0}));
  EXPECT_EQ(pads.seq_lens, (std::vector<int32_t>{1, 1, 1, 1}));
  EXPECT_EQ(pads.out_cache_loc, (std::vector<int32_t>{0, 0, 0, 0}));
}

TEST(PadDecodeBatch, RejectsWhatAGraphCannotRun) {
  Pools p(1, {5, 6});
  const mem::ForwardBatch batch = p.decode({5, 6});
  EXPECT_THROW(pad_decode_batch(batch, 1), CheckError);  // larger than the bucket
  mem::ForwardBatch extend = batch;
  extend.mode = mem::ForwardMode::kExtend;
  EXPECT_THROW(pad_decode_batch(extend, 4), CheckError);
  mem::ForwardBatch cross = batch;
  cross.encoder_lens = {3, 3};
  EXPECT_THROW(pad_decode_batch(cross, 4), CheckError);
}

TEST(BatchInts, PackedAsIdsPositionsLogitsRows) {
  Pools p(1, {5, 6, 9});
  const mem::ForwardBatch batch = p.decode({5, 6, 9});
  ASSERT_EQ(mem::batch_ints_size(batch), 9);
  std::vector<int32_t> host(9, -1);
  mem::pack_batch_ints(batch, host.data());
  EXPECT_EQ(host, (std::vector<int32_t>{100, 101, 102, 4, 5, 8, 0, 1, 2}));
  const mem::DeviceBatchInts at = mem::batch_ints_at(batch, host.data());
  EXPECT_EQ(at.input_ids, host.data());
  EXPECT_EQ(at.positions, host.data() + 3);
  EXPECT_EQ(at.logits_indices, host.data() + 6);
  // Upload: one copy into the device buffer (plain memory on the CPU platform).
  std::vector<int32_t> staging;
  std::vector<int32_t> device(9, -1);
  const mem::DeviceBatchInts up =
      mem::upload_batch_ints(*p.platform, batch, staging, device.data());
  EXPECT_EQ(device, host);
  EXPECT_EQ(up.logits_indices, device.data() + 6);
}

// cuda-paged's decode-graph plan is O(batch) host integers; the mirror write and the page lists
// are device work (launch_decode_graph_metadata), run here with the CPU ops.
class CudaPagedGraphPlanTest : public ::testing::TestWithParam<int32_t> {};

TEST_P(CudaPagedGraphPlanTest, FixedOffsetsPerBatchSizeAndPadsOnRowZero) {
  const int32_t ps = GetParam();
  const std::vector<int32_t> lens = {1, 17, 200, 1000};
  Pools p(ps, lens);
  auto backend = attention::make_cuda_paged_backend(*p.platform);
  ASSERT_TRUE(backend->supports_decode_graphs());
  const attention::DecodeGraphShape shape{.max_bs = 8,
                                          .max_kv_len = 4096,
                                          .page_size = ps,
                                          .num_q_heads = 14,
                                          .num_kv_heads = 2,
                                          .head_dim = 64};
  auto cap = backend->init_decode_graph_state(shape);
  ASSERT_TRUE(cap.is_ok()) << cap.status().to_string();
  // No page ids in the plan: its size does not depend on the requests' lengths.
  EXPECT_EQ(*cap, 7 * 8 + 2);

  const mem::ForwardBatch padded = pad_decode_batch(p.decode(lens), 8);
  std::vector<int32_t> host(*cap + 1, -7);
  std::vector<int32_t> device(*cap);
  const int64_t n =
      backend->init_forward_metadata_decode_graph(padded, host.data(), *cap, device.data()).value();
  const int32_t B = 8;
  ASSERT_EQ(n, 7 * B + 2);
  // [slots B | rows B | new starts B | new indptr B + 1 | starts B | lengths B | page indptr B + 1]
  const int32_t* slots = host.data();
  const int32_t* rows = slots + B;
  const int32_t* new_start = rows + B;
  const int32_t* new_indptr = new_start + B;
  const int32_t* starts = new_indptr + B + 1;
  const int32_t* lengths = starts + B;
  const int32_t* page_indptr = lengths + B;
  int32_t start = 0;
  for (int32_t b = 0; b < B; ++b) {
    EXPECT_EQ(slots[b], padded.out_cache_loc[b]) << b;
    EXPECT_EQ(rows[b], padded.req_pool_indices[b]) << b;
    EXPECT_EQ(new_start[b], padded.seq_lens[b] - 1) << b;
    EXPECT_EQ(new_indptr[b], b) << b;
    EXPECT_EQ(starts[b], start) << b;
    EXPECT_EQ(page_indptr[b], start) << b;
    EXPECT_EQ(lengths[b], padded.seq_lens[b]) << b;
    start += (padded.seq_lens[b] + ps - 1) / ps;
  }
  EXPECT_EQ(new_indptr[B], B);
  EXPECT_EQ(page_indptr[B], start);
  for (int32_t b = 4; b < B; ++b) {
    EXPECT_EQ(slots[b], 0);    // stores at slot 0
    EXPECT_EQ(rows[b], 0);     // reads the padding row
    EXPECT_EQ(lengths[b], 1);  // one position
  }
  EXPECT_EQ(host[n], -7);  // nothing written past the plan

  // The device work: the repair (the rows were written on the host before this forward) ran
  // already; the captured part writes each new slot and builds the page lists. Afterwards the
  // mirror equals the host rows on every request's [0, seq_len).
  std::copy(host.begin(), host.begin() + n, device.begin());
  backend->launch_decode_graph_metadata();
  for (size_t b = 0; b < lens.size(); ++b) {
    const auto want = p.rows.row(p.req[b], 0, lens[b]);
    EXPECT_EQ(p.mirror->read_row(p.req[b], lens[b]), std::vector<int32_t>(want.begin(), want.end()))
        << b;
  }
  EXPECT_EQ(p.mirror->read_row(0, 1), std::vector<int32_t>{0});  // pads wrote slot 0 there

  // Another batch of the same size, different lengths: same offsets, same size.
  const std::vector<int32_t> lens2 = {1000, 1000, 999, 3};
  Pools q(ps, lens2);
  const mem::ForwardBatch padded2 = pad_decode_batch(q.decode(lens2), 8);
  const int64_t n2 =
      backend->init_forward_metadata_decode_graph(padded2, host.data(), *cap, device.data())
          .value();
  EXPECT_EQ(n2, n);
  EXPECT_EQ(host[5 * B + 1 + 0], 1000);  // lengths[0]
  EXPECT_EQ(host[5 * B + 1 + 3], 3);
  EXPECT_EQ(host[4 * B + 1 + 1], (1000 + ps - 1) / ps);  // starts[1]
  // The plan must fit the caller's buffer.
  EXPECT_THROW(
      (void)backend->init_forward_metadata_decode_graph(padded2, host.data(), 3 * B, device.data()),
      CheckError);
}

INSTANTIATE_TEST_SUITE_P(PageSizes, CudaPagedGraphPlanTest, ::testing::Values(1, 16, 128),
                         [](const ::testing::TestParamInfo<int32_t>& i) {
                           return "page" + std::to_string(i.param);
                         });

TEST(DecodeGraphs, TheCpuPlatformHasNone) {
  auto cpu = std::move(platform::create_platform(Device{}).value());
  platform::Stream s(*cpu);
  EXPECT_EQ(cpu->begin_capture(s.handle()).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(cpu->end_capture(s.handle()).status().code(), StatusCode::kUnimplemented);
  // The current stream: null resolves to it.
  EXPECT_EQ(cpu->resolve({}).ptr, nullptr);
  cpu->set_current_stream(s.handle());
  EXPECT_EQ(cpu->resolve({}).ptr, s.handle().ptr);
  platform::Stream other(*cpu);
  EXPECT_EQ(cpu->resolve(other.handle()).ptr, other.handle().ptr);
  cpu->set_current_stream({});

  // A CPU runner runs every forward eagerly whatever the flags say.
  model::testing::TempDir dir;
  makemodel::MakeModelOptions mo;
  mo.preset = "tiny";
  mo.output = dir.path() / "tiny";
  ASSERT_TRUE(makemodel::make_model(mo).is_ok());
  ModelRunnerOptions o;
  o.max_total_tokens = 1024;
  o.max_running_requests = 4;
  o.cuda_graph_max_bs = 4;
  auto runner = ModelRunner::create(dir.path() / "tiny", o);
  ASSERT_TRUE(runner.is_ok()) << runner.status().to_string();
  EXPECT_EQ((*runner)->decode_graphs(), nullptr);
  o.cuda_graph_max_bs = -1;
  EXPECT_EQ(ModelRunner::create(dir.path() / "tiny", o).status().code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvserve::model

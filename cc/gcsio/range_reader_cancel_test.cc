// The RangeReader's cancellation against FakeGcsServer on 127.0.0.1: running, queued and delayed
// work, one batch among others, and the reader's destruction.
#include <gtest/gtest.h>

#include "cc/gcsio/range_reader_fixture.h"

namespace gcsio {
namespace {

TEST_F(RangeReaderTest, CancelStopsRunningAndQueuedFetches) {
  RangeReaderOptions o = Options();
  o.num_threads = 1;
  o.max_inflight_requests = 1;
  RangeReader reader(o, {});
  server_.SetScript([](const FakeGcsServer::Request&) {
    Reply reply;
    reply.action = Action::kHang;  // 512 bytes, then nothing until ReleaseHung()
    reply.body_bytes = 512;
    return reply;
  });
  Reads reads(SpacedRanges(4));
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(Eventually([&] { return reader.stats().Snapshot().bytes_received == 512; }));
  reader.Cancel(batch);
  EXPECT_TRUE(batch->Finished());
  EXPECT_TRUE(batch->cancelled());
  EXPECT_TRUE(batch->Failures().empty());
  const std::vector<std::vector<uint8_t>> at_cancel = reads.bufs;
  // The hung answer now sends the rest; the connection is gone, so nothing more is written.
  server_.ReleaseHung();
  ASSERT_TRUE(server_.WaitForHungEnded(1, kLimit_s));
  EXPECT_EQ(reads.bufs, at_cancel);
  EXPECT_TRUE(std::equal(reads.bufs[0].begin(), reads.bufs[0].begin() + 512,
                         reinterpret_cast<const uint8_t*>(blob_.data())));
  EXPECT_EQ(reads.bufs[0][512], Reads::kUntouched);
  for (size_t i = 1; i < reads.bufs.size(); ++i) {
    EXPECT_EQ(reads.bufs[i], std::vector<uint8_t>(kPiece, Reads::kUntouched));
  }
  EXPECT_EQ(server_.request_count(), 1);  // the three queued fetches never went out
  const StatsSnapshot s = reader.stats().Snapshot();
  EXPECT_EQ(s.requests, 1u);
  EXPECT_EQ(s.failures, 0u);
  Batch::Progress p = batch->NextCompleted(kLimit_s);
  EXPECT_FALSE(p.timed_out);
  EXPECT_TRUE(p.completed.empty());
}

TEST_F(RangeReaderTest, CancelDropsAFetchWaitingForItsRetry) {
  RangeReaderOptions o = Options();
  o.retry.initial_backoff_s = 1e6;  // the retry is due in (practically) never
  o.retry.max_backoff_s = 1e6;
  o.retry.deadline_s = 1e7;
  RangeReader reader(o, {});
  server_.SetScript([](const FakeGcsServer::Request&) {
    Reply reply;
    reply.action = Action::kStatus;
    reply.status = 503;
    return reply;
  });
  Reads reads({{0, 0, 10}});
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(Eventually([&] { return reader.stats().Snapshot().retries == 1; }));
  reader.Cancel(batch);
  EXPECT_TRUE(batch->Finished());
  EXPECT_TRUE(batch->Failures().empty());
  EXPECT_EQ(server_.request_count(), 1);
  EXPECT_EQ(reader.stats().Snapshot().requests, 1u);
}

TEST_F(RangeReaderTest, CancellingOneBatchLeavesTheOthersRunning) {
  RangeReaderOptions o = Options();
  o.max_inflight_requests = 2;
  RangeReader reader(o, {});
  server_.Put(kBucket, "hangs", TestPattern(kPiece, 2));
  server_.SetScript([](const FakeGcsServer::Request& r) {
    Reply reply;
    if (r.object == "hangs") reply.action = Action::kHang;
    return reply;
  });
  Reads stuck({{0, 0, kPiece}});
  auto a = Submit(reader, stuck, {{kBucket, "hangs"}});
  ASSERT_TRUE(server_.WaitForRequests(1, kLimit_s));
  Reads fine(SpacedRanges(6));
  auto b = Submit(reader, fine);
  ASSERT_TRUE(b->WaitFinishedFor(kLimit_s));
  EXPECT_TRUE(b->Failures().empty());
  for (size_t i = 0; i < fine.ranges.size(); ++i) ExpectBlobBytes(fine, i);
  EXPECT_FALSE(a->Finished());
  reader.Cancel(a);
  EXPECT_TRUE(a->Finished());
  EXPECT_TRUE(a->Failures().empty());
  EXPECT_EQ(server_.request_count(), 7);
}

TEST_F(RangeReaderTest, DestroyingTheReaderEndsItsBatches) {
  RangeReaderOptions o = Options();
  o.num_threads = 1;
  o.max_inflight_requests = 1;
  auto reader = std::make_unique<RangeReader>(o, TokenSource());
  server_.SetScript([](const FakeGcsServer::Request&) {
    Reply reply;
    reply.action = Action::kHang;
    return reply;
  });
  Reads reads(SpacedRanges(3));
  auto batch = Submit(*reader, reads);
  ASSERT_TRUE(server_.WaitForRequests(1, kLimit_s));
  reader.reset();  // drops the queued fetches, stops the running one, joins the workers
  EXPECT_TRUE(batch->Finished());
  EXPECT_TRUE(batch->Failures().empty());
  EXPECT_EQ(server_.request_count(), 1);
}

}  // namespace
}  // namespace gcsio

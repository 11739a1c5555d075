// The RangeReader against FakeGcsServer on 127.0.0.1: delivery and counters, queueing beyond the
// request limit, the byte budget, plan order and retries first, retries that resume, giving up,
// and failures that fail at once. Assertions are on bytes, request counts and errors, not timings.
#include <gtest/gtest.h>

#include "cc/gcsio/range_reader_fixture.h"

namespace gcsio {
namespace {

TEST_F(RangeReaderTest, DeliversEveryRangeAndCountsTheWork) {
  RangeReader reader(Options(), {});
  // Ranges in any order, one across two fetches (9000 bytes, chunk 4096 -> 3 fetches).
  Reads reads({{0, 100000, 9000}, {0, 0, 1}, {0, kBlobBytes - 500, 500}, {0, 50000, 4096}});
  auto batch = Submit(reader, reads);
  std::vector<uint32_t> reported;
  while (true) {
    Batch::Progress p = batch->NextCompleted(kLimit_s);
    ASSERT_FALSE(p.timed_out);
    ASSERT_FALSE(p.failed);
    if (p.completed.empty()) break;
    reported.insert(reported.end(), p.completed.begin(), p.completed.end());
  }
  std::sort(reported.begin(), reported.end());
  EXPECT_EQ(reported, (std::vector<uint32_t>{0, 1, 2, 3}));
  for (size_t i = 0; i < reads.ranges.size(); ++i) ExpectBlobBytes(reads, i);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  const StatsSnapshot s = reader.stats().Snapshot();
  EXPECT_EQ(batch->num_fetches(), 6u);
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(server_.request_count(), 6);
  EXPECT_EQ(s.bytes_received, 9000u + 1 + 500 + 4096);
  EXPECT_EQ(s.bytes_delivered, 9000u + 1 + 500 + 4096);
  EXPECT_EQ(s.retries, 0u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_TRUE(batch->Failures().empty());
  for (const FakeGcsServer::Request& r : server_.requests()) {
    EXPECT_EQ(r.bucket, kBucket);
    EXPECT_EQ(r.object, kBlob);
    EXPECT_EQ(r.authorization, "");  // no token source: no Authorization header
  }
}

TEST_F(RangeReaderTest, QueuesFetchesBeyondTheRequestLimit) {
  RangeReaderOptions o = Options();
  o.max_inflight_requests = 3;
  RangeReader reader(o, {});
  server_.HoldUntilConcurrent(3);  // answers wait until 3 requests are in flight together
  Reads reads(SpacedRanges(12));
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  EXPECT_TRUE(batch->Failures().empty());
  EXPECT_EQ(server_.max_concurrent(), 3);
  EXPECT_EQ(server_.request_count(), 12);
  for (size_t i = 0; i < reads.ranges.size(); ++i) ExpectBlobBytes(reads, i);
}

TEST_F(RangeReaderTest, TheByteBudgetBoundsRequestsInFlight) {
  RangeReaderOptions o = Options();
  o.max_inflight_requests = 8;
  o.max_inflight_bytes = 2 * kPiece;  // room for two fetches
  RangeReader reader(o, {});
  server_.HoldUntilConcurrent(2);
  Reads reads(SpacedRanges(8));
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  EXPECT_TRUE(batch->Failures().empty());
  EXPECT_EQ(server_.max_concurrent(), 2);
  EXPECT_EQ(server_.request_count(), 8);
  for (size_t i = 0; i < reads.ranges.size(); ++i) ExpectBlobBytes(reads, i);
}

TEST_F(RangeReaderTest, AFetchLargerThanTheByteBudgetRunsAlone) {
  RangeReaderOptions o = Options();
  o.max_inflight_requests = 8;
  o.max_inflight_bytes = 1;
  RangeReader reader(o, {});
  Reads reads(SpacedRanges(4));
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  EXPECT_TRUE(batch->Failures().empty());
  EXPECT_EQ(server_.max_concurrent(), 1);
  EXPECT_EQ(server_.request_count(), 4);
  for (size_t i = 0; i < reads.ranges.size(); ++i) ExpectBlobBytes(reads, i);
}

TEST_F(RangeReaderTest, IssuesFetchesInPlanOrderAndRetriesFirst) {
  RangeReaderOptions o = Options();
  o.num_threads = 1;
  o.max_inflight_requests = 1;
  RangeReader reader(o, {});
  server_.SetScript([](const FakeGcsServer::Request& r) {
    Reply reply;
    if (r.index == 0) {
      reply.action = Action::kStatus;
      reply.status = 503;
      reply.body = "backend busy";
    }
    return reply;
  });
  Reads first(SpacedRanges(3));
  Reads second({{0, 40 * kPiece, kPiece}, {0, 50 * kPiece, kPiece}});
  auto a = Submit(reader, first);
  auto b = Submit(reader, second);  // queued behind the first batch
  ASSERT_TRUE(a->WaitFinishedFor(kLimit_s));
  ASSERT_TRUE(b->WaitFinishedFor(kLimit_s));
  std::vector<uint64_t> order;
  for (const FakeGcsServer::Request& r : server_.requests()) order.push_back(r.first / kPiece);
  // Fetch 0's retry runs before fetch 1; the second batch follows the first.
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 0, 2, 4, 40, 50}));
  const StatsSnapshot s = reader.stats().Snapshot();
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(s.retries, 1u);
  EXPECT_EQ(s.retries_by_cause, (std::map<std::string, uint64_t>{{"http_503", 1}}));
  for (size_t i = 0; i < first.ranges.size(); ++i) ExpectBlobBytes(first, i);
  for (size_t i = 0; i < second.ranges.size(); ++i) ExpectBlobBytes(second, i);
}

TEST_F(RangeReaderTest, ARetryAsksOnlyForTheMissingBytes) {
  RangeReader reader(Options(), {});
  server_.SetScript([](const FakeGcsServer::Request& r) {
    Reply reply;
    if (r.index == 0) {
      reply.action = Action::kShortBody;  // 1000 of 4096 bytes, then the connection closes
      reply.body_bytes = 1000;
    }
    return reply;
  });
  Reads reads({{0, 100, kPiece}});
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  EXPECT_TRUE(batch->Failures().empty());
  const std::vector<FakeGcsServer::Request> seen = server_.requests();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].range, "bytes=100-4195");
  EXPECT_EQ(seen[1].range, "bytes=1100-4195");
  ExpectBlobBytes(reads, 0);
  const StatsSnapshot s = reader.stats().Snapshot();
  EXPECT_EQ(s.retries_by_cause, (std::map<std::string, uint64_t>{{"short_body", 1}}));
  EXPECT_EQ(s.bytes_received, kPiece);  // 1000 + 3096: no byte fetched twice
  EXPECT_EQ(s.bytes_delivered, kPiece);
}

TEST_F(RangeReaderTest, GivesUpAfterMaxAttempts) {
  RangeReaderOptions o = Options();
  o.retry.max_attempts = 3;
  RangeReader reader(o, {});
  server_.SetScript([](const FakeGcsServer::Request&) {
    Reply reply;
    reply.action = Action::kStatus;
    reply.status = 503;
    reply.body = "backend busy";
    return reply;
  });
  Reads reads({{0, 0, 10}});
  auto batch = Submit(reader, reads);
  Batch::Progress p = batch->NextCompleted(kLimit_s);
  ASSERT_FALSE(p.timed_out);
  EXPECT_TRUE(p.failed);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  const std::vector<RequestFailure> failures = batch->Failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].request, 0u);
  EXPECT_EQ(failures[0].status, 503);
  EXPECT_EQ(failures[0].attempts, 3);
  EXPECT_NE(failures[0].error.find("503"), std::string::npos) << failures[0].error;
  EXPECT_EQ(server_.request_count(), 3);
  const StatsSnapshot s = reader.stats().Snapshot();
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.retries, 2u);
  EXPECT_EQ(s.failures, 1u);
  EXPECT_EQ(reads.bufs[0], std::vector<uint8_t>(10, Reads::kUntouched));
}

TEST_F(RangeReaderTest, AMissingObjectFailsAtOnceAndAlone) {
  RangeReader reader(Options(), {});
  Reads reads({{0, 0, 100}, {1, 0, 100}, {0, 8192, 100}});
  auto batch = Submit(reader, reads, {{kBucket, kBlob}, {kBucket, "no/such.distcp"}});
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  const std::vector<RequestFailure> failures = batch->Failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].request, 1u);
  EXPECT_EQ(failures[0].status, 404);
  EXPECT_EQ(failures[0].attempts, 1);
  EXPECT_NE(failures[0].error.find("no/such.distcp"), std::string::npos) << failures[0].error;
  EXPECT_NE(failures[0].error.find(kBucket), std::string::npos) << failures[0].error;
  ExpectBlobBytes(reads, 0);
  ExpectBlobBytes(reads, 2);
  EXPECT_EQ(reader.stats().Snapshot().retries, 0u);
  EXPECT_EQ(server_.request_count(), 3);
}

TEST_F(RangeReaderTest, RangesPastTheEndFailWithoutRetries) {
  RangeReader reader(Options(), {});
  // Starts past the end (416), and ends past the end (206 with a shorter Content-Range).
  Reads reads({{0, kBlobBytes + 1000, 10}, {0, kBlobBytes - 10, 20}});
  auto batch = Submit(reader, reads);
  ASSERT_TRUE(batch->WaitFinishedFor(kLimit_s));
  std::vector<RequestFailure> failures = batch->Failures();
  ASSERT_EQ(failures.size(), 2u);
  std::sort(failures.begin(), failures.end(),
            [](const RequestFailure& x, const RequestFailure& y) { return x.request < y.request; });
  EXPECT_EQ(failures[0].status, 416);
  EXPECT_EQ(failures[1].status, 206);
  for (const RequestFailure& f : failures) {
    EXPECT_EQ(f.attempts, 1);
    EXPECT_FALSE(f.error.empty());
  }
  EXPECT_EQ(reader.stats().Snapshot().retries, 0u);
  // The 10 bytes that exist may land in the buffer of the failed request (the caller must not
  // use a failed request's buffer); nothing is written past the object's end.
  const std::vector<uint8_t>& tail = reads.bufs[1];
  EXPECT_TRUE(std::equal(tail.begin(), tail.begin() + 10,
                         reinterpret_cast<const uint8_t*>(blob_.data()) + kBlobBytes - 10) ||
              std::all_of(tail.begin(), tail.begin() + 10,
                          [](uint8_t b) { return b == Reads::kUntouched; }));
  EXPECT_EQ(std::vector<uint8_t>(tail.begin() + 10, tail.end()),
            std::vector<uint8_t>(10, Reads::kUntouched));
}

}  // namespace
}  // namespace gcsio

// Batch: completion order and reporting, zero-length requests, requests split over several
// fetches, failures reported once per request, cancellation, and the per-fetch state.
#include "cc/gcsio/batch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "cc/gcsio/range_plan.h"

namespace gcsio {
namespace {

RequestFailure Failure(long status, const std::string& error, int attempts) {
  RequestFailure failure;
  failure.status = status;
  failure.error = error;
  failure.attempts = attempts;
  return failure;
}

// Request 0: 30 bytes of object 0, split into fetches 0, 1, 2 (chunk 10); request 1: zero
// length; request 2: 10 bytes of object 1 (fetch 3).
class BatchTest : public ::testing::Test {
 protected:
  BatchTest()
      : bufs_{std::vector<uint8_t>(30), std::vector<uint8_t>(), std::vector<uint8_t>(10)},
        batch_({{"b0", "o0"}, {"b1", "dir/o1"}}, Ranges(), Dests(), MakePlan()) {}

  static std::vector<RangeSpec> Ranges() { return {{0, 100, 30}, {0, 0, 0}, {1, 0, 10}}; }
  static Plan MakePlan() {
    PlanOptions o;
    o.chunk_bytes = 10;
    o.coalesce_gap_bytes = 0;
    o.target_fetches = 0;
    return PlanFetches(Ranges(), o);
  }
  std::vector<uint8_t*> Dests() { return {bufs_[0].data(), bufs_[1].data(), bufs_[2].data()}; }

  std::vector<std::vector<uint8_t>> bufs_;
  Batch batch_;
};

TEST_F(BatchTest, DescribesItsFetches) {
  EXPECT_EQ(batch_.num_fetches(), 4u);
  EXPECT_EQ(batch_.num_requests(), 3u);
  EXPECT_EQ(batch_.fetch(0).offset, 100u);
  EXPECT_EQ(batch_.fetch(2).offset, 120u);
  EXPECT_EQ(batch_.object_of(0).object, "o0");
  EXPECT_EQ(batch_.object_of(3).bucket, "b1");
  EXPECT_EQ(batch_.object_of(3).object, "dir/o1");
  EXPECT_EQ(batch_.remaining_bytes(1), 10u);
  batch_.state(1).received = 4;  // a retry asks only for the rest
  EXPECT_EQ(batch_.remaining_bytes(1), 6u);
  EXPECT_FALSE(batch_.cancelled());
  EXPECT_FALSE(batch_.Finished());
}

TEST_F(BatchTest, ZeroLengthRequestsAreReportedAtOnce) {
  Batch::Progress p = batch_.NextCompleted(0);
  EXPECT_FALSE(p.timed_out);
  EXPECT_FALSE(p.failed);
  EXPECT_EQ(p.completed, std::vector<uint32_t>{1});
  EXPECT_TRUE(batch_.NextCompleted(0).timed_out);  // nothing else yet
}

TEST_F(BatchTest, ARequestCompletesWhenAllItsFetchesHaveEnded) {
  batch_.NextCompleted(0);  // request 1 (zero length)
  batch_.FetchSucceeded(0);
  batch_.FetchSucceeded(1);
  EXPECT_TRUE(batch_.NextCompleted(0).timed_out);  // request 0 still misses fetch 2
  batch_.FetchSucceeded(3);
  EXPECT_EQ(batch_.NextCompleted(0).completed, std::vector<uint32_t>{2});
  batch_.FetchSucceeded(2);
  EXPECT_EQ(batch_.NextCompleted(0).completed, std::vector<uint32_t>{0});
  // Every request reported: an empty answer without waiting.
  Batch::Progress done = batch_.NextCompleted(-1);
  EXPECT_FALSE(done.timed_out);
  EXPECT_TRUE(done.completed.empty());
  EXPECT_TRUE(batch_.Finished());
  EXPECT_TRUE(batch_.WaitFinishedFor(0));
  EXPECT_TRUE(batch_.Failures().empty());
}

TEST_F(BatchTest, FetchStateWritersFillTheDestinations) {
  for (uint32_t i = 0; i < batch_.num_fetches(); ++i) {
    const Fetch& f = batch_.fetch(i);
    std::vector<uint8_t> body(f.length);
    for (uint64_t k = 0; k < f.length; ++k) body[k] = static_cast<uint8_t>(f.offset + k);
    batch_.state(i).writer.Write(0, body.data(), body.size());
    batch_.FetchSucceeded(i);
  }
  for (uint64_t k = 0; k < 30; ++k) EXPECT_EQ(bufs_[0][k], static_cast<uint8_t>(100 + k));
  for (uint64_t k = 0; k < 10; ++k) EXPECT_EQ(bufs_[2][k], static_cast<uint8_t>(k));
}

TEST_F(BatchTest, AFailedRequestIsReportedOnceAndStopsProgress) {
  batch_.FetchFailed(0, Failure(503, "HTTP 503 after 6 attempts", 6));
  batch_.FetchFailed(1, Failure(0, "connection reset", 6));  // same request: not reported again
  batch_.FetchSucceeded(2);
  batch_.FetchSucceeded(3);
  const std::vector<RequestFailure> failures = batch_.Failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].request, 0u);
  EXPECT_EQ(failures[0].status, 503);
  EXPECT_EQ(failures[0].error, "HTTP 503 after 6 attempts");
  EXPECT_EQ(failures[0].attempts, 6);
  Batch::Progress p = batch_.NextCompleted(-1);
  EXPECT_TRUE(p.failed);
  EXPECT_TRUE(p.completed.empty());
  EXPECT_TRUE(batch_.Finished());
}

TEST_F(BatchTest, ACancelledBatchEndsWhenEveryFetchWasDropped) {
  batch_.MarkCancelled();
  EXPECT_TRUE(batch_.cancelled());
  EXPECT_TRUE(batch_.cancelled_flag().load());
  for (uint32_t i = 0; i < 3; ++i) batch_.FetchDropped(i);
  EXPECT_FALSE(batch_.Finished());
  EXPECT_FALSE(batch_.WaitFinishedFor(0));
  batch_.FetchDropped(3);
  EXPECT_TRUE(batch_.Finished());
  EXPECT_EQ(batch_.NextCompleted(-1).completed, std::vector<uint32_t>{1});
  // Nothing more will complete: a cancelled, finished batch answers at once, empty.
  Batch::Progress p = batch_.NextCompleted(-1);
  EXPECT_FALSE(p.timed_out);
  EXPECT_FALSE(p.failed);
  EXPECT_TRUE(p.completed.empty());
  EXPECT_TRUE(batch_.Failures().empty());
}

TEST_F(BatchTest, WaitFinishedReturnsOnceTheLastFetchEnds) {
  std::thread waiter([this] { batch_.WaitFinished(); });
  for (uint32_t i = 0; i < batch_.num_fetches(); ++i) batch_.FetchSucceeded(i);
  waiter.join();
  EXPECT_TRUE(batch_.Finished());
}

}  // namespace
}  // namespace gcsio

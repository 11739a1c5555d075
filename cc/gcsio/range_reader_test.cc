// The range reader against FakeGcsServer on 127.0.0.1: delivery and counters, queueing beyond the
// request limit, the byte budget, plan order and retries first, retries that resume, giving up,
// failures that fail at once, cancellation (running, queued and delayed work), shutdown, bearer
// tokens, and option checks. Assertions are on bytes, request counts and errors, not timings.
#include "cc/gcsio/range_reader.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cc/gcsio/defaults.h"
#include "cc/gcsio/fake_gcs_server.h"

namespace gcsio {
namespace {

constexpr char kBucket[] = "bkt";
constexpr char kBlob[] = "dir/blob.distcp";
constexpr uint64_t kBlobBytes = 256 << 10;
constexpr uint64_t kPiece = 4096;
constexpr double kLimit_s = 60;  // only a broken reader waits this long

using Action = FakeGcsServer::Action;
using Reply = FakeGcsServer::Reply;

// Polls `done` until it holds or kLimit_s passes (a broken test).
template <typename F>
bool Eventually(F done) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kLimit_s);
  while (!done()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// Destinations for a list of ranges, filled with a marker byte.
struct Reads {
  static constexpr uint8_t kUntouched = 0xEE;
  explicit Reads(const std::vector<RangeSpec>& r) : ranges(r) {
    for (const RangeSpec& s : ranges) bufs.emplace_back(s.length, kUntouched);
    for (auto& b : bufs) dests.push_back(b.data());
  }
  std::vector<RangeSpec> ranges;
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<uint8_t*> dests;
};

class RangeReaderTest : public ::testing::Test {
 protected:
  RangeReaderTest() : blob_(TestPattern(kBlobBytes, 1)) { server_.Put(kBucket, kBlob, blob_, 77); }

  // Small fetches, retries without backoff, two threads.
  RangeReaderOptions Options() const {
    RangeReaderOptions o;
    o.endpoint = server_.endpoint();
    o.num_threads = 2;
    o.plan.chunk_bytes = kPiece;
    o.plan.coalesce_gap_bytes = 0;
    o.plan.target_fetches = 0;
    o.retry.initial_backoff_s = 0;
    o.retry.max_backoff_s = 0;
    o.stall_timeout_s = 3600;  // hung answers wait for the test, not for a stall retry
    o.credential_description = "test credential";
    return o;
  }

  // `n` ranges of kPiece bytes of the blob, one apart, so each is its own fetch.
  static std::vector<RangeSpec> SpacedRanges(int n) {
    std::vector<RangeSpec> r;
    for (int i = 0; i < n; ++i) r.push_back({0, static_cast<uint64_t>(i) * 2 * kPiece, kPiece});
    return r;
  }

  std::shared_ptr<Batch> Submit(RangeReader& reader, Reads& reads,
                                std::vector<ObjectRef> objects = {{kBucket, kBlob}}) {
    return reader.Submit(std::move(objects), reads.ranges, reads.dests);
  }

  void ExpectBlobBytes(const Reads& reads, size_t i) const {
    const RangeSpec& r = reads.ranges[i];
    ASSERT_EQ(reads.bufs[i].size(), r.length);
    EXPECT_TRUE(std::equal(reads.bufs[i].begin(), reads.bufs[i].end(),
                           reinterpret_cast<const uint8_t*>(blob_.data()) + r.offset))
        << "request " << i;
  }

  FakeGcsServer server_;
  const std::string blob_;
};

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

TEST_F(RangeReaderTest, SendsOneCachedBearerTokenAndNeverShowsIt) {
  int calls = 0;
  TokenSource source = [&calls] {
    ++calls;
    return Token{"secret-token-1", WallClockSeconds() + 3600};
  };
  RangeReader reader(Options(), source);
  server_.Put(kBucket, "denied", "x");
  server_.SetScript([](const FakeGcsServer::Request& r) {
    Reply reply;
    if (r.object == "denied") {
      reply.action = Action::kStatus;
      reply.status = 403;
      reply.body = "caller does not have storage.objects.get access";
    }
    return reply;
  });
  Reads first(SpacedRanges(3));
  auto a = Submit(reader, first);
  ASSERT_TRUE(a->WaitFinishedFor(kLimit_s));
  Reads second({{0, 0, 1}});
  auto b = Submit(reader, second, {{kBucket, "denied"}});
  ASSERT_TRUE(b->WaitFinishedFor(kLimit_s));
  EXPECT_EQ(calls, 1);
  ASSERT_EQ(server_.request_count(), 4);
  for (const FakeGcsServer::Request& r : server_.requests()) {
    EXPECT_EQ(r.authorization, "Bearer secret-token-1");
  }
  const std::vector<RequestFailure> failures = b->Failures();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].status, 403);
  EXPECT_EQ(failures[0].attempts, 1);
  EXPECT_EQ(failures[0].error.find("secret-token"), std::string::npos) << failures[0].error;
}

TEST_F(RangeReaderTest, ABrokenTokenSourceFailsTheSubmit) {
  RangeReader reader(Options(), []() -> Token { throw std::runtime_error("no credentials here"); });
  Reads reads({{0, 0, 10}});
  try {
    Submit(reader, reads);
    FAIL() << "expected std::runtime_error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no credentials here"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server_.request_count(), 0);
  EXPECT_EQ(reader.stats().Snapshot().requests, 0u);
}

// No request needs a server below this line.

TEST(RangeReaderOptionsTest, DefaultsComeFromTheTable) {
  const RangeReaderOptions o;
  EXPECT_EQ(o.max_inflight_requests, defaults::kMaxInflightRequests);
  EXPECT_EQ(o.max_inflight_requests, 64);
  EXPECT_EQ(o.max_inflight_bytes, defaults::kMaxInflightBytes);
  EXPECT_EQ(o.num_threads, defaults::NumThreads());
  EXPECT_GE(o.num_threads, 1);
  EXPECT_LE(o.num_threads, 4);
  EXPECT_EQ(o.plan.chunk_bytes, defaults::kChunkBytes);
  EXPECT_EQ(o.plan.min_chunk_bytes, defaults::kMinChunkBytes);
  EXPECT_EQ(o.plan.coalesce_gap_bytes, defaults::kCoalesceGapBytes);
  EXPECT_EQ(o.connect_timeout_s, defaults::kConnectTimeoutS);
  EXPECT_EQ(o.connect_timeout_s, 10.0);
  EXPECT_EQ(o.stall_timeout_s, defaults::kStallTimeoutS);
  EXPECT_EQ(o.stall_timeout_s, 30.0);
  EXPECT_EQ(o.recv_buffer_bytes, defaults::kRecvBufferBytes);
  EXPECT_EQ(o.retry.max_attempts, defaults::kMaxAttempts);
  EXPECT_EQ(o.retry.initial_backoff_s, defaults::kInitialBackoffS);
  EXPECT_EQ(o.retry.max_backoff_s, defaults::kMaxBackoffS);
  EXPECT_EQ(o.retry.deadline_s, defaults::kRetryDeadlineS);
  o.Validate();
}

TEST(RangeReaderOptionsTest, ValidateNamesTheBadOption) {
  auto message = [](void (*change)(RangeReaderOptions&)) -> std::string {
    RangeReaderOptions o;
    change(o);
    try {
      o.Validate();
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "(no error)";
  };
  EXPECT_NE(message([](RangeReaderOptions& o) {
              o.max_inflight_requests = 0;
            }).find("max_inflight_requests"),
            std::string::npos);
  EXPECT_NE(
      message([](RangeReaderOptions& o) { o.max_inflight_bytes = 0; }).find("max_inflight_bytes"),
      std::string::npos);
  EXPECT_NE(message([](RangeReaderOptions& o) { o.num_threads = 0; }).find("num_threads"),
            std::string::npos);
  EXPECT_NE(message([](RangeReaderOptions& o) { o.plan.chunk_bytes = 0; }).find("chunk_bytes"),
            std::string::npos);
  EXPECT_NE(
      message([](RangeReaderOptions& o) { o.plan.min_chunk_bytes = 0; }).find("min_chunk_bytes"),
      std::string::npos);
  EXPECT_NE(
      message([](RangeReaderOptions& o) { o.connect_timeout_s = 0; }).find("connect_timeout_s"),
      std::string::npos);
  EXPECT_NE(message([](RangeReaderOptions& o) { o.stall_timeout_s = -1; }).find("stall_timeout_s"),
            std::string::npos);
  EXPECT_NE(
      message([](RangeReaderOptions& o) { o.recv_buffer_bytes = 10; }).find("recv_buffer_bytes"),
      std::string::npos);
  EXPECT_NE(message([](RangeReaderOptions& o) { o.retry.max_attempts = 0; }).find("max_attempts"),
            std::string::npos);
  RangeReaderOptions bad;
  bad.num_threads = 0;
  EXPECT_THROW({ RangeReader reader(bad, {}); }, std::invalid_argument);
}

TEST(RangeReaderOptionsTest, ZeroLengthRequestsCompleteWithoutARequest) {
  RangeReaderOptions o;
  o.endpoint = "http://127.0.0.1:1";  // nothing listens; nothing is asked
  RangeReader reader(o, {});
  auto batch = reader.Submit({{kBucket, kBlob}}, {{0, 0, 0}, {0, 5, 0}}, {nullptr, nullptr});
  EXPECT_EQ(batch->num_fetches(), 0u);
  EXPECT_TRUE(batch->Finished());
  EXPECT_EQ(batch->NextCompleted(0).completed, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(reader.stats().Snapshot().requests, 0u);
}

TEST(RangeReaderOptionsTest, SubmitRejectsARangeThatOverflows) {
  RangeReaderOptions o;
  o.endpoint = "http://127.0.0.1:1";
  RangeReader reader(o, {});
  uint8_t byte = 0;
  EXPECT_THROW(reader.Submit({{kBucket, kBlob}}, {{0, UINT64_MAX, 2}}, {&byte}),
               std::invalid_argument);
  EXPECT_EQ(reader.stats().Snapshot().requests, 0u);
}

}  // namespace
}  // namespace gcsio

// What a RangeReader is set up with: bearer tokens (one cached token sent, never shown; a broken
// token source) against FakeGcsServer on 127.0.0.1, and its options (defaults from the table,
// checks naming the bad option, zero-length and overflowing ranges).
#include <gtest/gtest.h>

#include "cc/gcsio/range_reader_fixture.h"

namespace gcsio {
namespace {

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

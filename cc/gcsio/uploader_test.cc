// The uploader against FakeGcsServer on 127.0.0.1: chunked resumable uploads checked by size,
// generation and CRC-32C; many uploads in flight; a reset mid-upload resumed from the offset
// the session reports (the status query made, only the missing bytes sent again); 503 and 429
// retried; a wrong crc32c, 412 and exhausted retries failing with errors that name the object
// and carry no token; an expired session restarted; empty objects; cancellation; options.
// Payloads of many spans (the object is their concatenation): the stored bytes and CRC-32C
// equal those of one buffer, a reset resumes mid-span across span boundaries, empty and tiny
// spans.
// Assertions are on bytes, request lists and errors, not timings.
#include "cc/gcsio/uploader.h"

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/fake_gcs_server.h"
#include "cc/gcsio/upload_response.h"

namespace gcsio {
namespace {

constexpr char kBucket[] = "bkt";
constexpr char kObject[] = "ckpt/__0_abc_0.distcp";
constexpr uint64_t kChunk = 256 << 10;
constexpr uint64_t kSize = 4 * kChunk + 5;  // four full chunks and a short one
constexpr double kLimit_s = 60;             // only a broken uploader waits this long

using Action = FakeGcsServer::Action;
using Reply = FakeGcsServer::Reply;
using Request = FakeGcsServer::Request;

class UploaderTest : public ::testing::Test {
 protected:
  UploaderTest() : data_(TestPattern(kSize, 3)) {}

  UploaderOptions Options() const {
    UploaderOptions o;
    o.endpoint = server_.endpoint();
    o.chunk_bytes = kChunk;
    o.retry.initial_backoff_s = 0;
    o.retry.max_backoff_s = 0;
    o.credential_description = "test credential";
    return o;
  }

  UploadSpec Spec(const std::string& object = kObject, int64_t if_generation_match = -1) const {
    UploadSpec s;
    s.bucket = kBucket;
    s.object = object;
    s.payload = UploadPayload({UploadSpan{Bytes(0), data_.size()}});
    s.if_generation_match = if_generation_match;
    return s;
  }

  const uint8_t* Bytes(uint64_t offset) const {
    return reinterpret_cast<const uint8_t*>(data_.data()) + offset;
  }

  // data_ cut at `cuts` (ascending offsets; repeats make empty spans) into consecutive spans.
  UploadSpec SpecOfSpans(const std::vector<uint64_t>& cuts) const {
    std::vector<UploadSpan> spans;
    uint64_t from = 0;
    for (uint64_t cut : cuts) {
      EXPECT_GE(cut, from) << "cuts must ascend";
      spans.push_back(UploadSpan{Bytes(from), cut - from});
      from = cut;
    }
    spans.push_back(UploadSpan{Bytes(from), data_.size() - from});
    UploadSpec s = Spec();
    s.payload = UploadPayload(spans);
    return s;
  }

  UploadResult Run(Uploader& uploader, UploadSpec spec) {
    auto upload = uploader.Submit(std::move(spec));
    EXPECT_TRUE(upload->WaitFor(kLimit_s));
    return upload->Result();
  }

  void ExpectStored(const std::string& object, int64_t generation) const {
    std::string stored;
    int64_t g = 0;
    ASSERT_TRUE(server_.Get(kBucket, object, &stored, &g));
    EXPECT_EQ(g, generation);
    EXPECT_TRUE(stored == data_) << "stored " << stored.size() << " bytes";
  }

  // The kinds and Content-Ranges of the requests, in order.
  std::vector<std::string> Trace() const {
    std::vector<std::string> out;
    for (const Request& r : server_.requests()) {
      out.push_back(r.kind + (r.content_range.empty() ? "" : " " + r.content_range));
    }
    return out;
  }

  // The nth (0-based) request of `kind`, as a script sees it: count them.
  static bool Nth(const Request& r, const std::string& kind, int n, std::shared_ptr<int> seen) {
    if (r.kind != kind) return false;
    return (*seen)++ == n;
  }

  FakeGcsServer server_;
  const std::string data_;
};

std::string Range(uint64_t first, uint64_t last) {
  return "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
         std::to_string(kSize);
}

TEST_F(UploaderTest, UploadsInChunksAndChecksTheObject) {
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, Spec());
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.size, kSize);
  EXPECT_EQ(r.crc32c, Crc32c(data_.data(), data_.size()));
  EXPECT_EQ(r.committed, kSize);
  EXPECT_EQ(r.requests, 6);
  EXPECT_EQ(r.retries, 0);
  EXPECT_EQ(r.status_queries, 0);
  EXPECT_EQ(r.resent_bytes, 0u);
  ExpectStored(kObject, r.generation);
  EXPECT_EQ(Trace(),
            (std::vector<std::string>{"upload_start", "upload_chunk " + Range(0, kChunk - 1),
                                      "upload_chunk " + Range(kChunk, 2 * kChunk - 1),
                                      "upload_chunk " + Range(2 * kChunk, 3 * kChunk - 1),
                                      "upload_chunk " + Range(3 * kChunk, 4 * kChunk - 1),
                                      "upload_chunk " + Range(4 * kChunk, kSize - 1)}));
  const std::vector<Request> reqs = server_.requests();
  EXPECT_EQ(reqs[0].object, kObject);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[1].method, "PUT");
  EXPECT_EQ(reqs[1].body_bytes, kChunk);
  const UploadStatsSnapshot s = uploader.Stats();
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(s.bytes_sent, kSize);
  EXPECT_EQ(s.uploads_done, 1u);
}

TEST_F(UploaderTest, ManyUploadsInFlight) {
  UploaderOptions o = Options();
  o.max_inflight_requests = 8;
  Uploader uploader(o, {});
  server_.HoldUntilConcurrent(8);  // answers wait until eight session starts arrived together
  std::vector<std::shared_ptr<Upload>> uploads;
  for (int i = 0; i < 8; ++i) uploads.push_back(uploader.Submit(Spec("obj" + std::to_string(i))));
  for (auto& u : uploads) {
    ASSERT_TRUE(u->WaitFor(kLimit_s));
    const UploadResult r = u->Result();
    ASSERT_TRUE(r.ok) << r.error;
    ExpectStored(u->spec().object, r.generation);
  }
  EXPECT_EQ(server_.max_concurrent(), 8);
  EXPECT_EQ(server_.request_count(), 8 * 6);
}

TEST_F(UploaderTest, AResetMidUploadResumesFromTheCommittedOffset) {
  constexpr uint64_t kKept = 100000;  // of the second chunk, before the connection drops
  auto seen = std::make_shared<int>(0);
  server_.SetScript([seen](const Request& r) {
    Reply reply;
    if (Nth(r, "upload_chunk", 1, seen)) {
      reply.action = Action::kKeepPartAndReset;
      reply.body_bytes = kKept;
    }
    return reply;
  });
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, Spec());
  ASSERT_TRUE(r.ok) << r.error;
  ExpectStored(kObject, r.generation);
  const uint64_t resume = kChunk + kKept;
  EXPECT_EQ(Trace(), (std::vector<std::string>{
                         "upload_start", "upload_chunk " + Range(0, kChunk - 1),
                         "upload_chunk " + Range(kChunk, 2 * kChunk - 1),
                         "upload_query bytes */" + std::to_string(kSize),
                         "upload_chunk " + Range(resume, resume + kChunk - 1),
                         "upload_chunk " + Range(resume + kChunk, resume + 2 * kChunk - 1),
                         "upload_chunk " + Range(resume + 2 * kChunk, kSize - 1)}));
  EXPECT_EQ(r.status_queries, 1);
  EXPECT_EQ(r.retries, 1);
  // Sent twice: the part of the second chunk the session had not kept.
  EXPECT_EQ(r.resent_bytes, 2 * kChunk - resume);
  EXPECT_EQ(uploader.Stats().retries_by_cause.at("connection_reset"), 1u);
}

TEST_F(UploaderTest, AnObjectOfSpansIsTheirConcatenation) {
  // Cuts inside chunks, at a chunk boundary, one byte either side of one, and empty spans.
  const UploadSpec spec =
      SpecOfSpans({1, 1000, kChunk - 1, kChunk, kChunk, kChunk + 1, 3 * kChunk + 17, kSize - 1});
  EXPECT_EQ(spec.payload.span_count(), 8u);  // nine spans, one of them empty
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, spec);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.size, kSize);
  EXPECT_EQ(r.crc32c, Crc32c(data_.data(), data_.size()));
  ExpectStored(kObject, r.generation);
  // The same requests as one buffer makes: spans do not change the chunking.
  EXPECT_EQ(Trace(),
            (std::vector<std::string>{"upload_start", "upload_chunk " + Range(0, kChunk - 1),
                                      "upload_chunk " + Range(kChunk, 2 * kChunk - 1),
                                      "upload_chunk " + Range(2 * kChunk, 3 * kChunk - 1),
                                      "upload_chunk " + Range(3 * kChunk, 4 * kChunk - 1),
                                      "upload_chunk " + Range(4 * kChunk, kSize - 1)}));
  EXPECT_EQ(uploader.Stats().bytes_sent, kSize);
}

TEST_F(UploaderTest, AResetResumesMidSpanAcrossSpanBoundaries) {
  constexpr uint64_t kKept = 100000;  // of the second chunk, before the connection drops
  const uint64_t resume = kChunk + kKept;
  // The committed offset falls inside the span [kChunk + 50000, resume + 7); the resumed chunk
  // then crosses three more span boundaries (and an empty span).
  const UploadSpec spec =
      SpecOfSpans({kChunk + 50000, resume + 7, resume + 7, kChunk + 150000, 2 * kChunk + 3});
  auto seen = std::make_shared<int>(0);
  server_.SetScript([seen](const Request& r) {
    Reply reply;
    if (Nth(r, "upload_chunk", 1, seen)) {
      reply.action = Action::kKeepPartAndReset;
      reply.body_bytes = kKept;
    }
    return reply;
  });
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, spec);
  ASSERT_TRUE(r.ok) << r.error;
  // The session appends each chunk at its offset: a resumed chunk read from the wrong place in
  // the spans would store other bytes (and fail the crc32c check).
  ExpectStored(kObject, r.generation);
  EXPECT_EQ(r.crc32c, Crc32c(data_.data(), data_.size()));
  EXPECT_EQ(Trace(), (std::vector<std::string>{
                         "upload_start", "upload_chunk " + Range(0, kChunk - 1),
                         "upload_chunk " + Range(kChunk, 2 * kChunk - 1),
                         "upload_query bytes */" + std::to_string(kSize),
                         "upload_chunk " + Range(resume, resume + kChunk - 1),
                         "upload_chunk " + Range(resume + kChunk, resume + 2 * kChunk - 1),
                         "upload_chunk " + Range(resume + 2 * kChunk, kSize - 1)}));
  EXPECT_EQ(r.resent_bytes, 2 * kChunk - resume);
  const std::vector<Request> reqs = server_.requests();
  EXPECT_EQ(reqs[4].body_bytes, kChunk);  // the resumed chunk: a full chunk from `resume`
}

TEST_F(UploaderTest, ManyTinySpans) {
  std::vector<uint64_t> cuts;
  for (uint64_t at = 0, step = 1; at < kSize; at += step, step = step % 7 + 1) {
    cuts.push_back(at);
    if (step == 3) cuts.push_back(at);  // and an empty span now and then
  }
  const UploadSpec spec = SpecOfSpans(cuts);
  EXPECT_GT(spec.payload.span_count(), kSize / 5);
  EXPECT_EQ(spec.payload.size(), kSize);
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, spec);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.crc32c, Crc32c(data_.data(), data_.size()));
  ExpectStored(kObject, r.generation);
  EXPECT_EQ(server_.request_count(), 6);
}

TEST_F(UploaderTest, OnlyEmptySpansMakeAnEmptyObject) {
  UploadSpec s = Spec();
  s.payload =
      UploadPayload({UploadSpan{Bytes(0), 0}, UploadSpan{nullptr, 0}, UploadSpan{Bytes(9), 0}});
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, s);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.size, 0u);
  EXPECT_EQ(r.crc32c, 0u);
  std::string stored = "x";
  int64_t g = 0;
  ASSERT_TRUE(server_.Get(kBucket, kObject, &stored, &g));
  EXPECT_EQ(stored, "");
  EXPECT_EQ(Trace(), (std::vector<std::string>{"upload_start", "upload_query bytes */0"}));
}

TEST_F(UploaderTest, Http503And429AreRetried) {
  auto seen = std::make_shared<int>(0);
  server_.SetScript([seen](const Request& r) {
    Reply reply;
    if (r.kind == "upload_chunk" && (*seen)++ < 2) {
      reply.action = Action::kStatus;
      reply.status = *seen == 1 ? 503 : 429;
    }
    return reply;
  });
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, Spec());
  ASSERT_TRUE(r.ok) << r.error;
  ExpectStored(kObject, r.generation);
  EXPECT_EQ(r.retries, 2);
  EXPECT_EQ(r.status_queries, 2);
  const std::vector<std::string> t = Trace();
  ASSERT_GE(t.size(), 6u);
  EXPECT_EQ(t[1], "upload_chunk " + Range(0, kChunk - 1));  // 503
  EXPECT_EQ(t[2], "upload_query bytes */" + std::to_string(kSize));
  EXPECT_EQ(t[3], "upload_chunk " + Range(0, kChunk - 1));  // 429: nothing was kept
  EXPECT_EQ(t[4], "upload_query bytes */" + std::to_string(kSize));
  EXPECT_EQ(t[5], "upload_chunk " + Range(0, kChunk - 1));
  const UploadStatsSnapshot s = uploader.Stats();
  EXPECT_EQ(s.retries_by_cause.at("http_503"), 1u);
  EXPECT_EQ(s.retries_by_cause.at("http_429"), 1u);
}

TEST_F(UploaderTest, ACrc32cMismatchFailsNamingTheObject) {
  server_.SetScript([](const Request& r) {
    Reply reply;
    if (r.kind == "upload_chunk" &&
        r.content_range.find("-" + std::to_string(kSize - 1)) != std::string::npos) {
      reply.action = Action::kWrongCrc32c;
    }
    return reply;
  });
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, Spec());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.cause, kCrc32cMismatch);
  EXPECT_NE(r.error.find("crc32c mismatch for uploaded gs://bkt/ckpt/__0_abc_0.distcp generation "
                         "1000"),
            std::string::npos)
      << r.error;
  EXPECT_EQ(uploader.Stats().failures, 1u);
}

TEST_F(UploaderTest, PreconditionFailureIsItsOwnError) {
  server_.Put(kBucket, kObject, "old", 5);
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, Spec(kObject, 0));
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.cause, kPreconditionFailed);
  EXPECT_EQ(r.status, 412);
  EXPECT_NE(r.error.find("ifGenerationMatch=0 does not hold for gs://bkt/" + std::string(kObject)),
            std::string::npos)
      << r.error;
  EXPECT_EQ(server_.request_count(), 1);                      // not retried
  const UploadResult over = Run(uploader, Spec(kObject, 5));  // the generation it holds: fine
  ASSERT_TRUE(over.ok) << over.error;
  ExpectStored(kObject, over.generation);
}

TEST_F(UploaderTest, AnExpiredSessionRestartsTheUpload) {
  auto seen = std::make_shared<int>(0);
  server_.SetScript([seen](const Request& r) {
    Reply reply;
    if (Nth(r, "upload_chunk", 2, seen)) {
      reply.action = Action::kExpireSession;
      reply.status = 410;
    }
    return reply;
  });
  Uploader uploader(Options(), {});
  const UploadResult r = Run(uploader, Spec());
  ASSERT_TRUE(r.ok) << r.error;
  ExpectStored(kObject, r.generation);
  EXPECT_EQ(r.restarts, 1);
  const std::vector<std::string> t = Trace();
  ASSERT_EQ(t.size(), 10u);
  EXPECT_EQ(t[3], "upload_chunk " + Range(2 * kChunk, 3 * kChunk - 1));  // 410
  EXPECT_EQ(t[4], "upload_start");
  EXPECT_EQ(t[5], "upload_chunk " + Range(0, kChunk - 1));
  const std::vector<Request> reqs = server_.requests();
  EXPECT_NE(reqs[5].upload_id, reqs[1].upload_id);  // a new session
}

// An endpoint that loses the session on every upload's last chunk (as a store that cannot
// commit the object would): each restart is one more session, and the sessions count against
// the policy's max_attempts, so the upload fails naming the object and the last answer.
TEST_F(UploaderTest, SessionRestartsStopAtMaxAttempts) {
  server_.SetScript([](const Request& r) {
    Reply reply;
    if (r.kind == "upload_chunk" &&
        r.content_range.find("-" + std::to_string(kSize - 1)) != std::string::npos) {
      reply.action = Action::kExpireSession;
      reply.status = 410;
    }
    return reply;
  });
  UploaderOptions o = Options();
  o.retry.max_attempts = 3;
  Uploader uploader(o, {});
  const UploadResult r = Run(uploader, Spec());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.cause, kSessionExpired);
  EXPECT_EQ(r.status, 410);
  EXPECT_EQ(r.restarts, 2);  // three sessions in all
  int starts = 0;
  for (const Request& q : server_.requests()) starts += q.kind == "upload_start";
  EXPECT_EQ(starts, 3);
  EXPECT_NE(r.error.find("upload of gs://bkt/" + std::string(kObject) + " failed: HTTP 410"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("(3 upload session(s) started, max_attempts 3)"), std::string::npos)
      << r.error;
}

// The same endpoint under a policy of many attempts: the retry deadline, counted from the
// upload's first request, ends the restarts.
TEST_F(UploaderTest, SessionRestartsStopAtTheDeadline) {
  server_.SetScript([](const Request& r) {
    Reply reply;
    if (r.kind == "upload_chunk" &&
        r.content_range.find("-" + std::to_string(kSize - 1)) != std::string::npos) {
      reply.action = Action::kExpireSession;
      reply.status = 404;
    }
    return reply;
  });
  UploaderOptions o = Options();
  o.retry.max_attempts = 1000000;
  o.retry.deadline_s = 0.5;
  Uploader uploader(o, {});
  const UploadResult r = Run(uploader, Spec());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.cause, kSessionExpired);
  EXPECT_GE(r.restarts, 1);
  EXPECT_LT(r.restarts, 1000000);
  EXPECT_NE(r.error.find("retry deadline of 0.5 s from the upload's first request reached"),
            std::string::npos)
      << r.error;
}

TEST_F(UploaderTest, GivesUpNamingOffsetAndAttemptsWithoutTheToken) {
  auto seen = std::make_shared<int>(0);
  server_.SetScript([seen](const Request& r) {
    Reply reply;
    if (r.kind == "upload_chunk" && (*seen)++ >= 1) {  // the first chunk lands, then only 503s
      reply.action = Action::kStatus;
      reply.status = 503;
      reply.body = "backend down; you sent Authorization: Bearer secret-token-xyz";
    }
    return reply;
  });
  UploaderOptions o = Options();
  o.retry.max_attempts = 3;
  Uploader uploader(o, [] { return Token{"secret-token-xyz", WallClockSeconds() + 3600}; });
  const UploadResult r = Run(uploader, Spec());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.cause, "http_503");
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.committed, kChunk);
  EXPECT_EQ(r.attempts, 3);
  EXPECT_NE(r.error.find("upload of gs://bkt/" + std::string(kObject) + " failed: HTTP 503"),
            std::string::npos)
      << r.error;
  EXPECT_NE(r.error.find("262,144 of 1,048,581 bytes committed, offset reached 262,144; 3 "
                         "attempt(s) of the last request"),
            std::string::npos)
      << r.error;
  EXPECT_EQ(r.error.find("secret-token-xyz"), std::string::npos) << r.error;
  for (const Request& q : server_.requests()) {
    EXPECT_EQ(q.authorization, "Bearer secret-token-xyz");
  }
}

TEST_F(UploaderTest, EmptyObject) {
  Uploader uploader(Options(), {});
  UploadSpec s = Spec();
  s.payload = UploadPayload();
  const UploadResult r = Run(uploader, s);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.crc32c, 0u);
  std::string stored = "x";
  int64_t g = 0;
  ASSERT_TRUE(server_.Get(kBucket, kObject, &stored, &g));
  EXPECT_EQ(stored, "");
  EXPECT_EQ(Trace(), (std::vector<std::string>{"upload_start", "upload_query bytes */0"}));
}

TEST_F(UploaderTest, CancelStopsQueuedAndRunningUploads) {
  UploaderOptions o = Options();
  o.max_inflight_requests = 1;
  Uploader uploader(o, {});
  server_.HoldUntilConcurrent(2);  // the first request is held: nothing else can run
  auto running = uploader.Submit(Spec("a"));
  auto queued = uploader.Submit(Spec("b"));
  ASSERT_TRUE(server_.WaitForRequests(1, kLimit_s));
  uploader.Cancel(queued);
  uploader.Cancel(running);
  EXPECT_TRUE(queued->Finished());
  EXPECT_TRUE(running->Finished());
  EXPECT_EQ(queued->Result().cause, "cancelled");
  EXPECT_EQ(running->Result().cause, "cancelled");
  EXPECT_FALSE(queued->Result().ok);
  EXPECT_EQ(uploader.Stats().failures, 0u);
}

TEST_F(UploaderTest, OptionsAreChecked) {
  UploaderOptions o = Options();
  o.chunk_bytes = 1000;
  EXPECT_THROW(Uploader(o, {}), std::invalid_argument);
  o = Options();
  o.max_inflight_requests = 0;
  EXPECT_THROW(Uploader(o, {}), std::invalid_argument);
  Uploader ok(Options(), {});
  UploadSpec s = Spec();
  s.bucket = "";
  EXPECT_THROW(ok.Submit(s), std::invalid_argument);
  EXPECT_EQ(UploaderOptions().chunk_bytes, defaults::kUploadChunkBytes);
  EXPECT_EQ(UploaderOptions().max_inflight_requests, defaults::kMaxInflightUploads);
}

}  // namespace
}  // namespace gcsio

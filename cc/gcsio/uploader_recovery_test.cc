// The Uploader's recovery against FakeGcsServer on 127.0.0.1: a reset mid-upload resumed from the
// offset the session reports (the status query made, only the missing bytes sent again, also
// mid-span); 503 and 429 retried; an expired session restarted, restarts bounded by attempts and
// deadline; a wrong crc32c, 412 and exhausted retries failing with errors that name the object
// and carry no token. Assertions are on bytes, request lists and errors, not timings.
#include <gtest/gtest.h>

#include "cc/gcsio/uploader_fixture.h"

namespace gcsio {
namespace {

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

}  // namespace
}  // namespace gcsio

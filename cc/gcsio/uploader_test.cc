// The Uploader against FakeGcsServer on 127.0.0.1: chunked resumable uploads checked by size,
// generation and CRC-32C; many uploads in flight; payloads of many spans (the object is their
// concatenation; tiny and empty spans); empty objects; cancellation; options.
// Assertions are on bytes, request lists and errors, not timings.
#include <gtest/gtest.h>

#include "cc/gcsio/uploader_fixture.h"

namespace gcsio {
namespace {

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

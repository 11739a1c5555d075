// One UploadTransfer against FakeGcsServer, driven by curl_easy_perform: the session start (POST
// with the object name and X-Upload-Content-Length; Location back), a chunk PUT read from caller
// memory (Content-Range, byte count; 308 + Range back), the status query (bytes */total) and the
// final chunk (200 + the object resource); handle reuse across request kinds.
#include "cc/gcsio/upload_transfer.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cc/gcsio/fake_gcs_server.h"
#include "cc/gcsio/upload_response.h"

namespace gcsio {
namespace {

constexpr uint64_t kTotal = 1000;

UploadAnswer Perform(UploadTransfer& t, const UploadRequestSetup& setup) {
  t.Begin(setup);
  return t.Finish(curl_easy_perform(t.easy()));
}

TEST(UploadTransferTest, StartChunkQueryAndFinalChunkOnOneHandle) {
  FakeGcsServer server;
  std::string data(kTotal, '\0');
  for (uint64_t i = 0; i < kTotal; ++i) data[i] = static_cast<char>(i * 7);
  const UploadPayload payload({UploadSpan{reinterpret_cast<const uint8_t*>(data.data()), kTotal}});
  UploadTransfer t;

  UploadRequestSetup start;
  start.step = UploadStep::kStart;
  start.url = server.endpoint() + "/upload/storage/v1/b/bkt/o?uploadType=resumable&name=a%2Fb";
  start.bearer_token = "tok";
  start.total = kTotal;
  const UploadAnswer started = Perform(t, start);
  ASSERT_EQ(started.code, CURLE_OK) << started.transport_error;
  EXPECT_EQ(started.status, 200);
  ASSERT_FALSE(started.location.empty());

  UploadRequestSetup chunk;
  chunk.step = UploadStep::kChunk;
  chunk.url = started.location;
  chunk.total = kTotal;
  chunk.payload = &payload;
  chunk.first = 0;
  chunk.length = 600;
  const UploadAnswer first = Perform(t, chunk);
  ASSERT_EQ(first.code, CURLE_OK) << first.transport_error;
  EXPECT_EQ(first.status, 308);
  EXPECT_EQ(first.range, "bytes=0-599");
  EXPECT_EQ(first.sent, 600u);
  EXPECT_EQ(ParseCommittedRange(first.range), 600);

  UploadRequestSetup query = chunk;
  query.step = UploadStep::kQuery;
  const UploadAnswer asked = Perform(t, query);
  EXPECT_EQ(asked.status, 308);
  EXPECT_EQ(asked.range, "bytes=0-599");
  EXPECT_EQ(asked.sent, 0u);

  chunk.first = 600;
  chunk.length = 400;
  const UploadAnswer last = Perform(t, chunk);
  EXPECT_EQ(last.status, 200);
  const ObjectResource r = ParseObjectResource(last.body);
  ASSERT_TRUE(r.valid) << last.body;
  EXPECT_EQ(r.size, kTotal);

  const std::vector<FakeGcsServer::Request> reqs = server.requests();
  ASSERT_EQ(reqs.size(), 4u);
  EXPECT_EQ(reqs[0].method, "POST");
  EXPECT_EQ(reqs[0].object, "a/b");
  EXPECT_EQ(reqs[0].authorization, "Bearer tok");
  EXPECT_EQ(reqs[1].content_range, "bytes 0-599/1000");
  EXPECT_EQ(reqs[1].body_bytes, 600u);
  EXPECT_EQ(reqs[1].authorization, "");
  EXPECT_EQ(reqs[2].content_range, "bytes */1000");
  EXPECT_EQ(reqs[2].body_bytes, 0u);
  EXPECT_EQ(reqs[3].content_range, "bytes 600-999/1000");
  std::string stored;
  int64_t generation = 0;
  ASSERT_TRUE(server.Get("bkt", "a/b", &stored, &generation));
  EXPECT_EQ(stored, data);
  EXPECT_EQ(r.generation, generation);
}

TEST(UploadTransferTest, ATransportErrorIsReported) {
  UploadTransfer t;
  UploadRequestSetup start;
  start.url = "http://127.0.0.1:1/upload/storage/v1/b/bkt/o?uploadType=resumable&name=x";
  const UploadAnswer a = Perform(t, start);
  EXPECT_EQ(a.code, CURLE_COULDNT_CONNECT);
  EXPECT_EQ(a.status, 0);
}

}  // namespace
}  // namespace gcsio

// What the Uploader tests share (test-only): a FakeGcsServer on 127.0.0.1, uploader options with
// small chunks and no backoff, upload specs of one buffer or of spans of it, and the request trace.
#ifndef CC_GCSIO_UPLOADER_FIXTURE_H_
#define CC_GCSIO_UPLOADER_FIXTURE_H_

#include <gtest/gtest.h>

#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/fake_gcs_server.h"
#include "cc/gcsio/upload_response.h"
#include "cc/gcsio/uploader.h"

namespace gcsio {

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

inline std::string Range(uint64_t first, uint64_t last) {
  return "bytes " + std::to_string(first) + "-" + std::to_string(last) + "/" +
         std::to_string(kSize);
}

}  // namespace gcsio

#endif  // CC_GCSIO_UPLOADER_FIXTURE_H_

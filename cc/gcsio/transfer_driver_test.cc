// One TransferDriver running both request kinds at once against FakeGcsServer on 127.0.0.1:
// ranged GETs of a Batch and the requests of a resumable Upload share one loop, one request
// budget, one retry path and one stats record; stopping drops the queued work of both kinds.
// Assertions are on bytes, request counts, causes and errors, not timings.
#include "cc/gcsio/transfer_driver.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "cc/gcsio/batch.h"
#include "cc/gcsio/fake_gcs_server.h"
#include "cc/gcsio/range_kind.h"
#include "cc/gcsio/range_plan.h"
#include "cc/gcsio/upload_kind.h"
#include "cc/gcsio/uploader.h"

namespace gcsio {
namespace {

constexpr char kBucket[] = "bkt";
constexpr char kBlob[] = "dir/blob.distcp";
constexpr char kObject[] = "ckpt/__0_0.distcp";
constexpr uint64_t kBlobBytes = 64 << 10;
constexpr uint64_t kPiece = 4096;
constexpr uint64_t kChunk = 256 << 10;
constexpr uint64_t kUploadBytes = 2 * kChunk + 7;  // two full chunks and a short one
constexpr double kLimit_s = 60;                    // only a broken driver waits this long

using Action = FakeGcsServer::Action;
using Reply = FakeGcsServer::Reply;
using Request = FakeGcsServer::Request;

// A driver with one loop and both kinds on it; stopped before the kinds go.
struct Rig {
  Rig(const std::string& endpoint, int max_inflight_requests)
      : driver(Options(max_inflight_requests), {}),
        gets(RangeKindOptions{endpoint, 10, 256 << 10, "test credential"}, &driver.stats()),
        upload_options(UploadOptions(endpoint)),
        puts(upload_options, &driver.stats()) {}
  ~Rig() { driver.Stop(); }

  static DriverOptions Options(int max_inflight_requests) {
    DriverOptions o;
    o.max_inflight_requests = max_inflight_requests;
    o.max_inflight_bytes = 64 << 20;
    o.stall_timeout_s = 3600;
    o.retry.initial_backoff_s = 0;
    o.retry.max_backoff_s = 0;
    return o;
  }
  static UploaderOptions UploadOptions(const std::string& endpoint) {
    UploaderOptions o;
    o.endpoint = endpoint;
    o.chunk_bytes = kChunk;
    return o;
  }

  TransferDriver driver;
  RangeKind gets;
  const UploaderOptions upload_options;
  UploadKind puts;
};

class TransferDriverTest : public ::testing::Test {
 protected:
  TransferDriverTest() : blob_(TestPattern(kBlobBytes, 1)), data_(TestPattern(kUploadBytes, 2)) {
    server_.Put(kBucket, kBlob, blob_, 77);
    for (int i = 0; i < 4; ++i) {
      ranges_.push_back({0, static_cast<uint64_t>(i) * 2 * kPiece, kPiece});
      bufs_.emplace_back(kPiece, 0xEE);
    }
    for (auto& b : bufs_) dests_.push_back(b.data());
  }

  // Queues the four GETs and the upload together, the upload's job last.
  void SubmitBoth(Rig& rig) {
    PlanOptions plan;
    plan.chunk_bytes = kPiece;
    plan.coalesce_gap_bytes = 0;
    plan.target_fetches = 0;
    batch_ = std::make_shared<Batch>(std::vector<ObjectRef>{{kBucket, kBlob}}, ranges_, dests_,
                                     PlanFetches(ranges_, plan));
    UploadSpec spec;
    spec.bucket = kBucket;
    spec.object = kObject;
    spec.payload =
        UploadPayload({UploadSpan{reinterpret_cast<const uint8_t*>(data_.data()), data_.size()}});
    upload_ = std::make_shared<Upload>(std::move(spec));
    std::vector<DriverJob> jobs = rig.gets.Jobs(batch_);
    jobs.push_back(rig.puts.Job(upload_));
    rig.driver.Submit(std::move(jobs));
  }

  void ExpectAllDone() {
    ASSERT_TRUE(batch_->WaitFinishedFor(kLimit_s));
    ASSERT_TRUE(upload_->WaitFor(kLimit_s));
    EXPECT_TRUE(batch_->Failures().empty());
    for (size_t i = 0; i < ranges_.size(); ++i) {
      EXPECT_TRUE(std::string(bufs_[i].begin(), bufs_[i].end()) ==
                  blob_.substr(ranges_[i].offset, ranges_[i].length))
          << "range " << i;
    }
    const UploadResult r = upload_->Result();
    EXPECT_TRUE(r.ok) << r.error;
    std::string stored;
    int64_t generation = 0;
    ASSERT_TRUE(server_.Get(kBucket, kObject, &stored, &generation));
    EXPECT_TRUE(stored == data_) << "stored " << stored.size() << " bytes";
    EXPECT_EQ(generation, r.generation);
  }

  FakeGcsServer server_;
  const std::string blob_;
  const std::string data_;
  std::vector<RangeSpec> ranges_;
  std::vector<std::vector<uint8_t>> bufs_;
  std::vector<uint8_t*> dests_;
  std::shared_ptr<Batch> batch_;
  std::shared_ptr<Upload> upload_;
};

TEST_F(TransferDriverTest, GetsAndUploadRequestsShareOneLoopAndOneStatsRecord) {
  Rig rig(server_.endpoint(), 8);
  SubmitBoth(rig);
  ExpectAllDone();
  const StatsSnapshot s = rig.driver.stats().Snapshot();
  // 4 GETs; the upload: session start and three chunk PUTs.
  EXPECT_EQ(s.requests, 8u);
  EXPECT_EQ(server_.request_count(), 8);
  EXPECT_EQ(s.bytes_received, 4 * kPiece);
  EXPECT_EQ(s.bytes_delivered, 4 * kPiece);
  EXPECT_EQ(s.bytes_sent, kUploadBytes);
  EXPECT_EQ(s.uploads_done, 1u);
  EXPECT_EQ(s.retries, 0u);
  EXPECT_EQ(s.failures, 0u);
  EXPECT_EQ(s.connections_opened + s.connections_reused, 8u);
}

TEST_F(TransferDriverTest, OneRequestAtATimeAcrossBothKinds) {
  Rig rig(server_.endpoint(), 1);
  SubmitBoth(rig);
  ExpectAllDone();
  EXPECT_EQ(server_.max_concurrent(), 1);
  std::vector<std::string> kinds;
  for (const Request& r : server_.requests()) kinds.push_back(r.kind);
  // Queue order; each of the upload's next steps goes first (kNext: a new step, not a retry).
  EXPECT_EQ(kinds, (std::vector<std::string>{"media", "media", "media", "media", "upload_start",
                                             "upload_chunk", "upload_chunk", "upload_chunk"}));
}

TEST_F(TransferDriverTest, BothKindsRetryThroughOnePath) {
  // The first GET and the first chunk PUT answer 503 once each.
  auto failed = std::make_shared<std::set<std::string>>();
  server_.SetScript([failed](const Request& r) {
    Reply reply;
    if ((r.kind == "media" || r.kind == "upload_chunk") && failed->insert(r.kind).second) {
      reply.action = Action::kStatus;
      reply.status = 503;
      reply.body = "backend busy";
    }
    return reply;
  });
  Rig rig(server_.endpoint(), 1);
  SubmitBoth(rig);
  ExpectAllDone();
  const StatsSnapshot s = rig.driver.stats().Snapshot();
  // One 503 of each kind: the GET asks again, the upload asks the session what it holds first.
  EXPECT_EQ(s.retries_by_cause, (std::map<std::string, uint64_t>{{"http_503", 2}}));
  EXPECT_EQ(s.status_queries, 1u);
  EXPECT_EQ(upload_->Result().retries, 1);
  EXPECT_EQ(s.requests, 8u + 3);  // a second GET, a status query, the first chunk again
  EXPECT_EQ(s.failures, 0u);
}

TEST_F(TransferDriverTest, StopDropsTheQueuedWorkOfBothKinds) {
  server_.SetScript([](const Request& r) {
    Reply reply;
    if (r.index == 0) {
      reply.action = Action::kHang;  // the first GET holds the only request slot
      reply.body_bytes = 10;
    }
    return reply;
  });
  Rig rig(server_.endpoint(), 1);
  SubmitBoth(rig);
  ASSERT_TRUE(server_.WaitForRequests(1, kLimit_s));
  rig.driver.Stop();
  ASSERT_TRUE(batch_->WaitFinishedFor(kLimit_s));
  EXPECT_TRUE(batch_->Failures().empty());  // dropped, not failed
  ASSERT_TRUE(upload_->WaitFor(kLimit_s));
  const UploadResult r = upload_->Result();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.cause, "cancelled");
  EXPECT_NE(r.error.find("the uploader was closed"), std::string::npos) << r.error;
  EXPECT_EQ(server_.request_count(), 1);
  EXPECT_THROW(rig.driver.Submit({}), std::runtime_error);
  server_.ReleaseHung();
}

}  // namespace
}  // namespace gcsio

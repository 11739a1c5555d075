// What the RangeReader tests share (test-only): a FakeGcsServer on 127.0.0.1 holding one blob,
// reader options for small fetches and no backoff, destinations marked untouched, and polling.
#ifndef CC_GCSIO_RANGE_READER_FIXTURE_H_
#define CC_GCSIO_RANGE_READER_FIXTURE_H_

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
#include "cc/gcsio/range_reader.h"

namespace gcsio {

constexpr char kBucket[] = "bkt";
constexpr char kBlob[] = "dir/blob.distcp";
constexpr uint64_t kBlobBytes = 256 << 10;
constexpr uint64_t kPiece = 4096;
constexpr double kLimit_s = 60;  // only a broken reader waits this long

using Action = FakeGcsServer::Action;
using Reply = FakeGcsServer::Reply;

// Polls `done` until it holds or kLimit_s passes (a broken test).
template <typename F>
inline bool Eventually(F done) {
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

}  // namespace gcsio

#endif  // CC_GCSIO_RANGE_READER_FIXTURE_H_

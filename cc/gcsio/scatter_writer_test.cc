// ScatterWriter: body bytes land in every destination that covers them, whatever the slicing of
// the stream, resumed writes continue where the last attempt stopped, and hole bytes go nowhere.
#include "cc/gcsio/scatter_writer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cc/gcsio/crc32c.h"
#include "cc/gcsio/range_plan.h"

namespace gcsio {
namespace {

constexpr uint8_t kUntouched = 0xEE;
constexpr size_t kGuard = 8;  // bytes after each destination that must stay untouched

// A 100-byte fetch serving three requests: request 0 takes body [0, 40); request 1 takes
// [30, 80) into its destination at offset 10 (overlapping request 0); [80, 90) is a hole;
// request 2 takes [90, 100).
Fetch ThreeRequestFetch() {
  Fetch f;
  f.object_id = 0;
  f.offset = 1000;
  f.length = 100;
  f.pieces = {{0, 0, 0, 40}, {1, 30, 10, 50}, {2, 90, 0, 10}};
  return f;
}

struct Destinations {
  Destinations()
      : bufs{std::vector<uint8_t>(40 + kGuard, kUntouched),
             std::vector<uint8_t>(60 + kGuard, kUntouched),
             std::vector<uint8_t>(10 + kGuard, kUntouched)} {
    for (auto& b : bufs) ptrs.push_back(b.data());
  }
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<uint8_t*> ptrs;
};

uint8_t BodyByte(uint64_t pos) { return static_cast<uint8_t>(pos * 7 + 3); }

std::vector<uint8_t> Body(uint64_t n) {
  std::vector<uint8_t> body(n);
  for (uint64_t i = 0; i < n; ++i) body[i] = BodyByte(i);
  return body;
}

// Checks the destinations hold what the fetch's first `written` body bytes put there.
void ExpectWritten(const Destinations& d, uint64_t written) {
  for (uint64_t i = 0; i < 40 + kGuard; ++i) {
    EXPECT_EQ(d.bufs[0][i], i < 40 && i < written ? BodyByte(i) : kUntouched) << "request 0 @" << i;
  }
  for (uint64_t i = 0; i < 60 + kGuard; ++i) {
    const uint64_t body_pos = 30 + (i - 10);
    const bool covered = i >= 10 && i < 60 && body_pos < written;
    EXPECT_EQ(d.bufs[1][i], covered ? BodyByte(body_pos) : kUntouched) << "request 1 @" << i;
  }
  for (uint64_t i = 0; i < 10 + kGuard; ++i) {
    const bool covered = i < 10 && 90 + i < written;
    EXPECT_EQ(d.bufs[2][i], covered ? BodyByte(90 + i) : kUntouched) << "request 2 @" << i;
  }
}

// The three-request fetch, its destinations, a writer over them and the fetch's body.
class ScatterWriterThreeRequestsTest : public ::testing::Test {
 protected:
  const Fetch f = ThreeRequestFetch();
  Destinations d;
  ScatterWriter writer{&f, &d.ptrs};
  const std::vector<uint8_t> body = Body(f.length);
};

TEST_F(ScatterWriterThreeRequestsTest, WritesEachPieceWhereItBelongs) {
  writer.Write(0, body.data(), body.size());
  ExpectWritten(d, 100);
}

TEST_F(ScatterWriterThreeRequestsTest, OneByteAtATimeGivesTheSameBytes) {
  for (uint64_t i = 0; i < f.length; ++i) writer.Write(i, body.data() + i, 1);
  ExpectWritten(d, 100);
}

TEST_F(ScatterWriterThreeRequestsTest, ResumedWritesContinueWhereTheLastAttemptStopped) {
  writer.Write(0, body.data(), 35);  // the first attempt ends inside the overlap
  ExpectWritten(d, 35);
  writer.Write(35, body.data() + 35, 50);  // a retry asks for the rest
  ExpectWritten(d, 85);
  writer.Write(85, body.data() + 85, 15);
  ExpectWritten(d, 100);
}

TEST_F(ScatterWriterThreeRequestsTest, HoleBytesGoNowhere) {
  writer.Write(80, body.data() + 80, 10);  // only the hole
  ExpectWritten(d, 0);
}

TEST(ScatterWriterTest, SplitRequestLandsAtItsDestinationOffsets) {
  // One request of 30 bytes split over three fetches of 10 (as PlanFetches splits long ranges).
  PlanOptions o;
  o.chunk_bytes = 10;
  o.coalesce_gap_bytes = 0;
  o.target_fetches = 0;
  const Plan plan = PlanFetches({{0, 500, 30}}, o);
  ASSERT_EQ(plan.fetches.size(), 3u);
  std::vector<uint8_t> dest(30 + kGuard, kUntouched);
  std::vector<uint8_t*> dests{dest.data()};
  for (const Fetch& f : plan.fetches) {
    ScatterWriter writer(&f, &dests);
    std::vector<uint8_t> body(f.length);
    for (uint64_t i = 0; i < f.length; ++i) body[i] = BodyByte(f.offset - 500 + i);
    writer.Write(0, body.data(), body.size());
  }
  for (uint64_t i = 0; i < 30 + kGuard; ++i) {
    EXPECT_EQ(dest[i], i < 30 ? BodyByte(i) : kUntouched) << "@" << i;
  }
}

// A 300-byte object in blocks of 100: every block is checked as it streams in; a bad block
// stops the writer, and the retry starts at that block's first byte.
TEST(ScatterWriterTest, ChecksBlocksAndResumesAtABadBlock) {
  std::vector<uint8_t> object(300);
  for (size_t i = 0; i < object.size(); ++i) object[i] = static_cast<uint8_t>(i * 7 + 3);
  BlockSums sums;
  sums.size = 300;
  sums.starts = {0, 100, 200};
  for (uint64_t s : sums.starts) sums.crcs.push_back(Crc32c(object.data() + s, 100));
  Fetch f;
  f.offset = 0;
  f.length = 300;
  f.pieces = {{0, 50, 0, 200}};  // the request wants bytes 50-249
  std::vector<uint8_t> dest(200, kUntouched);
  std::vector<uint8_t*> dests = {dest.data()};

  ScatterWriter good(&f, &dests, &sums);
  for (size_t pos = 0; pos < 300; pos += 37) {
    const size_t n = std::min<size_t>(37, 300 - pos);
    ASSERT_TRUE(good.Write(pos, object.data() + pos, n)) << "at " << pos;
  }
  EXPECT_EQ(std::vector<uint8_t>(object.begin() + 50, object.begin() + 250), dest);

  std::vector<uint8_t> flipped(object);
  flipped[150] ^= 0x01;
  ScatterWriter bad(&f, &dests, &sums);
  ASSERT_TRUE(bad.Write(0, flipped.data(), 120));
  EXPECT_FALSE(bad.Write(120, flipped.data() + 120, 100));
  EXPECT_EQ(bad.mismatch().offset, 100u);
  EXPECT_EQ(bad.mismatch().length, 100u);
  EXPECT_EQ(bad.mismatch().expected, sums.crcs[1]);
  EXPECT_EQ(bad.mismatch().computed, Crc32c(flipped.data() + 100, 100));
  EXPECT_EQ(bad.Resume(120), 100u);  // the bad block again, whole
  ASSERT_TRUE(bad.Write(100, object.data() + 100, 200));
  EXPECT_EQ(std::vector<uint8_t>(object.begin() + 50, object.begin() + 250), dest);

  // A bad block that arrived in one piece from the fetch's start: the retry rewrites it too.
  std::vector<uint8_t> first(object);
  first[60] ^= 0x01;
  ScatterWriter again(&f, &dests, &sums);
  EXPECT_FALSE(again.Write(0, first.data(), 300));
  EXPECT_EQ(again.Resume(0), 0u);
  ASSERT_TRUE(again.Write(0, object.data(), 300));
  EXPECT_EQ(std::vector<uint8_t>(object.begin() + 50, object.begin() + 250), dest);

  // A retry after a dropped connection mid-block continues where the bytes stopped.
  ScatterWriter cut(&f, &dests, &sums);
  ASSERT_TRUE(cut.Write(0, object.data(), 130));
  EXPECT_EQ(cut.Resume(130), 130u);
  ASSERT_TRUE(cut.Write(130, object.data() + 130, 170));
}

}  // namespace
}  // namespace gcsio

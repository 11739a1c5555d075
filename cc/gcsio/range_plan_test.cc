// Range planning: coalescing, splitting, scattering; zero-length, overlapping, unsorted and
// > 4 GiB ranges; plus a randomized check that plan + ScatterWriter reproduce every range.
#include "cc/gcsio/range_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "cc/gcsio/scatter_writer.h"

namespace gcsio {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kGiB = 1ULL << 30;

Plan MakePlan(const std::vector<RangeSpec>& ranges, uint64_t chunk, uint64_t gap) {
  PlanOptions o;
  o.chunk_bytes = chunk;
  o.coalesce_gap_bytes = gap;
  return PlanFetches(ranges, o);
}

TEST(RangePlanTest, SingleRange) {
  Plan p = MakePlan({{0, 100, 50}}, kMiB, 0);
  ASSERT_EQ(p.fetches.size(), 1u);
  EXPECT_EQ(p.fetches[0].offset, 100u);
  EXPECT_EQ(p.fetches[0].length, 50u);
  ASSERT_EQ(p.fetches[0].pieces.size(), 1u);
  EXPECT_EQ(p.fetches[0].pieces[0].fetch_offset, 0u);
  EXPECT_EQ(p.fetches[0].pieces[0].dest_offset, 0u);
  EXPECT_EQ(p.fetches[0].pieces[0].length, 50u);
  EXPECT_EQ(p.pieces_per_request[0], 1u);
}

TEST(RangePlanTest, CoalescesWithinGap) {
  // Gap of exactly coalesce_gap_bytes joins; one byte more does not.
  Plan joined = MakePlan({{0, 0, 10}, {0, 20, 10}}, kMiB, 10);
  ASSERT_EQ(joined.fetches.size(), 1u);
  EXPECT_EQ(joined.fetches[0].offset, 0u);
  EXPECT_EQ(joined.fetches[0].length, 30u);
  EXPECT_EQ(joined.fetches[0].pieces[1].fetch_offset, 20u);
  Plan apart = MakePlan({{0, 0, 10}, {0, 21, 10}}, kMiB, 10);
  ASSERT_EQ(apart.fetches.size(), 2u);
  // Adjacent ranges always join, even with gap 0.
  Plan adjacent = MakePlan({{0, 0, 10}, {0, 10, 10}}, kMiB, 0);
  ASSERT_EQ(adjacent.fetches.size(), 1u);
  EXPECT_EQ(adjacent.fetches[0].length, 20u);
}

TEST(RangePlanTest, NeverCoalescesAcrossObjects) {
  Plan p = MakePlan({{0, 0, 10}, {1, 10, 10}}, kMiB, kMiB);
  ASSERT_EQ(p.fetches.size(), 2u);
  EXPECT_TRUE(p.fetches[0].object_id != p.fetches[1].object_id);
}

TEST(RangePlanTest, SplitsLargeRangesEvenly) {
  Plan p = MakePlan({{0, 7, 10 * kMiB}}, 4 * kMiB, 0);
  ASSERT_EQ(p.fetches.size(), 3u);
  uint64_t next = 7, dest = 0;
  for (const Fetch& f : p.fetches) {
    EXPECT_EQ(f.offset, next);
    EXPECT_TRUE(f.length <= 4 * kMiB);
    EXPECT_TRUE(f.length + 2 >= 10 * kMiB / 3);  // near-equal parts, not 4+4+2
    ASSERT_EQ(f.pieces.size(), 1u);
    EXPECT_EQ(f.pieces[0].dest_offset, dest);
    next += f.length;
    dest += f.length;
  }
  EXPECT_EQ(next, 7 + 10 * kMiB);
  EXPECT_EQ(p.pieces_per_request[0], 3u);
}

TEST(RangePlanTest, ZeroLengthNeedsNoFetch) {
  Plan p = MakePlan({{0, 5, 0}, {0, 0, 4}, {3, 99, 0}}, kMiB, 0);
  ASSERT_EQ(p.fetches.size(), 1u);
  EXPECT_EQ(p.pieces_per_request[0], 0u);
  EXPECT_EQ(p.pieces_per_request[1], 1u);
  EXPECT_EQ(p.pieces_per_request[2], 0u);
}

TEST(RangePlanTest, OverlappingRangesShareBytes) {
  Plan p = MakePlan({{0, 50, 100}, {0, 0, 100}, {0, 60, 10}}, kMiB, 0);
  ASSERT_EQ(p.fetches.size(), 1u);
  const Fetch& f = p.fetches[0];
  EXPECT_EQ(f.offset, 0u);
  EXPECT_EQ(f.length, 150u);
  ASSERT_EQ(f.pieces.size(), 3u);
  for (const Piece& piece : f.pieces) {
    const uint64_t want_start = piece.request == 0 ? 50 : piece.request == 1 ? 0 : 60;
    EXPECT_EQ(piece.fetch_offset, want_start);
    EXPECT_EQ(piece.dest_offset, 0u);
  }
}

TEST(RangePlanTest, UnsortedInputIssuesEarlyRequestsFirst) {
  // Request 0 sits at the end of object 1; it must be fetched first.
  Plan p = MakePlan({{1, 900, 10}, {0, 0, 10}, {1, 0, 10}}, kMiB, 0);
  ASSERT_EQ(p.fetches.size(), 3u);
  EXPECT_EQ(p.fetches[0].object_id, 1u);
  EXPECT_EQ(p.fetches[0].offset, 900u);
  EXPECT_EQ(p.fetches[1].pieces[0].request, 1u);
  EXPECT_EQ(p.fetches[2].pieces[0].request, 2u);
}

TEST(RangePlanTest, OffsetsBeyondFourGiB) {
  const uint64_t base = 5 * kGiB + 123;
  Plan p = MakePlan({{0, base, 3 * kMiB}, {0, base + 3 * kMiB + 10, 5}}, 2 * kMiB, 64);
  ASSERT_EQ(p.fetches.size(), 2u);
  EXPECT_EQ(p.fetches[0].offset, base);
  EXPECT_EQ(p.fetches[1].offset + p.fetches[1].length, base + 3 * kMiB + 15);
  EXPECT_EQ(p.fetches[1].pieces.back().request, 1u);
  // Ends near 2^64 do not overflow.
  Plan top = MakePlan({{0, UINT64_MAX - 10, 10}}, 4, 0);
  ASSERT_EQ(top.fetches.size(), 3u);
  EXPECT_EQ(top.fetches.back().offset + top.fetches.back().length, UINT64_MAX);
}

TEST(RangePlanTest, NoFetchIsOnlyGap) {
  // Span [0, 30) with a hole [10, 20); chunk 12 would end the first fetch inside the hole.
  Plan p = MakePlan({{0, 0, 10}, {0, 20, 10}}, 12, 10);
  for (const Fetch& f : p.fetches) {
    EXPECT_TRUE(!f.pieces.empty());
    EXPECT_TRUE(f.length <= 12);
    uint64_t covered = 0;
    for (const Piece& piece : f.pieces) covered += piece.length;
    EXPECT_TRUE(covered > 0);
  }
  EXPECT_EQ(p.fetches[0].offset, 0u);
  EXPECT_EQ(p.fetches[0].length, 10u);  // trimmed back to the end of the needed bytes
  EXPECT_EQ(p.fetches[1].offset, 20u);
}

TEST(RangePlanTest, SmallBatchesAreCutToFillTheRequestSlots) {
  PlanOptions o;
  o.chunk_bytes = 8 * kMiB;
  o.coalesce_gap_bytes = 0;
  o.target_fetches = 64;
  o.min_chunk_bytes = 2 * kMiB;
  // 8 ranges of 8 MiB, 8 MiB apart: 64 MiB in total -> 1 MiB shares, raised to the 2 MiB floor.
  std::vector<RangeSpec> ranges;
  for (uint64_t i = 0; i < 8; ++i) ranges.push_back({0, i * 16 * kMiB, 8 * kMiB});
  Plan p = PlanFetches(ranges, o);
  ASSERT_EQ(p.fetches.size(), 32u);
  for (const Fetch& f : p.fetches) EXPECT_EQ(f.length, 2 * kMiB);
  EXPECT_EQ(EffectiveChunkBytes(o, 64 * kMiB), 2 * kMiB);
  EXPECT_EQ(EffectiveChunkBytes(o, 256 * kMiB), 4 * kMiB);
  EXPECT_EQ(EffectiveChunkBytes(o, 8 * kGiB), 8 * kMiB);  // large batches keep chunk_bytes
  EXPECT_EQ(EffectiveChunkBytes(o, 100), 2 * kMiB);       // a tiny batch is not cut at all
  ASSERT_EQ(MakePlan({{0, 0, 100}}, kMiB, 0).fetches.size(), 1u);
  o.target_fetches = 0;  // off
  EXPECT_EQ(EffectiveChunkBytes(o, 64 * kMiB), 8 * kMiB);
  o.target_fetches = 64;
  o.min_chunk_bytes = 16 * kMiB;  // a floor above chunk_bytes is capped by it
  EXPECT_EQ(EffectiveChunkBytes(o, 64 * kMiB), 8 * kMiB);
}

TEST(RangePlanTest, RejectsBadInput) {
  EXPECT_THROW(MakePlan({{0, UINT64_MAX, 2}}, kMiB, 0), std::invalid_argument);
  EXPECT_THROW(MakePlan({{0, 0, 2}}, 0, 0), std::invalid_argument);
}

uint8_t ObjectByte(uint32_t object, uint64_t pos) {
  return static_cast<uint8_t>((pos * 2654435761u + object * 97u) >> 7);
}

TEST(RangePlanTest, RandomPlansReproduceEveryRange) {
  std::mt19937_64 rng(7);
  for (int round = 0; round < 300; ++round) {
    const uint64_t chunk = 1 + rng() % 5000;
    const uint64_t gap = rng() % 300;
    std::vector<RangeSpec> ranges(1 + rng() % 60);
    for (RangeSpec& r : ranges) {
      r.object_id = static_cast<uint32_t>(rng() % 3);
      r.offset = rng() % 20000;
      r.length = (rng() % 5 == 0) ? 0 : rng() % 3000;
    }
    Plan p = MakePlan(ranges, chunk, gap);
    std::vector<std::vector<uint8_t>> bufs(ranges.size());
    std::vector<uint8_t*> dests(ranges.size());
    for (size_t i = 0; i < ranges.size(); ++i) {
      bufs[i].assign(ranges[i].length, 0xEE);
      dests[i] = bufs[i].data();
    }
    std::vector<uint32_t> pieces_seen(ranges.size(), 0);
    for (const Fetch& f : p.fetches) {
      EXPECT_TRUE(f.length >= 1 && f.length <= chunk);
      EXPECT_TRUE(!f.pieces.empty());
      // Stream the body in random slices, as a network would.
      ScatterWriter writer(&f, &dests);
      std::vector<uint8_t> body(f.length);
      for (uint64_t i = 0; i < f.length; ++i) body[i] = ObjectByte(f.object_id, f.offset + i);
      uint64_t pos = 0;
      while (pos < f.length) {
        const uint64_t n = std::min<uint64_t>(f.length - pos, 1 + rng() % 700);
        writer.Write(pos, body.data() + pos, n);
        pos += n;
      }
      for (const Piece& piece : f.pieces) {
        ++pieces_seen[piece.request];
        EXPECT_EQ(ranges[piece.request].object_id, f.object_id);
      }
    }
    for (size_t i = 0; i < ranges.size(); ++i) {
      EXPECT_EQ(pieces_seen[i], p.pieces_per_request[i]);
      EXPECT_EQ(p.pieces_per_request[i] == 0, ranges[i].length == 0);
      for (uint64_t k = 0; k < ranges[i].length; ++k) {
        EXPECT_EQ(bufs[i][k], ObjectByte(ranges[i].object_id, ranges[i].offset + k));
      }
    }
    // Fetches of one object never overlap (no byte is downloaded twice).
    std::vector<std::pair<uint64_t, uint64_t>> spans[3];
    for (const Fetch& f : p.fetches) spans[f.object_id].push_back({f.offset, f.offset + f.length});
    for (auto& s : spans) {
      std::sort(s.begin(), s.end());
      for (size_t i = 1; i < s.size(); ++i) EXPECT_TRUE(s[i - 1].second <= s[i].first);
    }
  }
}

// Blocks of 100 bytes, the last of 50: reads of a checksummed object cover whole blocks, and a
// split cuts only at block starts.
TEST(RangePlanTest, ChecksummedObjectsAreReadInWholeBlocks) {
  BlockSums sums;
  sums.size = 1050;
  for (uint64_t s = 0; s < 1050; s += 100) sums.starts.push_back(s);
  sums.crcs.assign(sums.starts.size(), 0);
  PlanOptions o;
  o.coalesce_gap_bytes = 0;
  o.chunk_bytes = 250;
  const Plan p = PlanFetches({{0, 130, 20}, {0, 1010, 40}, {1, 130, 20}}, o, {&sums, nullptr});
  ASSERT_EQ(p.fetches.size(), 3u);
  EXPECT_EQ(p.fetches[0].offset, 100u);  // [130, 150) widened to its block
  EXPECT_EQ(p.fetches[0].length, 100u);
  ASSERT_EQ(p.fetches[0].pieces.size(), 1u);
  EXPECT_EQ(p.fetches[0].pieces[0].fetch_offset, 30u);
  EXPECT_EQ(p.fetches[0].pieces[0].length, 20u);
  EXPECT_EQ(p.fetches[1].offset, 1000u);  // the short last block
  EXPECT_EQ(p.fetches[1].length, 50u);
  EXPECT_EQ(p.fetches[2].offset, 130u);  // the other object has no checksums
  EXPECT_EQ(p.fetches[2].length, 20u);

  // 50-1049 needs blocks 0-10 (1,050 bytes): cuts of ~250 move up to block starts.
  const Plan split = PlanFetches({{0, 50, 1000}}, o, {&sums});
  uint64_t next = 0;
  for (const Fetch& f : split.fetches) {
    EXPECT_EQ(f.offset, next);
    EXPECT_EQ(f.offset % 100, 0u);
    next = f.offset + f.length;
  }
  EXPECT_EQ(next, 1050u);
  EXPECT_GT(split.fetches.size(), 1u);
  EXPECT_THROW(PlanFetches({{0, 1000, 51}}, o, {&sums}), std::invalid_argument);
}

}  // namespace
}  // namespace gcsio

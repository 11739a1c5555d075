// CRC-32C: known answers, both paths equal on every length and alignment, continuation, the
// base64 form GCS reports, and (printed, not asserted) the throughput of both paths.
#include "cc/gcsio/crc32c.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace gcsio {
namespace {

std::vector<uint8_t> Bytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  for (auto& b : v) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b = static_cast<uint8_t>(x >> 56);
  }
  return v;
}

TEST(Crc32cTest, KnownAnswers) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);  // the CRC catalogue's check value
  EXPECT_EQ(Crc32cPortable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);  // RFC 3720 B.4 test vectors
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  std::vector<uint8_t> inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
}

TEST(Crc32cTest, HardwareAndTableAgreeOnEveryLengthAndAlignment) {
  const std::vector<uint8_t> data = Bytes(4096 + 16, 7);
  for (size_t start = 0; start < 9; ++start) {
    for (size_t n : {0, 1, 7, 8, 9, 15, 16, 63, 64, 65, 1000, 4096}) {  // below three blocks
      EXPECT_EQ(Crc32c(data.data() + start, n), Crc32cPortable(data.data() + start, n))
          << "start " << start << " length " << n;
    }
  }
}

TEST(Crc32cTest, HardwareAndTableAgreeAcrossThreeBlockRuns) {
  // The hardware path sums three 4 KiB blocks at once: lengths around multiples of 12 KiB.
  const std::vector<uint8_t> data = Bytes(5 * 12288 + 64, 11);
  for (size_t start : {0, 3}) {
    for (size_t n : {12287, 12288, 12289, 24576, 24583, 5 * 12288 + 17}) {
      EXPECT_EQ(Crc32c(data.data() + start, n), Crc32cPortable(data.data() + start, n))
          << "start " << start << " length " << n;
    }
  }
}

TEST(Crc32cTest, ContinuesAcrossPieces) {
  const std::vector<uint8_t> data = Bytes(100000, 3);
  const uint32_t whole = Crc32c(data.data(), data.size());
  for (size_t cut : {0, 1, 13, 4096, 99999, 100000}) {
    const uint32_t a = Crc32c(data.data(), cut);
    EXPECT_EQ(Crc32c(data.data() + cut, data.size() - cut, a), whole) << cut;
    EXPECT_EQ(Crc32cPortable(data.data() + cut, data.size() - cut, a), whole) << cut;
  }
}

TEST(Crc32cTest, Base64AsGcsWritesIt) {
  EXPECT_EQ(Crc32cBase64(0xE3069283u), "4waSgw==");
  EXPECT_EQ(Crc32cBase64(0), "AAAAAA==");
  uint32_t crc = 0;
  ASSERT_TRUE(ParseCrc32cBase64("4waSgw==", &crc));
  EXPECT_EQ(crc, 0xE3069283u);
  for (uint32_t v : {0u, 1u, 0xFFFFFFFFu, 0x12345678u, 0x80000001u}) {
    ASSERT_TRUE(ParseCrc32cBase64(Crc32cBase64(v), &crc));
    EXPECT_EQ(crc, v);
  }
  EXPECT_FALSE(ParseCrc32cBase64("4waSgw=", &crc));
  EXPECT_FALSE(ParseCrc32cBase64("4wa*gw==", &crc));
  EXPECT_FALSE(ParseCrc32cBase64("4waSgx==", &crc));  // non-zero padding bits
  EXPECT_FALSE(ParseCrc32cBase64("", &crc));
}

TEST(Crc32cTest, CombineEqualsTheChecksumOfTheConcatenation) {
  std::vector<uint8_t> data(5000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t cut : {size_t{0}, size_t{1}, size_t{63}, size_t{4096}, size_t{4999}, size_t{5000}}) {
    const uint32_t a = Crc32c(data.data(), cut);
    const uint32_t b = Crc32c(data.data() + cut, data.size() - cut);
    EXPECT_EQ(Crc32cCombine(a, b, data.size() - cut), Crc32c(data.data(), data.size()))
        << "cut at " << cut;
  }
}

// Prints GB/s of both paths (a figure for the header's docstring, not a timed assertion).
TEST(Crc32cTest, ThroughputIsPrinted) {
  const size_t n = 256u << 20;
  std::vector<uint8_t> data(n);
  std::memset(data.data(), 0x5A, n);
  for (int path = 0; path < 2; ++path) {
    double best = 1e9;
    uint32_t c = 0;
    for (int run = 0; run < 3; ++run) {  // best of three: the machine is shared
      const auto t0 = std::chrono::steady_clock::now();
      c = path == 0 ? Crc32c(data.data(), n) : Crc32cPortable(data.data(), n);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("crc32c %s: %.2f GB/s (crc %08x)\n",
                path == 0 ? (Crc32cHardware() ? "sse4.2" : "table") : "table", n / best / 1e9, c);
  }
  EXPECT_EQ(Crc32c(data.data(), n), Crc32cPortable(data.data(), n));
}

}  // namespace
}  // namespace gcsio

// UploadPayload: reads across span boundaries from any offset, empty spans dropped, the
// CRC-32C chained over the spans equal to that of the concatenation, null spans refused.
#include "cc/gcsio/upload_payload.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cc/gcsio/crc32c.h"

namespace gcsio {
namespace {

UploadSpan Span(const std::string& s) {
  return UploadSpan{reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

std::string ReadAll(const UploadPayload& p, uint64_t offset, size_t n) {
  std::string out(n, '\0');
  out.resize(p.Read(offset, reinterpret_cast<uint8_t*>(out.data()), n));
  return out;
}

TEST(UploadPayloadTest, ReadsAcrossSpansFromEveryOffset) {
  const std::string a = "abcde", b = "", c = "fg", d = "hijklmnop";
  const UploadPayload p({Span(a), Span(b), Span(c), Span(d)});
  const std::string all = a + b + c + d;
  EXPECT_EQ(p.size(), all.size());
  EXPECT_EQ(p.span_count(), 3u);  // the empty span is dropped
  for (uint64_t off = 0; off <= all.size(); ++off) {
    for (size_t n = 0; n <= all.size() + 2; ++n) {
      EXPECT_EQ(ReadAll(p, off, n), all.substr(off, n)) << "offset " << off << " n " << n;
    }
  }
  EXPECT_EQ(ReadAll(p, all.size() + 5, 3), "");
}

TEST(UploadPayloadTest, Crc32cIsThatOfTheConcatenation) {
  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 31 + 7);
  const std::string head = big.substr(0, 12345), mid = big.substr(12345, 1),
                    tail = big.substr(12346);
  const UploadPayload p({Span(head), Span(""), Span(mid), Span(tail)});
  EXPECT_EQ(p.Crc32c(), Crc32c(big.data(), big.size()));
  EXPECT_EQ(UploadPayload({Span(big)}).Crc32c(), Crc32c(big.data(), big.size()));
  // "123456789" -> 0xE3069283, the CRC-32C check value.
  EXPECT_EQ(UploadPayload({Span("1234"), Span("56789")}).Crc32c(), 0xE3069283u);
}

TEST(UploadPayloadTest, EmptyPayloads) {
  EXPECT_EQ(UploadPayload().size(), 0u);
  EXPECT_EQ(UploadPayload().Crc32c(), 0u);
  const UploadPayload only_empty({Span(""), Span("")});
  EXPECT_EQ(only_empty.size(), 0u);
  EXPECT_EQ(only_empty.span_count(), 0u);
  EXPECT_EQ(ReadAll(only_empty, 0, 4), "");
  EXPECT_EQ(UploadPayload({UploadSpan{nullptr, 0}}).size(), 0u);  // null is fine when empty
}

TEST(UploadPayloadTest, ANullSpanWithBytesIsRefusedNamingIt) {
  const std::string a = "abc";
  try {
    UploadPayload({Span(a), UploadSpan{nullptr, 7}});
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "upload span 1 of 2 is null with 7 bytes");
  }
}

TEST(UploadPayloadTest, BlockChecksumsAreThoseOfEachBlockAcrossSpans) {
  std::vector<uint8_t> a(700), b(300), c(1);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i * 3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 5 + 1);
  c[0] = 9;
  UploadPayload payload({{a.data(), a.size()}, {b.data(), b.size()}, {c.data(), c.size()}});
  std::vector<uint8_t> whole(a);
  whole.insert(whole.end(), b.begin(), b.end());
  whole.insert(whole.end(), c.begin(), c.end());
  const std::vector<uint64_t> starts = {0, 10, 650, 1000};  // blocks across span boundaries
  std::vector<uint32_t> crcs;
  EXPECT_EQ(payload.BlockCrc32c(starts, &crcs), Crc32c(whole.data(), whole.size()));
  ASSERT_EQ(crcs.size(), 4u);
  EXPECT_EQ(crcs[0], Crc32c(whole.data(), 10));
  EXPECT_EQ(crcs[1], Crc32c(whole.data() + 10, 640));
  EXPECT_EQ(crcs[2], Crc32c(whole.data() + 650, 350));
  EXPECT_EQ(crcs[3], Crc32c(whole.data() + 1000, 1));
  EXPECT_THROW(payload.BlockCrc32c({0, 1001}, &crcs), std::invalid_argument);
  EXPECT_THROW(payload.BlockCrc32c({5}, &crcs), std::invalid_argument);
}

}  // namespace
}  // namespace gcsio

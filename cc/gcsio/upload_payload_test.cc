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

}  // namespace
}  // namespace gcsio

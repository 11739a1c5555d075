#include "cc/gcsio/http_text.h"

#include <gtest/gtest.h>

namespace gcsio {
namespace {

TEST(TrimTest, StripsSpaceTabsAndLineEnds) {
  EXPECT_EQ(Trim("  bytes=0-9 \r\n"), "bytes=0-9");
  EXPECT_EQ(Trim("\t\r\n "), "");
  EXPECT_EQ(Trim("a b"), "a b");
}

TEST(ParseU64Test, WholeDecimalOnly) {
  uint64_t v = 0;
  EXPECT_TRUE(ParseU64("18446744073709551615", &v));
  EXPECT_EQ(v, UINT64_MAX);
  EXPECT_TRUE(ParseU64("0", &v));
  EXPECT_EQ(v, 0u);
  EXPECT_FALSE(ParseU64("", &v));
  EXPECT_FALSE(ParseU64("12x", &v));
  EXPECT_FALSE(ParseU64("-1", &v));
  EXPECT_FALSE(ParseU64(" 1", &v));
  EXPECT_FALSE(ParseU64("18446744073709551616", &v));
}

TEST(HeaderValueTest, CaseInsensitiveNameTrimmedValue) {
  std::string_view v;
  ASSERT_TRUE(HeaderValue("Content-Range: bytes 0-9/10\r\n", "content-range", &v));
  EXPECT_EQ(v, "bytes 0-9/10");
  ASSERT_TRUE(HeaderValue("LOCATION:http://h/u?id=1\r\n", "location", &v));
  EXPECT_EQ(v, "http://h/u?id=1");
  ASSERT_TRUE(HeaderValue("Range:\r\n", "range", &v));
  EXPECT_EQ(v, "");
}

TEST(HeaderValueTest, OtherNamesAndPrefixesDoNotMatch) {
  std::string_view v = "unchanged";
  EXPECT_FALSE(HeaderValue("Content-Range: bytes 0-9/10", "range", &v));
  EXPECT_FALSE(HeaderValue("Range-X: 1", "range", &v));
  EXPECT_FALSE(HeaderValue("Range", "range", &v));
  EXPECT_FALSE(HeaderValue("HTTP/1.1 200 OK", "range", &v));
  EXPECT_EQ(v, "unchanged");
}

TEST(GroupedTest, ThousandsSeparators) {
  EXPECT_EQ(Grouped(0), "0");
  EXPECT_EQ(Grouped(999), "999");
  EXPECT_EQ(Grouped(1000), "1,000");
  EXPECT_EQ(Grouped(16095232), "16,095,232");
  EXPECT_EQ(Grouped(UINT64_MAX), "18,446,744,073,709,551,615");
}

}  // namespace
}  // namespace gcsio

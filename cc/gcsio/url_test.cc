// URL building: percent-encoding of odd object names, endpoint normalization, media URLs.
#include "cc/gcsio/url.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

namespace gcsio {
namespace {

TEST(UrlTest, EncodesEverythingButUnreserved) {
  EXPECT_EQ(PercentEncode("abc-XYZ_0.9~"), std::string("abc-XYZ_0.9~"));
  EXPECT_EQ(PercentEncode("a/b c"), std::string("a%2Fb%20c"));
  EXPECT_EQ(PercentEncode("100%+#?&="), std::string("100%25%2B%23%3F%26%3D"));
  EXPECT_EQ(PercentEncode("\xC3\xA9\xE2\x82\xAC"), std::string("%C3%A9%E2%82%AC"));  // "é€"
  EXPECT_EQ(PercentEncode(std::string("a\0b", 3)), std::string("a%00b"));
  EXPECT_EQ(PercentEncode(""), std::string(""));
}

TEST(UrlTest, NormalizesEndpoints) {
  EXPECT_EQ(NormalizeEndpoint("127.0.0.1:9023"), std::string("http://127.0.0.1:9023"));
  EXPECT_EQ(NormalizeEndpoint("http://localhost:1/"), std::string("http://localhost:1"));
  EXPECT_EQ(NormalizeEndpoint("https://storage.googleapis.com"),
            std::string("https://storage.googleapis.com"));
  EXPECT_THROW(NormalizeEndpoint("/"), std::invalid_argument);
  EXPECT_THROW(NormalizeEndpoint(""), std::invalid_argument);
}

TEST(UrlTest, BuildsMediaUrls) {
  EXPECT_EQ(MediaUrl("http://h:1", "bkt", "dir/a b.distcp", 0),
            std::string("http://h:1/download/storage/v1/b/bkt/o/dir%2Fa%20b.distcp?alt=media"));
  EXPECT_EQ(MediaUrl("h:1/", "bkt", "x", 1700000000000001),
            std::string("http://h:1/download/storage/v1/b/bkt/o/x?alt=media&generation="
                        "1700000000000001"));
  EXPECT_EQ(
      MediaUrl("https://storage.googleapis.com", "b", "q?#", -1),
      std::string("https://storage.googleapis.com/download/storage/v1/b/b/o/q%3F%23?alt=media"));
}

TEST(UrlTest, FormatsGsUris) {
  EXPECT_EQ(GsUri("b", "o/p"), std::string("gs://b/o/p"));
  EXPECT_EQ(GsUri("bkt", "dir/a b.distcp"), std::string("gs://bkt/dir/a b.distcp"));
}

}  // namespace
}  // namespace gcsio

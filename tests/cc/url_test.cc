// URL building: percent-encoding of odd object names, endpoint normalization, Range values.
#include "cc/gcsio/url.h"

#include <stdexcept>
#include <string>

#include "tests/cc/check.h"

namespace gcsio {
namespace {

void EncodesEverythingButUnreserved() {
  CHECK_EQ(PercentEncode("abc-XYZ_0.9~"), std::string("abc-XYZ_0.9~"));
  CHECK_EQ(PercentEncode("a/b c"), std::string("a%2Fb%20c"));
  CHECK_EQ(PercentEncode("100%+#?&="), std::string("100%25%2B%23%3F%26%3D"));
  CHECK_EQ(PercentEncode("\xC3\xA9\xE2\x82\xAC"), std::string("%C3%A9%E2%82%AC"));  // "é€"
  CHECK_EQ(PercentEncode(std::string("a\0b", 3)), std::string("a%00b"));
  CHECK_EQ(PercentEncode(""), std::string(""));
}

void NormalizesEndpoints() {
  CHECK_EQ(NormalizeEndpoint("127.0.0.1:9023"), std::string("http://127.0.0.1:9023"));
  CHECK_EQ(NormalizeEndpoint("http://localhost:1/"), std::string("http://localhost:1"));
  CHECK_EQ(NormalizeEndpoint("https://storage.googleapis.com"),
           std::string("https://storage.googleapis.com"));
  CHECK_THROWS(NormalizeEndpoint("/"), std::invalid_argument);
  CHECK_THROWS(NormalizeEndpoint(""), std::invalid_argument);
}

void BuildsMediaAndMetadataUrls() {
  CHECK_EQ(MediaUrl("http://h:1", "bkt", "dir/a b.distcp", 0),
           std::string("http://h:1/download/storage/v1/b/bkt/o/dir%2Fa%20b.distcp?alt=media"));
  CHECK_EQ(MediaUrl("h:1/", "bkt", "x", 1700000000000001),
           std::string("http://h:1/download/storage/v1/b/bkt/o/x?alt=media&generation="
                       "1700000000000001"));
  CHECK_EQ(MetadataUrl("https://storage.googleapis.com", "b", "q?#"),
           std::string("https://storage.googleapis.com/storage/v1/b/b/o/q%3F%23"));
}

void RangeValuesAreInclusive() {
  CHECK_EQ(RangeValue(0, 1), std::string("bytes=0-0"));
  CHECK_EQ(RangeValue(10, 5), std::string("bytes=10-14"));
  CHECK_EQ(RangeValue(5ULL << 30, 2), std::string("bytes=5368709120-5368709121"));
  CHECK_EQ(GsUri("b", "o/p"), std::string("gs://b/o/p"));
}

}  // namespace
}  // namespace gcsio

int main() {
  gcsio::EncodesEverythingButUnreserved();
  gcsio::NormalizesEndpoints();
  gcsio::BuildsMediaAndMetadataUrls();
  gcsio::RangeValuesAreInclusive();
  std::cout << "url_test: OK" << std::endl;
  return 0;
}

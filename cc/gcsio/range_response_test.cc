// Ranged-GET answers: Content-Range parsing, 206/200 validation.
#include "cc/gcsio/range_response.h"

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <string>

namespace gcsio {
namespace {

TEST(RangeResponseTest, ParsesContentRange) {
  ContentRange a = ParseContentRange("bytes 0-99/1000");
  EXPECT_TRUE(a.valid && !a.unsatisfied && a.first == 0 && a.last == 99 && a.has_total);
  EXPECT_EQ(a.total, 1000u);
  ContentRange b = ParseContentRange(" bytes 5368709120-5368709121/* ");
  EXPECT_TRUE(b.valid && !b.has_total && b.first == 5368709120ULL);
  ContentRange c = ParseContentRange("bytes */42");
  EXPECT_TRUE(c.valid && c.unsatisfied && c.total == 42);
  for (const char* bad :
       {"", "bytes", "bytes 5-4/10", "bytes 0-10/10", "items 0-1/2", "bytes a-b/c", "bytes 0-1"}) {
    EXPECT_TRUE(!ParseContentRange(bad).valid);
  }
}

TEST(RangeResponseTest, ValidatesSuccessHeaders) {
  const AttemptRange r{100, 50};
  EXPECT_TRUE(CheckSuccessHeaders(206, r, "bytes 100-149/1000", 50).verdict == Verdict::kSuccess);
  EXPECT_TRUE(CheckSuccessHeaders(206, r, "bytes 100-149/*", -1).verdict == Verdict::kSuccess);
  Outcome shifted = CheckSuccessHeaders(206, r, "bytes 101-150/1000", 50);
  EXPECT_TRUE(shifted.verdict == Verdict::kRetry && shifted.cause == "bad_content_range");
  EXPECT_TRUE(CheckSuccessHeaders(206, r, "", 50).verdict == Verdict::kRetry);
  EXPECT_TRUE(CheckSuccessHeaders(206, r, "bytes 100-149/1000", 49).verdict == Verdict::kRetry);
  Outcome past_end = CheckSuccessHeaders(206, r, "bytes 100-119/120", 20);
  EXPECT_TRUE(past_end.verdict == Verdict::kFail && past_end.cause == "beyond_end");
  EXPECT_TRUE(past_end.message.find("size 120") != std::string::npos);
  // 200: only for a read from byte 0 of exactly the requested length.
  EXPECT_TRUE(CheckSuccessHeaders(200, AttemptRange{0, 50}, "", 50).verdict == Verdict::kSuccess);
  EXPECT_TRUE(CheckSuccessHeaders(200, AttemptRange{0, 50}, "", -1).verdict == Verdict::kSuccess);
  EXPECT_TRUE(CheckSuccessHeaders(200, AttemptRange{0, 50}, "", 51).verdict == Verdict::kFail);
  EXPECT_TRUE(CheckSuccessHeaders(200, r, "", 50).verdict == Verdict::kFail);
  EXPECT_TRUE(CheckSuccessHeaders(204, r, "", 0).verdict == Verdict::kFail);
}
}  // namespace
}  // namespace gcsio

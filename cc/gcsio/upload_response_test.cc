// Upload answers: the committed offset of a 308, the object resource of the final answer, and
// the verdicts of 412, expired sessions and checksum / size mismatches.
#include "cc/gcsio/upload_response.h"

#include <gtest/gtest.h>

#include "cc/gcsio/crc32c.h"

namespace gcsio {
namespace {

TEST(UploadResponseTest, CommittedRange) {
  EXPECT_EQ(ParseCommittedRange(""), 0);
  EXPECT_EQ(ParseCommittedRange("bytes=0-0"), 1);
  EXPECT_EQ(ParseCommittedRange(" bytes=0-262143 "), 262144);
  EXPECT_EQ(ParseCommittedRange("bytes=5-9"), -1);  // a session holds a prefix
  EXPECT_EQ(ParseCommittedRange("bytes 0-9"), -1);
  EXPECT_EQ(ParseCommittedRange("bytes=0-"), -1);
  EXPECT_EQ(ParseCommittedRange("bytes=0-x"), -1);
}

TEST(UploadResponseTest, ObjectResourceTopLevelFieldsOnly) {
  const ObjectResource r = ParseObjectResource(
      R"({"kind": "storage#object", "name": "a/b", "metadata": {"size": "1", "crc32c": "x"},)"
      R"( "size": "9", "generation": "1700000000123456", "crc32c": "4waSgw==",)"
      R"( "acl": [{"entity": "e", "x": {"y": [1, 2]}}], "md5Hash": "q\"uote"})");
  ASSERT_TRUE(r.valid);
  EXPECT_EQ(r.size, 9u);
  EXPECT_EQ(r.generation, 1700000000123456);
  ASSERT_TRUE(r.has_crc32c);
  EXPECT_EQ(r.crc32c, 0xE3069283u);
  const ObjectResource bare = ParseObjectResource(R"({"size": 9, "generation": 12})");
  ASSERT_TRUE(bare.valid);
  EXPECT_EQ(bare.generation, 12);
  EXPECT_FALSE(bare.has_crc32c);
  EXPECT_FALSE(ParseObjectResource("").valid);
  EXPECT_FALSE(ParseObjectResource("{}").valid);
  EXPECT_FALSE(ParseObjectResource(R"({"size": "9")").valid);
  EXPECT_FALSE(ParseObjectResource("<html>").valid);
}

TEST(UploadResponseTest, StatusVerdicts) {
  Outcome o = UploadStatusOutcome(412, "conditionNotMet", "b", "o", "cred", true, 0);
  EXPECT_EQ(o.verdict, Verdict::kFail);
  EXPECT_EQ(o.cause, kPreconditionFailed);
  EXPECT_EQ(o.message,
            "HTTP 412 precondition failed: ifGenerationMatch=0 does not hold for gs://b/o (the "
            "object exists): conditionNotMet");
  for (long s : {404L, 410L}) {
    o = UploadStatusOutcome(s, "", "b", "o", "cred", true, -1);
    EXPECT_EQ(o.verdict, Verdict::kRetry);
    EXPECT_EQ(o.cause, kSessionExpired);
  }
  o = UploadStatusOutcome(404, "", "b", "o", "cred", false, -1);  // the start: no such bucket
  EXPECT_EQ(o.verdict, Verdict::kFail);
  EXPECT_EQ(o.cause, "http_404");
  o = UploadStatusOutcome(503, "Bearer ya29.secret", "b", "o", "cred", true, -1);
  EXPECT_EQ(o.verdict, Verdict::kRetry);
  EXPECT_EQ(o.message.find("ya29"), std::string::npos);
  EXPECT_EQ(UploadStatusOutcome(429, "", "b", "o", "c", true, -1).verdict, Verdict::kRetry);
  EXPECT_EQ(UploadStatusOutcome(403, "", "b", "o", "c", true, -1).verdict, Verdict::kFail);
}

TEST(UploadResponseTest, UploadedObjectChecks) {
  ObjectResource r;
  r.valid = true;
  r.size = 9;
  r.generation = 42;
  r.has_crc32c = true;
  r.crc32c = Crc32c("123456789", 9);
  EXPECT_EQ(CheckUploadedObject(r, "b", "o", 9, r.crc32c).verdict, Verdict::kSuccess);
  Outcome bad = CheckUploadedObject(r, "b", "o", 9, r.crc32c ^ 1);
  EXPECT_EQ(bad.verdict, Verdict::kFail);
  EXPECT_EQ(bad.cause, kCrc32cMismatch);
  EXPECT_NE(bad.message.find("gs://b/o generation 42"), std::string::npos) << bad.message;
  EXPECT_NE(bad.message.find("4waSgw=="), std::string::npos) << bad.message;
  EXPECT_EQ(CheckUploadedObject(r, "b", "o", 10, r.crc32c).cause, "size_mismatch");
  r.has_crc32c = false;
  EXPECT_EQ(CheckUploadedObject(r, "b", "o", 9, 0).cause, kCrc32cMismatch);
  r.has_crc32c = true;
  r.generation = 0;
  EXPECT_EQ(CheckUploadedObject(r, "b", "o", 9, r.crc32c).cause, "no_generation");
  EXPECT_EQ(CheckUploadedObject(ObjectResource(), "b", "o", 9, 0).cause, "bad_object_resource");
}

}  // namespace
}  // namespace gcsio

// Shared verdicts: statuses, transport errors, credential redaction.
#include "cc/gcsio/outcome.h"

#include <curl/curl.h>
#include <gtest/gtest.h>

#include <string>

namespace gcsio {
namespace {

TEST(OutcomeTest, ClassifiesStatuses) {
  for (long s : {408, 429, 500, 502, 503, 504}) {
    Outcome o = StatusOutcome(s, "busy", "b", "o", "cred");
    EXPECT_TRUE(o.verdict == Verdict::kRetry);
    EXPECT_EQ(o.cause, "http_" + std::to_string(s));
  }
  Outcome nf = StatusOutcome(404, "No such object: b/o", "bkt", "dir/obj", "cred");
  EXPECT_TRUE(nf.verdict == Verdict::kFail && nf.status == 404);
  EXPECT_TRUE(nf.message.find("bucket 'bkt'") != std::string::npos);
  EXPECT_TRUE(nf.message.find("object 'dir/obj'") != std::string::npos);
  Outcome denied = StatusOutcome(403, "", "b", "o", "sa@example.iam");
  EXPECT_TRUE(denied.verdict == Verdict::kFail);
  EXPECT_TRUE(denied.message.find("permission denied") != std::string::npos);
  EXPECT_TRUE(denied.message.find("sa@example.iam") != std::string::npos);
  EXPECT_TRUE(StatusOutcome(401, "", "b", "o", "c").verdict == Verdict::kFail);
  EXPECT_TRUE(StatusOutcome(416, "", "b", "o", "c").verdict == Verdict::kFail);
  // Error bodies are cut short and stripped of control characters.
  Outcome long_body = StatusOutcome(400, std::string(5000, 'x') + "\n\t", "b", "o", "c");
  EXPECT_TRUE(long_body.message.size() < 400);
}

TEST(OutcomeTest, RedactsTheTokenOnly) {
  // A compact JSON echo: the quote, comma and the rest of the body stay.
  EXPECT_EQ(RedactCredentials(R"({"Authorization":"Bearer ya29.a-b_c~d+e/f==","n":1} tail)", ""),
            R"({"Authorization":"Bearer <redacted>","n":1} tail)");
  EXPECT_EQ(RedactCredentials("authorization: bearer t0k\r\nHost: x", ""),
            "authorization: bearer <redacted>\r\nHost: x");
  EXPECT_EQ(RedactCredentials("Bearer abc)(0 of 10 bytes", ""), "Bearer <redacted>)(0 of 10 bytes");
  EXPECT_EQ(RedactCredentials("token s3cr3t; Bearer ", "s3cr3t"), "token <redacted>; Bearer ");
  // Redacting twice (the transfer, then the message snippet) changes nothing more.
  const std::string once = RedactCredentials(R"({"a":"Bearer s3cr3t"} x)", "s3cr3t");
  EXPECT_EQ(once, R"({"a":"Bearer <redacted>"} x)");
  EXPECT_EQ(RedactCredentials(once, ""), once);
  // A Google access token anywhere; not inside a longer word.
  EXPECT_EQ(RedactCredentials("token=ya29.a_b-c.d&x=1", ""), "token=<redacted>&x=1");
  EXPECT_EQ(RedactCredentials("xya29.abc ya29.", ""), "xya29.abc ya29.");
}

TEST(OutcomeTest, ClassifiesTransportErrors) {
  EXPECT_EQ(TransportOutcome(CURLE_COULDNT_CONNECT, "").cause, std::string("connection_refused"));
  EXPECT_EQ(TransportOutcome(CURLE_RECV_ERROR, "").cause, std::string("connection_reset"));
  EXPECT_EQ(TransportOutcome(CURLE_SEND_ERROR, "").cause, std::string("connection_reset"));
  EXPECT_EQ(TransportOutcome(CURLE_GOT_NOTHING, "").cause, std::string("connection_reset"));
  EXPECT_EQ(TransportOutcome(CURLE_SEND_FAIL_REWIND, "").cause, std::string("connection_reset"));
  EXPECT_EQ(TransportOutcome(CURLE_PARTIAL_FILE, "").cause, std::string("short_body"));
  EXPECT_EQ(TransportOutcome(CURLE_OPERATION_TIMEDOUT, "").cause, std::string("timeout"));
  EXPECT_TRUE(TransportOutcome(CURLE_PARTIAL_FILE, "x").verdict == Verdict::kRetry);
  EXPECT_TRUE(TransportOutcome(CURLE_SSL_CACERT_BADFILE, "").verdict == Verdict::kFail);
  EXPECT_TRUE(TransportOutcome(CURLE_URL_MALFORMAT, "").verdict == Verdict::kFail);
  EXPECT_TRUE(TransportOutcome(CURLE_COULDNT_CONNECT, "port 9").message.find("port 9") !=
              std::string::npos);
}
}  // namespace
}  // namespace gcsio

// Response checks: Content-Range parsing, 206/200 validation, status and transport verdicts,
// token refresh timing.
#include "cc/gcsio/response_check.h"

#include <curl/curl.h>

#include <string>

#include "cc/gcsio/token_cache.h"
#include "tests/cc/check.h"

namespace gcsio {
namespace {

void ParsesContentRange() {
  ContentRange a = ParseContentRange("bytes 0-99/1000");
  CHECK(a.valid && !a.unsatisfied && a.first == 0 && a.last == 99 && a.has_total);
  CHECK_EQ(a.total, 1000u);
  ContentRange b = ParseContentRange(" bytes 5368709120-5368709121/* ");
  CHECK(b.valid && !b.has_total && b.first == 5368709120ULL);
  ContentRange c = ParseContentRange("bytes */42");
  CHECK(c.valid && c.unsatisfied && c.total == 42);
  for (const char* bad :
       {"", "bytes", "bytes 5-4/10", "bytes 0-10/10", "items 0-1/2", "bytes a-b/c", "bytes 0-1"}) {
    CHECK(!ParseContentRange(bad).valid);
  }
}

void ValidatesSuccessHeaders() {
  const AttemptRange r{100, 50};
  CHECK(CheckSuccessHeaders(206, r, "bytes 100-149/1000", 50).verdict == Verdict::kSuccess);
  CHECK(CheckSuccessHeaders(206, r, "bytes 100-149/*", -1).verdict == Verdict::kSuccess);
  Outcome shifted = CheckSuccessHeaders(206, r, "bytes 101-150/1000", 50);
  CHECK(shifted.verdict == Verdict::kRetry && shifted.cause == "bad_content_range");
  CHECK(CheckSuccessHeaders(206, r, "", 50).verdict == Verdict::kRetry);
  CHECK(CheckSuccessHeaders(206, r, "bytes 100-149/1000", 49).verdict == Verdict::kRetry);
  Outcome past_end = CheckSuccessHeaders(206, r, "bytes 100-119/120", 20);
  CHECK(past_end.verdict == Verdict::kFail && past_end.cause == "beyond_end");
  CHECK(past_end.message.find("size 120") != std::string::npos);
  // 200: only for a read from byte 0 of exactly the requested length.
  CHECK(CheckSuccessHeaders(200, AttemptRange{0, 50}, "", 50).verdict == Verdict::kSuccess);
  CHECK(CheckSuccessHeaders(200, AttemptRange{0, 50}, "", -1).verdict == Verdict::kSuccess);
  CHECK(CheckSuccessHeaders(200, AttemptRange{0, 50}, "", 51).verdict == Verdict::kFail);
  CHECK(CheckSuccessHeaders(200, r, "", 50).verdict == Verdict::kFail);
  CHECK(CheckSuccessHeaders(204, r, "", 0).verdict == Verdict::kFail);
}

void ClassifiesStatuses() {
  for (long s : {408, 429, 500, 502, 503, 504}) {
    Outcome o = StatusOutcome(s, "busy", "b", "o", "cred");
    CHECK(o.verdict == Verdict::kRetry);
    CHECK_EQ(o.cause, "http_" + std::to_string(s));
  }
  Outcome nf = StatusOutcome(404, "No such object: b/o", "bkt", "dir/obj", "cred");
  CHECK(nf.verdict == Verdict::kFail && nf.status == 404);
  CHECK(nf.message.find("bucket 'bkt'") != std::string::npos);
  CHECK(nf.message.find("object 'dir/obj'") != std::string::npos);
  Outcome denied = StatusOutcome(403, "", "b", "o", "sa@example.iam");
  CHECK(denied.verdict == Verdict::kFail);
  CHECK(denied.message.find("permission denied") != std::string::npos);
  CHECK(denied.message.find("sa@example.iam") != std::string::npos);
  CHECK(StatusOutcome(401, "", "b", "o", "c").verdict == Verdict::kFail);
  CHECK(StatusOutcome(416, "", "b", "o", "c").verdict == Verdict::kFail);
  // Error bodies are cut short and stripped of control characters.
  Outcome long_body = StatusOutcome(400, std::string(5000, 'x') + "\n\t", "b", "o", "c");
  CHECK(long_body.message.size() < 400);
}

void ClassifiesTransportErrors() {
  CHECK_EQ(TransportOutcome(CURLE_COULDNT_CONNECT, "").cause, std::string("connection_refused"));
  CHECK_EQ(TransportOutcome(CURLE_RECV_ERROR, "").cause, std::string("connection_reset"));
  CHECK_EQ(TransportOutcome(CURLE_SEND_ERROR, "").cause, std::string("connection_reset"));
  CHECK_EQ(TransportOutcome(CURLE_GOT_NOTHING, "").cause, std::string("connection_reset"));
  CHECK_EQ(TransportOutcome(CURLE_PARTIAL_FILE, "").cause, std::string("short_body"));
  CHECK_EQ(TransportOutcome(CURLE_OPERATION_TIMEDOUT, "").cause, std::string("timeout"));
  CHECK(TransportOutcome(CURLE_PARTIAL_FILE, "x").verdict == Verdict::kRetry);
  CHECK(TransportOutcome(CURLE_SSL_CACERT_BADFILE, "").verdict == Verdict::kFail);
  CHECK(TransportOutcome(CURLE_URL_MALFORMAT, "").verdict == Verdict::kFail);
  CHECK(TransportOutcome(CURLE_COULDNT_CONNECT, "port 9").message.find("port 9") !=
        std::string::npos);
}

void TokenRefreshTiming() {
  // Known expiry one hour out: refresh 300 s before it.
  CHECK_EQ(RefreshTime(Token{"t", 4600}, 1000, 300, 60), 4300.0);
  // Short-lived token (4 min): refresh at half its lifetime instead of at once.
  CHECK_EQ(RefreshTime(Token{"t", 1240}, 1000, 300, 60), 1120.0);
  // Unknown expiry: ask again after the fixed TTL.
  CHECK_EQ(RefreshTime(Token{"t", 0}, 1000, 300, 60), 1060.0);
  int calls = 0;
  TokenCache cache([&calls] { return Token{"tok" + std::to_string(++calls), 0}; }, 300, 60);
  CHECK_EQ(cache.Get(), std::string("tok1"));
  CHECK_EQ(cache.Get(), std::string("tok1"));  // cached
  cache.Invalidate();
  CHECK_EQ(cache.Get(), std::string("tok2"));
  TokenCache disabled({}, 300, 60);
  CHECK(!disabled.enabled());
  CHECK_EQ(disabled.Get(), std::string(""));
}

}  // namespace
}  // namespace gcsio

int main() {
  gcsio::ParsesContentRange();
  gcsio::ValidatesSuccessHeaders();
  gcsio::ClassifiesStatuses();
  gcsio::ClassifiesTransportErrors();
  gcsio::TokenRefreshTiming();
  std::cout << "response_check_test: OK" << std::endl;
  return 0;
}

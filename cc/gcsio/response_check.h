// Judging one HTTP attempt: Content-Range parsing, header validation before any byte is
// written, and the mapping of transport errors and statuses to retry-or-fail verdicts.
#ifndef CC_GCSIO_RESPONSE_CHECK_H_
#define CC_GCSIO_RESPONSE_CHECK_H_

#include <cstdint>
#include <string>
#include <string_view>

namespace gcsio {

enum class Verdict { kSuccess, kRetry, kFail, kCancelled };

struct Outcome {
  Verdict verdict = Verdict::kSuccess;
  std::string cause;    // short key for retries_by_cause, e.g. "http_503", "stall", "short_body"
  long status = 0;      // HTTP status, 0 when none arrived
  std::string message;  // human-readable detail (never contains credentials)
};

struct ContentRange {
  bool valid = false;
  bool unsatisfied = false;  // "bytes */N" (416 answers)
  uint64_t first = 0;
  uint64_t last = 0;  // inclusive
  bool has_total = false;
  uint64_t total = 0;
};

// Parses "bytes a-b/N", "bytes a-b/*" or "bytes */N"; anything else gives valid == false.
ContentRange ParseContentRange(std::string_view value);

// What an attempt asked for: `length` bytes at object offset `first`.
struct AttemptRange {
  uint64_t first = 0;
  uint64_t length = 0;
};

// Checks a 2xx answer's status and headers against the attempt before its body is accepted.
// 206 needs a Content-Range equal to the request; 200 is accepted only when the attempt starts
// at byte 0 and Content-Length (if sent) equals the length (a whole-object read). Returns
// kSuccess to accept the body.
// `content_length` < 0 means the header was absent.
Outcome CheckSuccessHeaders(long status, const AttemptRange& range, std::string_view content_range,
                            int64_t content_length);

// Verdict for a libcurl error code (`curl_code` != CURLE_OK); `detail` is libcurl's message.
Outcome TransportOutcome(int curl_code, std::string_view detail);

// Verdict for a non-2xx status. `body` is the start of the answer body (for the message).
// 404: names bucket and object. 401/403: names the credential and says permission was denied.
Outcome StatusOutcome(long status, std::string_view body, std::string_view bucket,
                      std::string_view object, std::string_view credential);

}  // namespace gcsio

#endif  // CC_GCSIO_RESPONSE_CHECK_H_

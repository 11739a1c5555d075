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
  // cause "generation_changed": the generation the read is pinned to and the one the server
  // answered with (0 when unknown).
  int64_t pinned_generation = 0;
  int64_t seen_generation = 0;
  // A 206 that ended at the object's end before the attempt's end: the object's size (bytes),
  // else 0. The bytes up to it were delivered; only ranges reaching past it fail.
  uint64_t object_size = 0;
};

// An Outcome with these fields set (the ones not named keep their defaults).
Outcome MakeOutcome(Verdict verdict, std::string cause, long status, std::string message);

// The cause of every failure that means "the object was replaced while it was being read".
inline constexpr const char* kGenerationChanged = "generation_changed";

// The cause of a block whose bytes do not match the CRC-32C recorded when it was saved.
inline constexpr const char* kChecksumMismatch = "crc32c_mismatch";

// "CRC-32C mismatch in bytes 1048576-2097151 (block of 1,048,576 bytes): expected 0x1a2b3c4d,
// computed 0x5e6f7a8b".
std::string ChecksumMessage(uint64_t offset, uint64_t length, uint32_t expected, uint32_t computed);

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

// A 200 (whole object) answer to a ranged GET, as GCS sends for gzip-transcoded objects: kSuccess
// when the body can hold the range (the reader skips to range.first and keeps range.length
// bytes), else kFail ("range not honoured"). `content_length` < 0: unknown (chunked).
Outcome CheckWholeObjectAnswer(const AttemptRange& range, int64_t content_length);

// Verdict when an answer carries x-goog-generation `seen` (> 0) and the read is pinned to
// `pinned` (> 0): kSuccess when equal, else kFail with cause kGenerationChanged.
Outcome CheckGeneration(int64_t pinned, int64_t seen);

// `text` with every occurrence of `secret` (when not empty; also a start of it cut off at the
// end of `text`), the token of every "Bearer <token>" (its run of RFC 6750 token characters;
// the text after it is kept) and every Google access token ("ya29.…") replaced by
// "<redacted>", so server bodies that echo request headers never carry a token into errors.
// The one redaction rule: gcsckpt.io.redact calls it through `_gcsio.redact_credentials`.
std::string RedactCredentials(std::string_view text, std::string_view secret);

// Verdict for a libcurl error code (`curl_code` != CURLE_OK); `detail` is libcurl's message.
Outcome TransportOutcome(int curl_code, std::string_view detail);

// Verdict for a non-2xx status. `body` is the start of the answer body (for the message; any
// "Bearer" token in it is redacted). 404: names bucket and object. 401/403: names the
// credential and says permission was denied. `pinned_generation` > 0: the GET asked for that
// generation, so 404 and 412 mean the object changed during the read (kGenerationChanged).
Outcome StatusOutcome(long status, std::string_view body, std::string_view bucket,
                      std::string_view object, std::string_view credential,
                      int64_t pinned_generation = 0);

}  // namespace gcsio

#endif  // CC_GCSIO_RESPONSE_CHECK_H_

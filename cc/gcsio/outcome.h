// What every request kind's attempt ends in: the Verdict and Outcome records, the failure
// causes both kinds share, credential redaction, and the verdicts of transport errors and
// non-2xx statuses (upload_response.h adds the upload-only ones).
#ifndef CC_GCSIO_OUTCOME_H_
#define CC_GCSIO_OUTCOME_H_

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

#endif  // CC_GCSIO_OUTCOME_H_

// Judging one ranged-GET attempt: Content-Range parsing, header validation before any byte is
// written, the generation check and the checksum message (the shared verdicts: outcome.h).
#ifndef CC_GCSIO_RANGE_RESPONSE_H_
#define CC_GCSIO_RANGE_RESPONSE_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "cc/gcsio/outcome.h"

namespace gcsio {

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

}  // namespace gcsio

#endif  // CC_GCSIO_RANGE_RESPONSE_H_
